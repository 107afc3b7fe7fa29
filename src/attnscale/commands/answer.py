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
        report: Annotated[Path | None, options.path_option(
            "A report folder or its report.json (default: attnscale-report if it holds a report, else the reference "
            "report shipped with attnscale).")] = None,
        as_json: bool = typer.Option(False, "--json", help="Print the layers as JSON (lists of sentences)."),
        show_source: bool = typer.Option(False, "--source", help="Print the interview answer itself, whole (zh: the "
                                                                   "original; en: an English rendering), with the claim "
                                                                   "IDs where it makes them."),
    ) -> None:
        """Print the 30-second answer and its four follow-ups as the measured evidence says them."""
        from .. import reference
        from ..answer import LANGS, compose, render_text

        if lang not in LANGS:
            raise UserError(f"unknown language {lang!r}; accepted: {', '.join(LANGS)}")
        if show_source:
            from ..source import source_text

            text = source_text(lang)
            print(json.dumps({"lang": lang, "source": text}, ensure_ascii=False) if as_json else text)
            return
        found, folder = reference.local_or_shipped(report)
        composed = compose(found, lang)
        if as_json:
            composed["source"] = folder or reference.provenance(found)
            print(json.dumps(composed, indent=1, ensure_ascii=False))
            return
        if folder is None:
            print(f"(No report here yet: this is {reference.provenance(found)}. Run `attnscale report` to measure "
                  "on this machine.)\n")
        print(render_text(composed))
