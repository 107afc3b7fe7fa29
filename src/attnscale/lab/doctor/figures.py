"""The doctor lab's figures: the normalised entropy per head and the 1/n flag (C14), the flag along
training from scratch (C14), the factor measured in each model (C13), the logits at initialisation
(C10), and the trained model with its factor replaced."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ...plotting import pyplot, save_to
from .experiment import HIST_EDGES, mean_trajectory, runs_of
from .verdicts import FIRES_SHARE


def figure_c14(result: dict, path) -> None:
    plt = pyplot()
    pre = result["pretrained"]
    conditions = pre["conditions"]
    layers, heads = pre["n_layers"], pre["n_heads"]
    fig, axes = plt.subplots(1, len(conditions) + 1, figsize=(1.9 * len(conditions) + 3.2, 3.0), dpi=100,
                             gridspec_kw={"width_ratios": [1] * len(conditions) + [1.6]}, layout="constrained")
    for ax, row in zip(axes, conditions):
        grid = torch.tensor(row["head_entropy"]).reshape(layers, heads).numpy()
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_title(f"{row['condition']}\nfactor {row['factor']:.3g}", fontsize=8)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.tick_params(labelsize=6)
    fig.colorbar(image, ax=list(axes[:len(conditions)]), fraction=0.02, pad=0.01)
    bar = axes[-1]
    bar.barh(range(len(conditions)), [row["over_smoothed_heads"] for row in conditions], color="tab:blue")
    bar.set_yticks(range(len(conditions)))
    bar.set_yticklabels([row["condition"] for row in conditions], fontsize=8)
    bar.axvline(FIRES_SHARE, color="gray", ls="--", lw=0.8)
    bar.set_xlim(0, 1)
    bar.set_xlabel("share of heads over-smoothed", fontsize=8)
    bar.tick_params(labelsize=6)
    fig.suptitle("C14: normalised entropy per head (1 = uniform, every key 1/n)", fontsize=9)
    save_to(fig, path)


def figure_c14_training(result: dict, path) -> None:
    """The flag and the entropy along training, for the correct and the too-strong factor: each
    seed faint, the mean over seeds bold."""
    plt = pyplot()
    fig, (flagged, entropy) = plt.subplots(1, 2, figsize=(8, 3.0), dpi=100, layout="constrained")
    for colour, rule in zip(("C0", "C1"), ("sqrt", result["too_strong"])):
        runs = runs_of(result, rule)
        for run in runs:
            steps = [c["step"] for c in run["trajectory"]]
            flagged.plot(steps, [c["over_smoothed_heads"] for c in run["trajectory"]], color=colour, alpha=0.2, lw=0.8)
            entropy.plot(steps, [c["normalized_entropy"] for c in run["trajectory"]], color=colour, alpha=0.2, lw=0.8)
        mean = mean_trajectory(runs)
        steps = [c["step"] for c in mean]
        label = f"{rule} (factor {runs[0]['factor']:.3g}), mean of {len(runs)} seeds"
        flagged.plot(steps, [c["over_smoothed_heads"] for c in mean], color=colour, marker="o", label=label)
        entropy.plot(steps, [c["normalized_entropy"] for c in mean], color=colour, marker="o", label=label)
    flagged.axhline(FIRES_SHARE, color="gray", ls="--", lw=0.8)
    flagged.set(xlabel="training step", ylabel="share of heads over-smoothed", ylim=(-0.05, 1.05))
    entropy.set(xlabel="training step", ylabel="mean normalised entropy", ylim=(0, 1.02))
    flagged.legend(fontsize=8)
    fig.suptitle(f"C14: the 1/n flag while training on recall (d_head {result['scratch']['runs'][0]['d_head']})",
                 fontsize=9)
    save_to(fig, path)


def figure_c13(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for index, row in enumerate(result["probe"]):
        ratio = [layer["factor"] * math.sqrt(row["d_k"]) for layer in row["per_layer"]]
        ax.scatter([index] * len(ratio), ratio, s=25, label=f"{row['model']}: {row['finding']}")
    d_k = result["probe"][0]["d_k"]
    for value, name in ((1.0, "1/sqrt(d_k)"), (d_k**-0.5, "1/d_k"), (d_k**0.5, "none")):
        ax.axhline(value, color="gray", ls=":", lw=0.8)
        ax.text(len(result["probe"]) - 0.5, value, name, fontsize=8, va="bottom", ha="right")
    ax.set_yscale("log")
    ax.set_yticks([d_k**-0.5, 1.0, d_k**0.5])
    ax.set_yticklabels([f"{d_k**-0.5:.3g}", "1", f"{d_k**0.5:.3g}"])
    ax.minorticks_off()
    ax.set_xticks(range(len(result["probe"])))
    ax.set_xticklabels([row["model"] for row in result["probe"]])
    ax.set_ylabel("measured factor x sqrt(d_k)")
    ax.set_title(f"C13: factor measured in transformers {result['transformers_version']} (d_k = {d_k})", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    save_to(fig, path)


def figure_c10(result: dict, path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=100)
    centers = [(a + b) / 2 for a, b in zip(HIST_EDGES[:-1], HIST_EDGES[1:])]
    for row in result["init"]:
        total = sum(row["hist"]) or 1
        ax.plot(centers, [c / total for c in row["hist"]], marker=".",
                label=f"{row['model']}: factor {row['factor']:.3g}, std {row['logit_std']:.3g}")
    ax.set_xlabel("factor * q.k at initialisation (first layer; ends clipped to +-4)")
    ax.set_ylabel("share")
    ax.set_title("C10: T5 (no factor, folded init) vs BERT of the same size", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_to(fig, path)


def figure_counterfactual(result: dict, path) -> None:
    plt = pyplot()
    rows = result["pretrained"]["counterfactual"]
    fig, ax = plt.subplots(figsize=(5.5, 3.0), dpi=100)
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["pooled_cosine"] for r in rows], width=0.4, label="sentence embedding cosine")
    ax.bar([i + 0.2 for i in x], [r["entropy_change"] for r in rows], width=0.4, label="change of mean norm. entropy")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{r['scale']}\n({r['factor']:.3g})" for r in rows], fontsize=8)
    ax.set_title(f"{result['pretrained']['model_type']} with its factor replaced", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_to(fig, path)


def figures(result: dict, outdir) -> dict[str, list[str]]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    drawn = (("C14", "doctor_c14.png", figure_c14), ("C14", "doctor_c14_training.png", figure_c14_training),
             ("doctor", "doctor_c13.png", figure_c13), ("C10", "doctor_c10.png", figure_c10),
             ("doctor", "doctor_counterfactual.png", figure_counterfactual))
    out = {}
    for key, name, draw in drawn:
        draw(result, outdir / name)
        out.setdefault(key, []).append(name)
    return out
