"""``attnscale report``: run every lab and write the report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import lab, timings
from . import options


# read once for the help text (at module level: the annotations below are evaluated in this module's names)
MEASURED = timings.load()


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        preset: Annotated[options.PresetName, typer.Option(
            help=f"quick ({timings.preset_phrase('quick', MEASURED)}) or full (more seeds, the LM and 8-layer runs, "
                 f"{timings.preset_phrase('full', MEASURED)}), as measured (docs/benchmarks.md).")] = "quick",
        out: Annotated[Path, options.path_option("Folder for report.json, report.md, index.html, figures.")] = Path(
            "attnscale-report"),
        seed: options.Seed = 0,
        fresh: bool = typer.Option(False, "--fresh", help="Recompute even if the store has the results."),
        device: options.Device = "cpu",
        labs: str = typer.Option("", help="Comma-separated subset of labs (default: all)."),
    ) -> None:
        """Run the labs (reusing stored results), compute every claim's verdict, write the report."""
        from ..terminal import console, progress_bar
        from ..paths import check_folder
        from ..report import build_report
        from ..runtime import check_device, check_seed

        chosen = tuple(x.strip() for x in labs.split(",") if x.strip()) or None
        if chosen:
            for name in chosen:
                lab.load(name)
        preset = options.preset_name(preset)
        check_device(device)
        check_seed(seed)
        check_folder(out, "--out")
        with progress_bar() as bar:
            tasks = {}

            def progress(name: str, fraction: float, message: str) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(name, total=1.0, note="")
                bar.update(tasks[name], completed=fraction, note=message)

            report = build_report(preset=preset, seed=seed, out=out, fresh=fresh, device=device, labs=chosen,
                                  progress=progress)
        for name, info in report["labs"].items():
            runs = ""
            if info.get("runs") and not info["cached"]:
                reused = info.get("runs_reused", 0)
                trained = info["runs"] - reused
                runs = f"  ({info['runs']} training runs" + (
                    f", {reused} reused from runs.sqlite" if reused else "") + (
                    f", {trained / info['seconds']:.2f} runs/s trained)" if trained else ")")
            console.print(f"  {name:<11} {info['seconds']:7.1f} s{'  (stored result reused)' if info['cached'] else ''}{runs}",
                          markup=False, highlight=False)
        counts = {}
        for claim in report["claims"]:
            counts[claim["verdict"]] = counts.get(claim["verdict"], 0) + 1
        console.print("verdicts: " + ", ".join(f"{v} {n}" for v, n in counts.items()))
        console.print(f"report written to {out / 'index.html'} (and report.md, report.json) in {report['seconds']:.1f} s")
