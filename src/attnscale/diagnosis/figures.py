"""The health check's figures: the entropy grid and per-layer attention maps (drawn for the CLI)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ..plotting import pyplot, save
from .health import Diagnosis

FLAG_MARKS = {"over-smoothed": "O", "saturated": "S", "sink": "K"}


def heatmap_names(outdir) -> tuple[str, ...]:
    """The names in ``outdir`` that :func:`draw_heatmaps` may write over: entropy_grid.png and any
    attention_layer<L>.png already there (how many layers a model has is known only once it ran)."""
    found = sorted(path.name for path in Path(outdir).glob("attention_layer*.png")) if Path(outdir).is_dir() else []
    return ("entropy_grid.png", *found)


def draw_heatmaps(diagnosis: Diagnosis, outdir, max_labelled_tokens: int = 24) -> list[str]:
    """entropy_grid.png (layer x head normalised entropy) and attention_layer<L>.png (each
    head's attention map over the tokens).  Returns the paths written, relative to outdir."""
    from matplotlib.colors import PowerNorm

    plt = pyplot()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    grid = torch.tensor([[h["normalized_entropy"] for h in diagnosis.heads if h["layer"] == layer]
                         for layer in range(diagnosis.n_layers)]).numpy()
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * grid.shape[1], 1.2 + 0.45 * grid.shape[0]), dpi=100)
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for (layer, head), value in ((divmod(i, grid.shape[1]), v) for i, v in enumerate(grid.flatten().tolist())):
        flags = diagnosis.heads[layer * grid.shape[1] + head]["flags"]
        mark = "".join(FLAG_MARKS[f] for f in flags)
        ax.text(head, layer, mark, ha="center", va="center", color="white" if value < 0.6 else "black", fontsize=8)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]))
    ax.set_title("normalised entropy (O over-smoothed, S saturated, K sink)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    written = [save(fig, outdir, "entropy_grid.png")]

    n = len(diagnosis.tokens)
    step = max(1, math.ceil(n / max_labelled_tokens))  # every token labelled up to max_labelled_tokens, else every step-th
    ticks = list(range(0, n, step))
    labels = [diagnosis.tokens[i] for i in ticks]
    for layer, probs in enumerate(diagnosis.attentions):
        heads = probs.shape[0]
        cols = min(4, heads)
        rows = math.ceil(heads / cols)
        # token labels and ticks on the outer axes only (every head has the same tokens; the inner heads get no
        # ticks, each of which matplotlib builds as objects of its own), and a fixed layout: a layout engine
        # measuring every label of every head cost 4x the diagnosis itself
        label_room = 0.075 * max((len(str(t)) for t in labels), default=1) + 0.5  # inches for the token labels
        panel = max(2.2, 0.09 * len(ticks) + 0.6)
        width, height = panel * cols + label_room + 1.4, panel * rows + label_room + 0.9
        fig, axes = plt.subplots(rows, cols, figsize=(width, height), dpi=100, squeeze=False)
        fig.subplots_adjust(left=(label_room + 0.35) / width, right=1 - 1.0 / width, bottom=(label_room + 0.3) / height,
                            top=1 - 0.6 / height, wspace=0.08, hspace=0.25)
        for head in range(rows * cols):
            ax = axes[head // cols][head % cols]
            if head >= heads:
                ax.axis("off")
                continue
            image = ax.imshow(probs[head].numpy(), cmap="magma", norm=PowerNorm(0.5, vmin=0.0, vmax=1.0),
                              aspect="auto", interpolation="nearest")
            # a title at a fixed height: matplotlib would otherwise measure every tick label of the shared axes to
            # place each of the heads' titles (half the figure's cost)
            ax.set_title(f"L{layer} H{head} " + " ".join(diagnosis.heads[layer * heads + head]["flags"]), y=1.0, pad=4)
            if head // cols == rows - 1 or head + cols >= heads:  # the lowest head of its column
                ax.set_xticks(ticks)
                ax.set_xticklabels(labels, rotation=90)
                ax.set_xlabel("key")
            else:
                ax.set_xticks([])
            if head % cols == 0:
                ax.set_yticks(ticks)
                ax.set_yticklabels(labels)
                ax.set_ylabel("query")
            else:
                ax.set_yticks([])
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.025, pad=0.01,
                     label="attention weight (sqrt colour scale)")
        fig.suptitle(f"layer {layer}: attention weights (rows: queries, columns: keys"
                     + (f"; one token in {step} labelled" if step > 1 else "") + ")")
        written.append(save(fig, outdir, f"attention_layer{layer}.png", tight=False, fitted=True))
    return written
