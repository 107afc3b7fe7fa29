"""``attnscale explore``: write the interactive explorer page and print its path."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import typer

from ..errors import UserError


def register(app: typer.Typer) -> None:
    @app.command("explore")
    def explore(
        out: Path = typer.Option(Path("attnscale-report/explore.html"), help="Where to write the page."),
        open_browser: bool = typer.Option(False, "--open", help="Also open it in a browser, if one exists."),
    ) -> None:
        """Write the explorer (sliders for d_k, the rule or exponent A, n, q/k std) as one offline page."""
        from .. import __version__
        from ..paths import check_file
        from ..report.build import write_text
        from ..report.render import render_explorer

        check_file(out, "--out")
        if out.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"--out must name an .html file, got {str(out)!r}")
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, render_explorer(__version__))
        print(out.resolve())
        if open_browser and not webbrowser.open(out.resolve().as_uri()):
            print("no browser found; open the file above by hand")
