"""``attnscale explain CLAIM``: where a claim's verdict comes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options

DEFAULT_REPORT = Path("attnscale-report")  # where `attnscale report` writes, and `answer` reads, by default


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(
        claim: str = typer.Argument(..., help="A claim ID, C01..C18, or a statement beyond the source, L1..L4."),
        report: Annotated[Optional[Path], options.path_option(
            "A report folder or its report.json, for the verdict, evidence, numbers and figures (default: "
            "./attnscale-report when it holds one).")] = None,
        as_json: bool = typer.Option(False, "--json", help="Print it as JSON."),
    ) -> None:
        """Show what decides a claim: its parts (role, lab, setting), the labs, judge functions (file and line), thresholds, numbers, the
        command that reruns it, and the answer sentences it feeds."""
        from ..answer import load_report
        from ..explain import explain as explained, render

        if report is None and (DEFAULT_REPORT / "report.json").is_file():
            report = DEFAULT_REPORT
        found = explained(claim, load_report(report) if report is not None else None)
        print(json.dumps(found, indent=1, default=str) if as_json else render(found))
