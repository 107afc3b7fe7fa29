"""The tables of the numerics lab: the rows worth printing (CLI) or tabulating (report)."""

from __future__ import annotations

import math

from .experiment import SCALES
from .verdicts import impl_names_of, impl_rows, worst_nonfinite


def _round(row: dict) -> dict:
    return {k: (float(f"{v:.4g}") if isinstance(v, float) and math.isfinite(v) else v) for k, v in row.items()}


def tables(result: dict) -> dict[str, list[dict]]:
    grid = [{k: r[k] for k in ("d_k", "std", "outliers", "scale", "logit_min", "logit_max", "max_abs_product",
                               "fp16_overflow_scale_after", "fp16_overflow_scale_first", "fp16_naive_overflow_rows")}
            for r in result["grid"]]
    mechanism = []
    for scale in SCALES:
        for impl in impl_names_of(result):
            rows = impl_rows(result, impl=impl, scale=scale)
            mechanism.append({"scale": scale, "impl": impl, "fp16_nonfinite_worst": worst_nonfinite(rows),
                              "scenarios_with_nonfinite": sum(r["nonfinite_share"] > 0 for r in rows),
                              "scenarios": len(rows)})
    impls = [{k: r[k] for k in ("scenario", "scale", "dtype", "impl", "nonfinite_share", "max_err", "mean_err",
                                "ratio_to_plain", "accepted")}
             for r in result["impls"] if r["scale"] == "sqrt"]
    clamp = [{k: r[k] for k in ("scenario", "scale", "clamp", "clamped_share", "kl_mean", "kl_max",
                                "output_change_mean", "output_mean_abs")} for r in result["clamp"]]
    return {
        "exp overflow threshold, bisected": [{k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in t.items()}
                                             for t in result["thresholds"]],
        "matmul accumulation": [_round(a) for a in result["accumulation"]],
        "where each limit is reached (q, k std)": [_round(o) for o in result["onsets"]],
        "logit range and float16 overflow": [_round(r) for r in grid],
        "float16: which implementations overflow (finite logits)": [_round(r) for r in mechanism],
        "implementations vs float64 (scale sqrt)": [_round(r) for r in impls],
        "clamp cost (float64)": [_round(r) for r in clamp],
        f"a trained model's q, k in low precision ({result['trained']['model']}, eager path, scale sqrt)": [
            _round(r) for r in result["trained"]["layers"]],
        "memory: dense (eager) vs tiled (online) attention, one head": [
            {**r, "peak_mib": round(r["peak_bytes"] / 2**20, 4)} for r in result["memory"]],
    }
