"""The numerics lab: does FP16/BF16 make attention overflow, and what really prevents it? (C11, C12)

* :mod:`.experiment`: the config and the six measurements: each dtype's limits, logit ranges,
  the implementations in low precision against float64, what clamping costs, a trained model's
  q and k, and the memory of dense vs tiled attention;
* :mod:`.verdicts`: the rules for C11 and C12, with their thresholds;
* :mod:`.figures`: the logit range, the non-finite shares per implementation, the error ratios.
"""

from __future__ import annotations

import math

from .experiment import (PRESETS, SCALES, VERSION, Config, accept, attend, clamp_cost, clamped_attention, error_row,
                         exact_attention, impl_names, plain_attention, run, tiled_naive_attention)
from .figures import figures
from .verdicts import (KL_CHEAP, MEMORY_SAVED, NUMBER_KEYS, WRONG_OUTPUT, impl_names_of, impl_rows, judge, judge_c11,
                       judge_c12, realistic_scenarios, trained_summary, worst_nonfinite)

__all__ = ["PRESETS", "VERSION", "Config", "run", "judge", "tables", "figures", "NUMBER_KEYS",
           "KL_CHEAP", "MEMORY_SAVED", "WRONG_OUTPUT", "judge_c11", "judge_c12", "realistic_scenarios", "trained_summary",
           "accept", "attend", "clamp_cost", "clamped_attention", "error_row", "exact_attention", "impl_names",
           "plain_attention", "tiled_naive_attention"]


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
