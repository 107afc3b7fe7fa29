"""``attnscale answer``: the interview answer, rebuilt from the latest report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from . import options


def register(app: typer.Typer) -> None:
    @app.command("answer")
    def answer(
        lang: str = typer.Option("en", help="en or zh."),
        report: Annotated[Path, options.path_option("A report folder or its report.json.")] = Path("attnscale-report"),
        as_json: bool = typer.Option(False, "--json", help="Print the layers as JSON (lists of sentences)."),
    ) -> None:
        """Print the 30-second answer and its three follow-ups as the measured evidence says them."""
        from ..answer import LANGS, compose, load_report, render_text

        if lang not in LANGS:
            raise UserError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
        composed = compose(load_report(report), lang)
        print(json.dumps(composed, indent=1, ensure_ascii=False) if as_json else render_text(composed))
