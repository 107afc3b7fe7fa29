"""Matplotlib for the labs' figures: the file-only Agg backend, and one way to save."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, outdir, name: str, dpi: int = 100) -> str:
    """Lay out, write ``outdir/name``, close the figure (so none pile up); returns ``name``."""
    fig.tight_layout()
    fig.savefig(Path(outdir) / name, dpi=dpi)
    pyplot().close(fig)
    return name
