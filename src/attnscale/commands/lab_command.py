"""The command a lab without options of its own gets: run its preset, print its tables and findings."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import lab
from ..paths import check_folder
from ..runtime import check_device, check_seed
from ..terminal import console, print_rows, progress_bar
from . import options


def run_lab_command(name: str, preset: str, seed: int, device: str, as_json: bool, figures: Path | None) -> None:
    """Run one lab's preset; print its tables and findings (or the whole result as JSON)."""
    module = lab.load(name)
    check_device(device)
    config = lab.config_for(name, preset, seed=check_seed(seed), device=device)
    if figures is not None:
        check_folder(figures, "--figures")
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(name, total=1.0, note="")
        result = module.run(config, progress=lambda f, m: bar.update(task, completed=f, note=m))
        bar.update(task, completed=1.0)
    findings = module.judge(result)
    if as_json:
        payload = {"lab": name, "preset": preset, "seed": seed, "result": result,
                   "findings": {cid: f.as_dict() for cid, f in findings.items()}}
        sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
        return
    for title, rows in module.tables(result).items():
        print_rows(f"{name}: {title}", rows)
    for claim_id, finding in findings.items():
        console.print(f"{claim_id} {finding.line}: {finding.evidence}", markup=False, highlight=False)
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
        for paths in module.figures(result, figures).values():
            for path in paths:
                console.print(f"figure: {figures / path}")
    console.print(f"{name} took {time.perf_counter() - start:.1f} s")


def make_lab_command(name: str):
    def command(preset: options.Preset = "quick", seed: options.Seed = 0, device: options.Device = "cpu",
                as_json: options.Json = False, figures: options.Figures = None) -> None:
        run_lab_command(name, options.preset_name(preset), seed, device, as_json, figures)

    command.__doc__ = f"Run the {name} lab and print its measurements and findings."
    return command
