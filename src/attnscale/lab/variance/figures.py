"""The variance lab's figures: the std of q.k measured vs the closed form and after each scale
rule, the q component variance per initialisation, the tail shares, multiply vs divide, small d_k."""

from __future__ import annotations

import math
from pathlib import Path

from ...plotting import pyplot, save
from .experiment import GAUSS_BEYOND_3, RULES
from .verdicts import family_rows


def figures(result: dict, outdir) -> dict[str, list[str]]:
    plt = pyplot()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out = {}

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for family in result["families"]:
        rows = family_rows(result, family)
        if not rows:
            continue
        d = [r["d_k"] for r in rows]
        line, = axes[0].loglog(d, [r["std"] for r in rows], "o", ms=4, label=family)
        axes[0].loglog(d, [math.sqrt(r["exact_var"]) for r in rows], "-", color=line.get_color(), lw=0.8)
    axes[0].set(xlabel="d_k", ylabel="std of q.k", title="measured (dots) vs closed form (lines)")
    axes[0].legend(fontsize=8)
    rows = family_rows(result, "gaussian")
    if rows:
        d = [r["d_k"] for r in rows]
        for rule in RULES:
            axes[1].loglog(d, [r[f"std_{rule}"] for r in rows], "o-", ms=4, label=rule)
    axes[1].set(xlabel="d_k", ylabel="std of the softmax input", title="gaussian q, k: after each scale rule")
    axes[1].legend()
    out["C02"] = [save(fig, outdir, "variance_c02.png")]
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = [r["init"] for r in result["init"]]
    ax.bar(range(len(names)), [r["var"] for r in result["init"]], label="measured")
    ax.plot(range(len(names)), [r["closed_form_var"] for r in result["init"]], "k_", ms=30, mew=2, label="closed form")
    ax.axhline(1, color="r", ls="--", lw=1, label="claimed: 1")
    ax.set_xticks(range(len(names)), [n.replace(" ", "\n", 1) for n in names], fontsize=8)
    ax.set(ylabel="q component variance", title="unit-variance input through the q projection")
    ax.legend(fontsize=8)
    out["C01"] = [save(fig, outdir, "variance_c01.png")]
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for family in result["families"]:
        rows = family_rows(result, family)
        if rows:
            ax.semilogx([r["d_k"] for r in rows], [100 * r["beyond_3std"] for r in rows], "o-", ms=3, label=family)
    rows = family_rows(result, "gaussian")
    if rows:
        ax.semilogx([r["d_k"] for r in rows], [100 * r["beyond_abs3"] for r in rows], "k--",
                    label="gaussian: |q.k| > 3 (unscaled)")
    ax.axhline(100 * GAUSS_BEYOND_3, color="r", ls=":", label="Gaussian beyond 3 std: 0.27%")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0)
    ax.set(xlabel="d_k", ylabel="% of q.k", title="share beyond 3 std (solid) vs beyond |3| (dashed)")
    ax.legend(fontsize=8)
    out["C03"] = [save(fig, outdir, "variance_c03.png")]
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = list(result["ulp"])
    for i, way in enumerate(("tensor", "scalar")):
        ax.bar([j + 0.4 * i for j in range(len(names))], [100 * result["ulp"][n][way]["share_differ"] for n in names],
               width=0.4, label=f"factor as {way}")
    ax.set_xticks([j + 0.2 for j in range(len(names))], names)
    ax.set(ylabel="% of elements that differ (by 1 ulp)", title="x * (1/sqrt(d_k)) vs x / sqrt(d_k)")
    ax.legend()
    out["C08"] = [save(fig, outdir, "variance_c08.png")]
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    small = result["small_dk"]
    d = [r["d_k"] for r in small]
    axes[0].semilogx(d, [r["entropy_sqrt"] for r in small], "o-", label="sqrt", base=2)
    axes[0].semilogx(d, [r["entropy_none"] for r in small], "s-", label="none", base=2)
    axes[0].set(xlabel="d_k", ylabel="mean normalised entropy", title=f"n = {small[0]['n']} keys")
    axes[0].legend()
    axes[1].semilogx(d, [r["tv_distance"] for r in small], "o-", base=2, label="TV(p_sqrt, p_none)")
    axes[1].semilogx(d, [r["output_rms_diff"] for r in small], "s-", base=2, label="output RMS difference (std of v)")
    axes[1].set(xlabel="d_k", title="with vs without 1/sqrt(d_k)")
    axes[1].legend()
    out["C15"] = [save(fig, outdir, "variance_c15.png")]
    plt.close(fig)
    return out
