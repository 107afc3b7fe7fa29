"""``attnscale answer``: the interview answer, rebuilt from the latest report."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("answer")
    def answer(
        lang: str = typer.Option("en", help="en or zh."),
        report: Path = typer.Option(Path("attnscale-report"), help="A report folder or its report.json."),
    ) -> None:
        """Print the 30-second answer and its three follow-ups as the measured evidence says them."""
        from ..answer import LANGS, compose, load_report, render_text

        if lang not in LANGS:
            raise UserError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
        print(render_text(compose(load_report(report), lang)))
