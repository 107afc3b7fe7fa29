"""Figures a reader can read: no text below MIN_FONT, plain log ticks, nothing clipped, heat maps with their tokens and
a colour bar."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from attnscale import plotting
from attnscale.diagnosis import figures as diagnosis_figures
from attnscale.diagnosis.health import Diagnosis

SOURCE = Path(plotting.__file__).resolve().parent


def test_no_figure_sets_text_below_the_minimum():
    small = []
    for path in [*SOURCE.glob("lab/*/figures.py"), SOURCE / "lab/audit.py", SOURCE / "diagnosis/figures.py"]:
        for size in re.findall(r"fontsize=(\d+(?:\.\d+)?)", path.read_text(encoding="utf-8")):
            if float(size) < plotting.MIN_FONT:
                small.append((path.name, size))
    assert small == []
    plt = plotting.pyplot()
    assert min(plt.rcParams[key] for key in ("xtick.labelsize", "ytick.labelsize", "legend.fontsize")) >= plotting.MIN_FONT


def test_log_axes_get_plain_tick_labels_and_the_saved_area_takes_in_the_title(tmp_path):
    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.loglog([1, 4, 1000], [0.01, 1, 30])
    ax.set_title("a title long enough to run past a three-inch figure's edge on both sides")
    plotting.save(fig, tmp_path, "log.png")
    assert ax.xaxis.get_major_formatter()(4.0, 0) == "4" and ax.yaxis.get_major_formatter()(0.01, 0) == "0.01"
    assert ax.xaxis.get_minor_formatter()(4.0, 0) == ""
    from PIL import Image

    width, _ = Image.open(tmp_path / "log.png").size
    assert width > 300  # bbox_inches="tight" grew the saved area to hold the whole title (3 in x 100 dpi = 300 px)


def test_attention_heat_maps_label_their_tokens_and_carry_a_colour_bar(tmp_path, monkeypatch):
    tokens = [f"t{i}" for i in range(100)]  # more than max_labelled_tokens: every k-th token labelled
    heads = [{"layer": 0, "head": h, "normalized_entropy": 0.5, "flags": []} for h in range(2)]
    diagnosis = Diagnosis("m", "bert", 1, 2, 16, tokens, [0], heads, {}, None, [],
                          attentions=[torch.softmax(torch.randn(2, 100, 100), dim=-1)])
    drawn = []
    real_save = diagnosis_figures.save

    def keep(fig, outdir, name, **options):
        drawn.append((name, fig, [(ax.get_xticklabels(), bool(ax.images), ax.get_label()) for ax in fig.axes]))
        return real_save(fig, outdir, name, **options)

    monkeypatch.setattr(diagnosis_figures, "save", keep)
    written = diagnosis_figures.draw_heatmaps(diagnosis, tmp_path)
    assert written == ["entropy_grid.png", "attention_layer0.png"]
    name, fig, axes = drawn[1]
    colour_bars = [a for a in axes if a[2] == "<colorbar>"]
    heat = [a for a in axes if a[1] and a[2] != "<colorbar>"]
    assert len(heat) == 2 and len(colour_bars) == 1
    for labels, _, _ in heat:  # both heads sit in the lowest row: each labels its keys
        shown = [label.get_text() for label in labels]
        assert shown == tokens[::5]  # 100 tokens, at most 24 labelled: every 5th


def test_a_saved_figure_is_an_indexed_png_that_looks_like_matplotlibs(tmp_path):
    """The PNG on disk has at most 256 colours, differs from matplotlib's own RGBA rendering by under 1 of 255 per
    channel on average and nowhere by more than 24 (a rare colour, the top of a colour bar, kept too), white stays
    white, and the file is smaller."""
    import io

    import numpy as np
    from PIL import Image

    plt = plotting.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(6, 2.5))
    for rule in range(5):
        xs = np.linspace(0, 1, 50)
        axes[0].plot(xs, xs ** (rule + 1), marker="o", label=f"rule {rule}")
    axes[0].legend()
    shown = axes[1].imshow(torch.softmax(torch.randn(32, 32, generator=torch.Generator().manual_seed(0)), -1).numpy(),
                           cmap="magma")
    fig.colorbar(shown, ax=axes[1])
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=100)
    plotting.save_to(fig, tmp_path / "f.png", dpi=100, fitted=True)
    reference, saved = Image.open(drawn).convert("RGB"), Image.open(tmp_path / "f.png")
    assert saved.mode == "P" and saved.size == reference.size and len(saved.getcolors(1 << 24)) <= plotting.PALETTE
    difference = np.abs(np.asarray(saved.convert("RGB"), dtype=int) - np.asarray(reference, dtype=int))
    white = (np.asarray(reference) == 255).all(axis=-1)
    assert difference.mean() < 1.0 and difference.max() <= 24 and difference[white].max() == 0
    assert (tmp_path / "f.png").stat().st_size < len(drawn.getvalue())


def test_a_transparent_picture_keeps_its_alpha():
    import io

    from PIL import Image

    picture = Image.new("RGBA", (4, 4), (255, 0, 0, 128))
    png = io.BytesIO()
    picture.save(png, format="PNG")
    assert plotting.palette_png(png.getvalue()) == png.getvalue()
