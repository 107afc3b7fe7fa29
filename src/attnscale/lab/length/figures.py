"""The length lab's figures: the needle's weight and attention's entropy against the number of keys at
initialisation (L1-L3), and trained models' accuracy and needle weight against the test length (L1, L2, L4)."""

from __future__ import annotations

import statistics
from pathlib import Path

from ...plotting import pyplot, save

LABELS = {"sqrt": "1/sqrt(d_k) alone", "sqrt+logn:34": "log-n (base 34)", "sqrt+logn:16": "log-n (base 16, trained with it)",
          "sqrt+sqrtlogn:16": "sqrt(log n) (base 16, trained with it)", "sqrt+ssmax": "SSMax (s learned)",
          "sqrt+temp:0.1:34": "Llama 4's temperature (0.1, 34)", "constant": "constant factor",
          "sqrt_log": "0.5 sqrt(2 ln n)", "log": "ln n / ln 34"}


def label(name: str) -> str:
    return LABELS.get(name, name)


def init_figure(result: dict, outdir: Path) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for name in dict.fromkeys(r["name"] for r in result["init"]):
        rows = sorted((r for r in result["init"] if r["name"] == name), key=lambda r: r["n"])
        if name == "log":
            continue  # the same numbers as log-n beyond its base
        ns = [r["n"] for r in rows]
        axes[0].semilogx(ns, [r["weight_equal"] for r in rows], "o-", ms=3, label=label(name))
        axes[1].loglog(ns, [r["weight_mc"] for r in rows], "o-", ms=3, label=label(name))
        axes[2].semilogx(ns, [r["entropy_mc"] for r in rows], "o-", ms=3, label=label(name))
    axes[0].set(xlabel="number of keys n", ylabel="weight of the needle", title="Needle among equal keys (margin 5)")
    axes[1].set(xlabel="number of keys n", ylabel="weight of the needle", title="Needle among noisy keys (margin 3)")
    axes[2].set(xlabel="number of keys n", ylabel="entropy / ln n", title="No needle: iid logits, std 1")
    axes[0].legend(fontsize=9)
    return save(fig, outdir, "length_init.png")


def trained_figure(result: dict, outdir: Path) -> str:
    plt = pyplot()
    positions = result["config"]["positions"]
    fig, axes = plt.subplots(len(positions), 2, figsize=(11, 3.8 * len(positions)), squeeze=False)
    lengths = result["lengths"]
    for row, pos in enumerate(positions):
        for best in (b for b in result["best"] if b["pos"] == pos):
            runs = [r for r in result["models"] if r["rule"] == best["rule"] and r["pos"] == pos and r["lr"] == best["lr"]]
            for col, key in enumerate(("accuracy", "needle_weight")):
                medians = [statistics.median(r[key][i] for r in runs) for i in range(len(lengths))]
                axes[row][col].semilogx(lengths, medians, "o-", ms=4, base=2, label=label(best["rule"]))
        where = "no position embedding" if pos == "none" else "RoPE"
        axes[row][0].set(xlabel="test length (tokens)", ylabel="accuracy (median over seeds)", title=f"Accuracy, {where}")
        axes[row][1].set(xlabel="test length (tokens)", ylabel="weight on the needle", title=f"Needle weight, {where}")
        axes[row][0].legend(fontsize=9)
    return save(fig, outdir, "length_trained.png")


def figures(result: dict, outdir) -> dict[str, list[str]]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    init, trained = init_figure(result, outdir), trained_figure(result, outdir)
    return {"L1": [init, trained], "L2": [init, trained], "L3": [init, trained], "L4": [trained]}
