"""``attnscale report``: run every lab and write the report."""

from __future__ import annotations

from pathlib import Path

import typer

from .. import lab
from ..errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        preset: str = typer.Option("quick", help="quick (minutes on 2 cores) or full (up to 30 min)."),
        out: Path = typer.Option(Path("attnscale-report"), help="Folder for report.json, report.md, index.html, figures."),
        seed: int = typer.Option(0, help="Random seed; same seed, same numbers."),
        fresh: bool = typer.Option(False, "--fresh", help="Recompute even if the store has the results."),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        labs: str = typer.Option("", help="Comma-separated subset of labs (default: all)."),
    ) -> None:
        """Run the labs (reusing stored results), compute every claim's verdict, write the report."""
        from ..cli import console, progress_bar
        from ..paths import check_folder
        from ..report import build_report
        from ..runtime import check_device, check_seed

        chosen = tuple(x.strip() for x in labs.split(",") if x.strip()) or None
        if chosen:
            for name in chosen:
                lab.load(name)
        if preset not in lab.PRESET_NAMES:
            raise UserError(f"unknown preset {preset!r}; accepted: {', '.join(lab.PRESET_NAMES)}")
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
