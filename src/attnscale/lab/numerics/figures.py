"""The numerics lab's figures: the logit range and where float16 attention gives non-finite
outputs (C11), what clamping costs (C12), and each implementation's error against the plain math."""

from __future__ import annotations

from ...plotting import pyplot, save
from .experiment import FP16_MAX, LN_FP16_MAX, SCALES
from .verdicts import KL_CHEAP, STANDARD_IMPLS, impl_names_of, impl_rows, worst_nonfinite


def _heatmap(ax, values, row_labels, col_labels, title, fmt="{:.2g}"):
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    image = ax.imshow(data, cmap="Reds", vmin=0, vmax=max(1e-12, np.nanmax(data)) if np.isfinite(data).any() else 1,
                      aspect="auto")
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
    top = np.nanmax(data) if np.isfinite(data).any() else 1.0
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, "-" if v is None else fmt.format(v), ha="center", va="center", fontsize=8,
                    color="white" if v is not None and v > 0.6 * top else "black")
    ax.set_title(title, fontsize=9)
    return image


def _logits_finite(result: dict, scenario: str, scale: str) -> bool:
    return all(r["logits_finite"] for r in impl_rows(result, finite_logits=None, scenario=scenario, scale=scale))


def _figure_c11(result: dict, outdir) -> str:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for d_k in sorted({r["d_k"] for r in result["grid"]}):
        for outliers, style in ((False, "-"), (True, "--")):
            rows = sorted((r for r in result["grid"] if r["d_k"] == d_k and r["outliers"] == outliers
                           and r["scale"] == "sqrt"), key=lambda r: r["std"])
            label = f"d_k={d_k}" + (" +outliers" if outliers else "")
            left.plot([r["std"] for r in rows], [r["max_abs_logit"] for r in rows], style, marker="o", label=label)
    left.axhline(result["claimed_range"], color="k", lw=1, ls=":", label=f"claimed {result['claimed_range']:g}")
    left.axhline(LN_FP16_MAX, color="r", lw=1, ls=":", label="ln 65504 = 11.09")
    left.axhline(FP16_MAX, color="m", lw=1, ls=":", label="65504")
    left.set(xscale="log", yscale="log", xlabel="q, k std", ylabel="max |logit| after 1/sqrt(d_k)",
             title="logit range (scale sqrt)")
    left.legend(fontsize=8)
    scenarios = list(dict.fromkeys(r["scenario"] for r in result["impls"]))
    impls = [i for i in ("naive", *STANDARD_IMPLS) if i in impl_names_of(result)]
    values = [[worst_nonfinite(impl_rows(result, finite_logits=None, impl=i, scenario=s, scale="sqrt"))
               for s in scenarios] for i in impls]
    labels = [s + ("" if _logits_finite(result, s, "sqrt") else " *") for s in scenarios]
    _heatmap(right, values, impls, labels, "float16 non-finite output share, scale sqrt\n"
             "(* float16 QK^T overflows there)")
    return save(fig, outdir, "numerics_c11.png")


def _figure_c12(result: dict, outdir) -> str:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for scenario in dict.fromkeys(r["scenario"] for r in result["clamp"]):
        rows = sorted((r for r in result["clamp"] if r["scenario"] == scenario and r["scale"] == "sqrt"),
                      key=lambda r: r["clamp"])
        left.plot([r["clamp"] for r in rows], [max(r["kl_mean"], 1e-12) for r in rows], marker="o", label=scenario)
    left.axhline(KL_CHEAP, color="k", lw=1, ls=":", label=f"{KL_CHEAP} nats")
    left.set(yscale="log", xlabel="clamp value C", ylabel="mean KL(exact || clamped), nats (0 at 1e-12)",
             title="what clamping costs (scale sqrt, float64)")
    left.legend(fontsize=8)
    columns = [(s, sc) for sc in SCALES for s in dict.fromkeys(r["scenario"] for r in result["impls"])]
    impls = impl_names_of(result)
    values = [[worst_nonfinite(impl_rows(result, finite_logits=None, impl=i, scenario=s, scale=sc))
               for s, sc in columns] for i in impls]
    labels = [f"{s}, {sc}" + ("" if _logits_finite(result, s, sc) else " *") for s, sc in columns]
    _heatmap(right, values, impls, labels, "float16 non-finite output share\n(* float16 QK^T overflows there)")
    return save(fig, outdir, "numerics_c12.png")


def _figure_errors(result: dict, outdir) -> str:
    plt = pyplot()
    impls = [i for i in impl_names_of(result) if i != "plain"]
    dtypes = list(dict.fromkeys(r["dtype"] for r in result["impls"]))
    fig, ax = plt.subplots(figsize=(6, 4))
    values = []
    for impl in impls:
        row = []
        for dtype in dtypes:
            ratios = [r["ratio_to_plain"] for r in impl_rows(result, (dtype,), impl=impl, scale="sqrt")]
            row.append(None if not ratios or any(x is None for x in ratios) else max(ratios))
        values.append(row)
    _heatmap(ax, [[None if v is None else min(v, 10.0) for v in row] for row in values], impls, list(dtypes),
             "worst max-error ratio to the plain math, scale sqrt\n(<= 2 passes flash-attn's rule; "
             "capped at 10; - = non-finite output)")
    return save(fig, outdir, "numerics_errors.png")


def figures(result: dict, outdir) -> dict[str, list[str]]:
    from pathlib import Path

    outdir = Path(outdir)
    return {"C11": [_figure_c11(result, outdir)], "C12": [_figure_c12(result, outdir)],
            "numerics": [_figure_errors(result, outdir)]}
