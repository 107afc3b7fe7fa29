"""``attnscale explain CLAIM``: where a claim's verdict comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(
        claim: str = typer.Argument(..., help="A claim ID, C01..C18."),
        report: Annotated[Optional[Path], options.path_option(
            "A report folder or its report.json, for the verdict and figures.")] = None,
    ) -> None:
        """Show what decides a claim: its parts (role, lab, setting), the labs, judge functions (file and line), thresholds, numbers, the
        command that reruns it, and the answer sentences it feeds."""
        from ..answer import load_report
        from ..explain import explain as explained, render

        print(render(explained(claim, load_report(report) if report is not None else None)))
