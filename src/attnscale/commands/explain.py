"""``attnscale explain CLAIM``: where a claim's verdict comes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import options

def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(
        claim: str = typer.Argument(..., help="A claim ID, C01..C18, or a statement beyond the source, L1..L4."),
        report: Annotated[Optional[Path], options.path_option(
            "A report folder or its report.json, for the verdict, evidence, numbers and figures (default: "
            "./attnscale-report when it holds one).")] = None,
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Also the code that decides it: the judge "
                                     "functions and helpers (file and line), thresholds, numbers, answer sentences."),
        as_json: bool = typer.Option(False, "--json", help="Print it as JSON (everything --verbose shows)."),
    ) -> None:
        """Show a claim, its verdict, its parts with what was measured, and the evidence; --verbose adds the judge
        functions, thresholds and numbers that decide it."""
        from .. import reference
        from ..explain import explain as explained, render, render_for_a_learner

        report_read, folder = reference.local_or_shipped(report)
        found = explained(claim, report_read)
        if folder is not None:
            found["report_source"] = f"the report in {folder}"
        else:
            found.pop("figures", None)  # the reference ships without its figures
            found["report_source"] = (reference.provenance(report_read)
                                      + "; run `attnscale report` to measure on this machine")
        if as_json:
            print(json.dumps(found, indent=1, default=str))
        else:
            print(render(found) if verbose else render_for_a_learner(found))
