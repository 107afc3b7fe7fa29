"""``attnscale explore``: write the interactive explorer page and print its path."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from . import options


def register(app: typer.Typer) -> None:
    @app.command("explore")
    def explore(
        out: Annotated[Path, options.path_option("Where to write the page.")] = Path("attnscale-report/explore.html"),
        open_browser: bool = typer.Option(False, "--open", help="Also open it in a browser, if one exists."),
    ) -> None:
        """Write the explorer (sliders for d_k, the rule or exponent A, n, q/k std) as one offline page."""
        from .. import __version__
        from ..paths import check_file, write_text_atomic
        from ..report.render import render_explorer

        check_file(out, "--out")
        if out.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"--out must name an .html file, got {str(out)!r}")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, render_explorer(__version__))
        print(out.resolve())
        if open_browser and not webbrowser.open(out.resolve().as_uri()):
            print("no browser found; open the file above by hand")
