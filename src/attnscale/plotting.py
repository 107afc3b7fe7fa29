"""Matplotlib for the labs' figures: the file-only Agg backend, and one way to save (atomically)."""

from __future__ import annotations

from pathlib import Path


MIN_FONT = 8  # points: the smallest text a figure shows (at 100 dpi, about 11 px)
READABLE = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": MIN_FONT,
            "ytick.labelsize": MIN_FONT, "legend.fontsize": MIN_FONT, "legend.title_fontsize": MIN_FONT,
            "figure.titlesize": 11}


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use, with text no smaller
    than MIN_FONT."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(READABLE)
    import matplotlib.pyplot as plt

    return plt


def plain_log_ticks(fig) -> None:
    """Log axes labelled with plain numbers (0.01, 4, 1000), not 4x10^0, and no labels on minor ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(plain)
                axis.set_minor_formatter(NullFormatter())


def save_to(fig, path, dpi: int | None = None, fitted: bool = False) -> None:
    """Write the figure to ``path`` atomically (a kill or a full disk leaves no partial PNG) and close it; the
    saved area takes in every title and label (nothing clipped), measured by a drawing of its own unless the
    figure is ``fitted`` (laid out by hand with room for its labels: one drawing instead of two).  A PNG is
    written with a palette of its own 256 colours (see ``palette_png``)."""
    import io

    from .paths import write_atomic

    path = Path(path)
    plain_log_ticks(fig)
    try:
        drawn, png = io.BytesIO(), path.suffix.lower() == ".png"
        fig.savefig(drawn, format=path.suffix.lstrip(".").lower() or "png", dpi=dpi or "figure",
                    bbox_inches=None if fitted else "tight",
                    **({"pil_kwargs": {"compress_level": 1}} if png else {}))  # read back at once: fast, not small
        data = palette_png(drawn.getvalue()) if png else drawn.getvalue()
        write_atomic(path, lambda tmp: tmp.write_bytes(data))
    finally:
        pyplot().close(fig)


PALETTE = 256


def palette_png(png: bytes) -> bytes:
    """The same opaque picture as a PNG of PALETTE indexed colours: a figure of lines, text and colour maps has few
    colours besides its anti-aliased edges.  The palette covers the picture's colours evenly (Pillow's maximum
    coverage), not by how many pixels have them, so a rare colour (the top of a colour bar, a bright cell) moves as
    little as a common one: on the report's figures and the health check's heat maps, under 1 of 255 per channel on
    average and at most 18, white exactly white, the file about a third of matplotlib's RGBA one.  A picture with
    any transparency is returned as it came."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as picture:
        if picture.mode == "RGBA" and picture.getchannel("A").getextrema()[0] < 255:
            return png
        indexed = picture.convert("RGB").quantize(colors=PALETTE, method=Image.Quantize.MAXCOVERAGE,
                                                  dither=Image.Dither.NONE)
    out = io.BytesIO()
    indexed.save(out, format="PNG")
    return out.getvalue()


def save(fig, outdir, name: str, dpi: int = 100, tight: bool = True, fitted: bool = False) -> str:
    """Lay out (``tight``: matplotlib's tight layout; a figure with a shared colour bar lays itself out),
    write ``outdir/name``, close the figure (so none pile up); returns ``name``."""
    if tight:
        fig.tight_layout()
    save_to(fig, Path(outdir) / name, dpi, fitted)
    return name
