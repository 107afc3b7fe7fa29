"""The saturation lab's figures: the logit std and the share of logits in [-3, 3] by rule (C04),
the normalised entropy (C05), saturation and the gradient reaching W_q (C06), the softmax
derivative (C16), and which exponent keeps the std fixed (C18)."""

from __future__ import annotations

from pathlib import Path

from ...plotting import pyplot, save
from .verdicts import pick, reference_n


def _rule_rows(result: dict, n: int):
    for r in ("none", "sqrt", "inv_d"):
        rows = sorted(pick(result["sweep"], rule=r, n=n), key=lambda x: x["d_k"])
        if rows:
            yield r, rows
    const = sorted([x for x in result["sweep"] if x["exponent"] is None and x["n"] == n], key=lambda x: x["d_k"])
    if const:
        yield const[0]["spec"], const


def figures(result: dict, outdir) -> dict[str, list[str]]:
    plt = pyplot()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    n = reference_n(result)
    out = {}

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in _rule_rows(result, n):
        d = [r["d_k"] for r in rows]
        axes[0].loglog(d, [r["logit_std"] for r in rows], "o-", ms=3, label=name)
        axes[1].semilogx(d, [100 * r["share_within_3"] for r in rows], "o-", ms=3, label=name)
    axes[0].set(xlabel="d_k", ylabel="logit std", title="softmax input std by rule")
    axes[1].set(xlabel="d_k", ylabel="% of logits in [-3, 3]", title=f"n = {n}")
    axes[0].legend(fontsize=8)
    out["C04"] = [save(fig, outdir, "saturation_c04.png")]

    ns = result["config"]["ns"]
    fig, axes = plt.subplots(1, len(ns), figsize=(4 * len(ns), 3.6), squeeze=False)
    for ax, nn_ in zip(axes[0], ns):
        for name, rows in _rule_rows(result, nn_):
            ax.semilogx([r["d_k"] for r in rows], [r["normalized_entropy"] for r in rows], "o-", ms=3, label=name)
        ax.set(xlabel="d_k", ylabel="mean normalised entropy", title=f"n = {nn_}", ylim=(0, 1.02))
    axes[0][0].legend(fontsize=8)
    out["C05"] = [save(fig, outdir, "saturation_c05.png")]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in _rule_rows(result, n):
        axes[0].semilogx([r["d_k"] for r in rows], [r["saturated_share"] for r in rows], "o-", ms=3, label=name)
    axes[0].set(xlabel="d_k", ylabel="share of rows with max p > 0.99", title=f"saturation, n = {n}")
    axes[0].legend(fontsize=8)
    for name in ("none", "sqrt", "inv_d"):
        rows = sorted(pick(result["gradient"], rule=name), key=lambda r: r["d_k"])
        if rows:
            axes[1].loglog([r["d_k"] for r in rows], [r["grad_wq_output"] for r in rows], "o-", ms=3, label=name)
    axes[1].set(xlabel="d_k", ylabel="||dL/dW_q||_F", title=f"gradient reaching W_q (n = {result['config']['grad_n']})")
    axes[1].legend(fontsize=8)
    out["C06"] = [save(fig, outdir, "saturation_c06.png")]

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for key, c in result["derivative"].items():
        axes[0].plot(c["x"], c["p"], label=f"n = {key}")
        axes[1].plot(c["x"], c["diag"], label=f"n = {key}")
        axes[2].plot(c["x"], c["frobenius"], label=f"n = {key}")
    for ax, (lo, hi) in zip(axes[:2], ((0.05, 0.95), (0.05, 0.25))):
        ax.axhspan(lo, hi, color="grey", alpha=0.15, label="the interview answer's range")
    axes[0].set(xlabel="logit x (others fixed)", ylabel="p_x", title="probability")
    axes[1].set(xlabel="logit x", ylabel="p_x (1 - p_x)", title="diagonal derivative")
    axes[2].set(xlabel="logit x", ylabel="||diag(p) - p p^T||_F", title="full Jacobian")
    axes[0].legend(fontsize=8)
    out["C16"] = [save(fig, outdir, "saturation_c16.png")]

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    powers = sorted([r for r in result["slopes"] if r["exponent"] is not None and r["n"] == n],
                    key=lambda r: r["exponent"])
    a = [r["exponent"] for r in powers]
    axes[0].plot(a, [r["slope"] for r in powers], "o", label="measured")
    axes[0].plot(a, [0.5 - x for x in a], "-", label="theory 0.5 - A")
    axes[0].axhline(0, color="k", lw=0.5)
    axes[0].set(xlabel="exponent A in d_k^-A", ylabel="slope of log std vs log d_k", title="which A keeps the std fixed")
    axes[0].legend()
    axes[1].plot(a, [r["entropy_spread"] for r in powers], "o-")
    axes[1].set(xlabel="exponent A", ylabel="max - min normalised entropy over d_k", title=f"n = {n}")
    out["C18"] = [save(fig, outdir, "saturation_c18.png")]
    return out
