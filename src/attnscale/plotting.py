"""Matplotlib for the labs' figures: the file-only Agg backend, and one way to save (atomically)."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_to(fig, path, dpi: int | None = None) -> None:
    """Write the figure to ``path`` atomically (a kill or a full disk leaves no partial PNG) and close it."""
    from .paths import write_atomic

    try:
        write_atomic(Path(path), lambda tmp: fig.savefig(tmp, dpi=dpi or "figure"))
    finally:
        pyplot().close(fig)


def save(fig, outdir, name: str, dpi: int = 100) -> str:
    """Lay out, write ``outdir/name``, close the figure (so none pile up); returns ``name``."""
    fig.tight_layout()
    save_to(fig, Path(outdir) / name, dpi)
    return name
