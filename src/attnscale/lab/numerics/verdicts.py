"""The numerics lab's part readings (C11, C12), with their thresholds, reading only the lab's result;
:func:`attnscale.claims.label` turns the parts into the label.  Every reading function takes
``scale``, the factor its thresholds are moved by (1 as declared; 0.8 and 1.2 for the margin the
report states).  The part rules are spelled out in each finding's evidence text.
"""

from __future__ import annotations

import math

from ... import claims, intervals
from ...claims import Reading, measured_at, state_of
from ...numerics import WRONG_OUTPUT
from .experiment import RANGE_REACHED

STANDARD_IMPLS = ("plain", "stable", "online", "sdpa")  # every one subtracts the row max
REAL_CODE = ("plain", "sdpa", "online")  # as models compute attention: eager (plain), torch's fused SDPA, FlashAttention
LOW_DTYPES = ("float16", "bfloat16")
KL_CHEAP = 0.01  # nats: a clamp this cheap at the claimed range would be a harmless fix
CLAMP_COSTS = {True: "cheap", False: "distorts", None: "undecided"}  # the rule's decision on the cheapest fix's cost
OVERFLOW_WORDS = {True: "overflows", False: "never", None: "undecided"}  # the rule's decision on online softmax
RARE_ROWS = 0.01  # an event "does not happen" in a case where its rate over the case's query rows is bounded
# at or below one in a hundred (a case: one scenario, scale, dtype and implementation, or one trained layer in one dtype)
MEMORY_SAVED = 8.0  # tiling "prevents the overflow" of memory if dense attention needs >= 8x its peak

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C11": ("claim_d_k", "claimed_range", "max_abs_logit_unit_std_sqrt", "std_for_claimed_range", "trained_model", "trained_d_k",
            "trained_max_abs_logit", "trained_logit_std", "trained_qk_std", "trained_naive_fp16_overflow_rows",
            "trained_range_rows", "trained_rows", "realistic_scenarios", "real_code_nonfinite", "real_code_cases",
            "real_code_rows", "real_code_nonfinite_rows", "real_code_wrong_rows", "real_code_max_error", "real_code_worst",
            "standard_softmax_nonfinite", "naive_fp16_nonfinite_at_claim", "fp16_exp_first_inf",
            "std_matmul_overflow_scale_after", "std_matmul_overflow_scale_after_outliers"),
    "C12": ("naive_nonfinite", "tiled_naive_nonfinite", "stable_nonfinite", "online_nonfinite", "sdpa_nonfinite",
            "naive_sqrt_nonfinite", "clamp_values_removing_inf", "clamp_cost", "online_overflow", "clamp_kl_cheapest_fix",
            "clamp_kl_cheapest_fix_low", "clamp_kl_cheapest_fix_high",
            "fp16_matmul_overflow_scale_after", "fp16_matmul_overflow_scale_first", "memory_tokens",
            "dense_peak_mib", "online_peak_mib", "memory_ratio"),
}


def impl_rows(result: dict, dtypes=("float16",), finite_logits: bool | None = True, **match) -> list[dict]:
    """impl rows in ``dtypes`` (whose dtype logits are finite, if asked) matching ``match``."""
    return [r for r in result["impls"] if r["dtype"] in dtypes
            and (finite_logits is None or r["logits_finite"] == finite_logits)
            and all(r[key] == value for key, value in match.items())]


def worst_nonfinite(rows: list[dict]) -> float:
    return max((r["nonfinite_share"] for r in rows), default=0.0)


def overflows(rows: list[dict], scale: float = 1.0) -> bool | None:
    """Whether these cases give non-finite outputs: True if one query row does, False where every
    case bounds its rate at or below RARE_ROWS, None (undecided) where a case has too few rows."""
    return intervals.occurs_in([(r["nonfinite_rows"], r["rows"]) for r in rows], RARE_ROWS * scale)


def _claimed_scenario(result: dict) -> str:
    return next(r["scenario"] for r in result["impls"] if "(logits" in r["scenario"])


def _threshold(result: dict, dtype: str) -> dict | None:
    return next((t for t in result["thresholds"] if t["dtype"] == dtype), None)


def _accumulation_text(result: dict) -> str:
    acc = next((a for a in result["accumulation"] if a["dtype"] == "float16"), None)
    if acc is None:
        return ""
    how = "in a wider type (float32)" if acc["accumulates_wider"] else "in float16 itself"
    return (f"On {acc['device']}, a float16 matmul accumulates {how} (rounding error {acc['rounding_error_eps']:.2g} eps "
            f"over 4096 terms; (b, b, b, -b, -b, -b) . (b, b, b, b, b, b) with b^2 = 0.75 x 65504 gives "
            f"{acc['cancellation_result']}), so "
            "QK^T overflows only where a final |q.k| exceeds 65504. ")


def _onset(result: dict, outliers: bool) -> dict | None:
    return next((o for o in result["onsets"] if o["d_k"] == result["claim_d_k"] and o["outliers"] == outliers), None)


def trained_summary(result: dict) -> dict:
    """The trained model's largest scaled |logit|, logit std and q/k component std over its layers."""
    rows = result["trained"]["layers"]
    return {"max_abs_logit": max(r["max_abs_logit"] for r in rows), "logit_std": max(r["logit_std"] for r in rows),
            "qk_std": max(max(r["q_std"], r["k_std"]) for r in rows),
            "naive_fp16": max((r["naive_overflow_rows"] for r in rows if r["dtype"] == "float16"), default=0.0)}


def realistic_scenarios(result: dict) -> list[str]:
    """The d_k = claim_d_k scenarios whose q, k are no larger than the trained model's, or whose
    scaled logits are no larger than the trained model's (outlier features or not)."""
    top = trained_summary(result)
    found = []
    for label, std, outliers in dict.fromkeys((r["scenario"], r["std"], r["outliers"]) for r in result["impls"]):
        onset = _onset(result, outliers)
        max_logit = onset["max_abs_logit_unit_sqrt"] * std**2 if onset else math.inf
        if std <= top["qk_std"] or max_logit <= top["max_abs_logit"]:
            found.append(label)
    return found


def real_code_failures(result: dict) -> dict:
    """Real-code attention in float16 and bfloat16 on the realistic scenarios (plain, SDPA, online,
    scale sqrt) and on the trained model (one case per layer and dtype): per case, its query rows,
    those holding a non-finite output and the finite ones off by more than WRONG_OUTPUT; the worst
    non-finite share and the worst max output error, with where they occur."""
    realistic = set(realistic_scenarios(result))
    rows = [r for r in impl_rows(result, LOW_DTYPES, finite_logits=None, scale="sqrt")
            if r["impl"] in REAL_CODE and r["scenario"] in realistic]
    cases = [(r["nonfinite_share"], r["max_err"], f"{r['scenario']}, {r['dtype']}, {r['impl']}",
              r["rows"], r["nonfinite_rows"], r["wrong_rows"]) for r in rows]
    model = result["trained"]["model"]
    cases += [(r["nonfinite_row_share"], r["output_error_max"], f"{model} layer {r['layer']}, {r['dtype']}, eager",
               r["rows"], r["nonfinite_rows"], r["wrong_rows"]) for r in result["trained"]["layers"]]
    nonfinite = max((c[0] for c in cases), default=0.0)
    errors = [c for c in cases if c[1] is not None]
    worst = max(errors, key=lambda c: c[1], default=(0.0, 0.0, "none"))
    return {"nonfinite": nonfinite, "max_error": worst[1], "worst": worst[2],
            "nonfinite_where": next((c[2] for c in cases if c[0] > 0), None), "cases": len(cases),
            "inf_groups": [(c[4], c[3]) for c in cases], "wrong_groups": [(c[5], c[3] - c[4]) for c in cases]}


def trained_range_groups(result: dict) -> list[tuple[int, int]]:
    """Per trained layer and dtype: (query rows whose largest scaled |logit| reaches RANGE_REACHED
    of the claimed range, query rows)."""
    return [(r["range_rows"], r["rows"]) for r in result["trained"]["layers"]]


def _rate_text(count: int, rows: int) -> str:
    share = count / rows if rows else 0.0
    return f"{count} of {rows} ({share:.2g} {intervals.fmt_interval(intervals.wilson(count, rows))})"


def _groups_text(groups: list[tuple[int, int]]) -> str:
    """Counts summed over the cases, and how many cases bound the rate at or below RARE_ROWS."""
    count, rows = sum(g[0] for g in groups), sum(g[1] for g in groups)
    bounded = sum(intervals.occurs(c, n, RARE_ROWS) is False for c, n in groups)
    return f"{_rate_text(count, rows)} over {len(groups)} cases, {bounded} of them bounding the rate at or below {RARE_ROWS:g}"


def claim_setting_rows(result: dict) -> list[dict]:
    """Real-code attention (plain, SDPA, online; scale sqrt) in float16 and bfloat16 at the claim's
    own setting: d_k = claim_d_k, in every scenario whose q and k are no larger than those that put
    the scaled logits at the claimed +-R (the claimed range granted)."""
    std_claimed = _onset(result, False)["std_for_claimed_range"]
    return [r for r in impl_rows(result, LOW_DTYPES, finite_logits=None, scale="sqrt")
            if r["impl"] in REAL_CODE and r["std"] <= std_claimed * (1 + 1e-9)]


def judge_c11(result: dict) -> claims.Finding:
    """Two parts at the claim's own setting.  The range: at d_k = claim_d_k under the interview
    answer's premise (independent unit-variance q, k, then 1/sqrt(d_k)), the largest |logit| over
    every pair sampled reaches RANGE_REACHED of the claimed +-R.  The inf: real code (plain, SDPA,
    online) in float16/bfloat16 gives a non-finite output at d_k = claim_d_k with logits up to the
    claimed range: a rate over query rows, case by case; it holds once a row shows it and fails where
    every case's 95% Wilson interval lies at or below RARE_ROWS.  The trained model (another d_k) and
    output error (not claimed) are context."""
    d_k, claimed = result["claim_d_k"], result["claimed_range"]
    onset, onset_out = _onset(result, False), _onset(result, True)
    unit = onset["max_abs_logit_unit_sqrt"]
    trained = result["trained"]
    top = trained_summary(result)
    realistic = realistic_scenarios(result)
    failures = real_code_failures(result)
    range_groups = trained_range_groups(result)
    at_claim = claim_setting_rows(result)
    inf_groups = [(r["nonfinite_rows"], r["rows"]) for r in at_claim]

    def read_range(scale: float) -> Reading:
        reach = RANGE_REACHED * claimed * scale
        return Reading(state_of(unit >= reach), measured=f"largest |logit| {unit:.3g} over {result['grid_pairs']} pairs",
                       threshold=f"reaches +-{reach:.3g} ({RANGE_REACHED * scale:.2g} of +-{claimed:g})")

    def read_inf(scale: float) -> Reading:
        states = [state_of(intervals.occurs(r["nonfinite_rows"], r["rows"], RARE_ROWS * scale)) for r in at_claim]
        return Reading(state_of(intervals.occurs_in(inf_groups, RARE_ROWS * scale)),
                       measured=f"non-finite outputs in {_groups_text(inf_groups)}",
                       threshold=f"a rate above {RARE_ROWS * scale:.2g} of query rows in some case",
                       settings=[{"where": f"{r['scenario']}, {r['dtype']}, {r['impl']}", "state": st}
                                 for r, st in zip(at_claim, states)])

    readings = {"range": measured_at(read_range), "inf": measured_at(read_inf)}
    standard = [r for r in impl_rows(result, LOW_DTYPES) if r["impl"] in STANDARD_IMPLS]
    scenario = _claimed_scenario(result)
    naive_at_claim = worst_nonfinite(impl_rows(result, scenario=scenario, scale="sqrt", impl="naive"))
    fp16 = _threshold(result, "float16")
    inf = intervals.occurs_in(failures["inf_groups"], RARE_ROWS)
    wrong = intervals.occurs_in(failures["wrong_groups"], RARE_ROWS)
    outcome = ("produces non-finite outputs (" + failures["nonfinite_where"] + ")" if inf else
               f"stays finite, but is off by up to {failures['max_error']:.3g} std of v ({failures['worst']})" if wrong else
               f"stays finite and accurate (error at most {failures['max_error']:.3g} std of v)")
    context = (f"Context, not votes (another d_k, or a part the claim does not make): the trained model's rows whose "
               f"largest |logit| reaches +-{claimed * RANGE_REACHED:g}: {_groups_text(range_groups)}; real-code rows with "
               f"a non-finite output over the realistic configurations and the trained model: "
               f"{_groups_text(failures['inf_groups'])}; finite real-code rows off by more than {WRONG_OUTPUT} std of v: "
               f"{_groups_text(failures['wrong_groups'])}. ")
    threshold_text = (f"exp overflows float16 from x = {fp16['first_inf']:.6g} (ln 65504 = {fp16['ln_max']:.5g}): "
                      if fp16 else "")
    outlier_text = (f" With {result['outliers']['features']} outlier features x{result['outliers']['gain']:g} at "
                    f"unit std the largest is +-{onset_out['max_abs_logit_unit_sqrt']:.3g}." if onset_out else "")
    evidence = (
        f"Range: for independent unit-variance q and k (the interview answer's own premise) at d_k = {d_k} the largest |logit| "
        f"after 1/sqrt(d_k) is {unit:.3g} over {result['grid_pairs']} pairs (+-{claimed:g} needs q, k of std "
        f"{onset['std_for_claimed_range']:.3g}).{outlier_text} A trained model is another matter: in "
        f"{trained['model']} (d_k = {trained['d_k']}, {trained['tokens']} tokens of real text) q and k have component "
        f"std up to {top['qk_std']:.2f}, but they are aligned, not independent, and the scaled logits reach "
        f"+-{top['max_abs_logit']:.3g} (logit std up to {top['logit_std']:.2f}). Overflow: {threshold_text}a "
        f"softmax without max subtraction would overflow in {top['naive_fp16']:.0%} of that model's rows in float16 "
        f"(and in {naive_at_claim:.0%} of rows at +-{claimed:g}), but real code subtracts the row max: the "
        f"max-subtracted implementations ({', '.join(STANDARD_IMPLS)}) gave non-finite outputs in "
        f"{worst_nonfinite(standard):.3g} of any scenario with finite logits. At d_k = {d_k} with logits up to +-{claimed:g}, "
        f"real code gave non-finite outputs in {_groups_text(inf_groups)}. "
        + _accumulation_text(result) +
        f"The float16 product QK^T itself overflows from q, k std {onset['std_matmul_overflow_scale_after']:.3g} "
        f"(factor applied after the matmul, as eager code does; {onset_out['std_matmul_overflow_scale_after']:.3g} "
        f"with the outlier features) or {onset['std_matmul_overflow_scale_first']:.3g} (factor folded into q). "
        f"Realistic configurations, where q and k or the logits are no larger than the trained model's "
        f"({', '.join(realistic)}, and the trained model's own q and k): attention computed as models do it "
        f"({', '.join(REAL_CODE)}; the trained model through the eager path) in float16 and bfloat16 {outcome}. "
        + context +
        f"Part rules, at the claim's own d_k = {d_k}: the range holds if the largest scaled |logit| under the unit-variance "
        f"premise reaches {RANGE_REACHED:g} of the claimed +-{claimed:g}; the inf part is a rate over query rows of "
        f"real code ({', '.join(REAL_CODE)}) in float16 and bfloat16 with logits up to the claimed range, decided case "
        f"by case: it holds once a row of a case shows it and fails where every case's 95% Wilson interval lies at or "
        f"below {RARE_ROWS:g} (undecided otherwise).")
    numbers = {"claim_d_k": d_k, "claimed_range": claimed,
               "max_abs_logit_unit_std_sqrt": unit, "std_for_claimed_range": onset["std_for_claimed_range"],
               "trained_model": trained["model"], "trained_d_k": trained["d_k"],
               "trained_max_abs_logit": top["max_abs_logit"], "trained_logit_std": top["logit_std"],
               "trained_qk_std": top["qk_std"], "trained_naive_fp16_overflow_rows": top["naive_fp16"],
               "trained_range_rows": sum(g[0] for g in range_groups), "trained_rows": sum(g[1] for g in range_groups),
               "realistic_scenarios": ", ".join(realistic), "real_code_nonfinite": failures["nonfinite"],
               "real_code_cases": failures["cases"], "real_code_rows": sum(g[1] for g in failures["inf_groups"]),
               "real_code_nonfinite_rows": sum(g[0] for g in failures["inf_groups"]),
               "real_code_wrong_rows": sum(g[0] for g in failures["wrong_groups"]),
               "real_code_max_error": failures["max_error"], "real_code_worst": failures["worst"],
               "standard_softmax_nonfinite": worst_nonfinite(standard), "naive_fp16_nonfinite_at_claim": naive_at_claim,
               "fp16_exp_first_inf": fp16["first_inf"] if fp16 else None,
               "std_matmul_overflow_scale_after": onset["std_matmul_overflow_scale_after"],
               "std_matmul_overflow_scale_after_outliers": onset_out["std_matmul_overflow_scale_after"]
               if onset_out else None}
    return claims.Finding("C11", "numerics", evidence, numbers, readings)


def clamp_rows(result: dict) -> dict[float, list[dict]]:
    """Each clamp value's float16 implementation rows (scenarios whose logits are finite)."""
    return {c: impl_rows(result, impl=f"clamp:{c:g}") for c in result["clamp_values"]}


def _clamp_summary(result: dict, by_clamp: dict[float, list[dict]],
                   scale: float = 1.0) -> tuple[list[float], dict[float, dict]]:
    """Clamp values shown to remove the non-finite float16 outputs (none in a count of query rows that
    bounds their rate at or below RARE_ROWS), and each value's KL row at the claimed range."""
    scenario = _claimed_scenario(result)
    removes = [c for c, rows in by_clamp.items() if overflows(rows, scale) is False]  # no rows: undecided, not removed
    kl = {r["clamp"]: r for r in result["clamp"] if r["scenario"] == scenario and r["scale"] == "sqrt"}
    return removes, kl


def clamp_cheap(removes: list[float], kl: dict[float, dict], scale: float = 1.0) -> tuple[float | None, bool | None]:
    """The cheapest clamp that removes every non-finite output (by mean KL) and whether it is cheap:
    True if its KL interval lies at or below KL_CHEAP, False if wholly above, None (undecided) if it
    straddles; (None, False) when no clamp removes them."""
    found = [c for c in removes if c in kl]
    if not found:
        return None, (None if removes else False)  # a clamp that removes it, but no cost measured: undecided
    cheapest = min(found, key=lambda c: kl[c]["kl_mean"])
    return cheapest, intervals.at_most(tuple(kl[cheapest]["kl_interval"]), KL_CHEAP * scale)


def _c12_conclusion(clamp_removes: bool, cheap: bool | None, stable: bool | None, naive_sqrt: bool | None,
                    tiled: bool | None) -> str:
    if not clamp_removes:
        clamp = "No clamp value tried removes the overflow. "
    elif cheap:
        clamp = "Clamping removes the overflow at a negligible cost. "
    elif cheap is None:
        clamp = (f"Clamping removes the overflow; whether at a negligible cost is undecided (the KL interval "
                 f"straddles {KL_CHEAP} nats). ")
    else:
        clamp = "Clamping removes the overflow only by changing the distribution. "
    causes = (("the max subtraction (FlashAttention's running max is one)", stable),
              ("the 1/sqrt(d_k) factor", naive_sqrt), ("the tiling", tiled))  # each: does it still overflow?
    does = [name for name, overflow in causes if overflow is False]
    does_not = [name for name, overflow in causes if overflow is True]
    undecided = [name for name, overflow in causes if overflow is None]
    return (clamp + f"What prevents the exp overflow in every scenario: {' and '.join(does) or 'none of the three'}"
            + (f"; not {' nor '.join(does_not)}" if does_not else "")
            + (f"; too few rows to say for {' or '.join(undecided)}" if undecided else "") + ". ")


def _matmul_text(after: float, first: float) -> str:
    if after == 0:
        return "No float16 QK^T overflowed in the logit-range grid. "
    role = "The factor does matter for" if first < after else "Folding the factor into q does not help"
    return (f"{role} the float16 product QK^T: its overflow share reaches {after:.3g} with the factor applied "
            f"after the matmul, {first:.3g} with it folded into q first. ")


def memory_summary(result: dict) -> dict:
    """Dense and online peak bytes at the longest sequence measured, and their ratio."""
    tokens = max(r["tokens"] for r in result["memory"])
    peak = {r["impl"]: r["peak_bytes"] for r in result["memory"] if r["tokens"] == tokens}
    return {"tokens": tokens, "dense": peak["plain"], "online": peak["online"],
            "ratio": peak["plain"] / peak["online"] if peak["online"] else math.inf}


def _memory_text(result: dict) -> str:
    rows = sorted(result["memory"], key=lambda r: (r["impl"], r["tokens"]))
    mib = lambda impl: ", ".join(f"{r['peak_bytes'] / 2**20:.3g} MiB at T = {r['tokens']}" for r in rows
                                 if r["impl"] == impl)
    return (f"Memory: one head, d = {rows[0]['d_k']}, float32: dense attention as eager code computes it creates "
            f"{mib('plain')} (the T x T scores and probabilities); online attention with {rows[0]['block_size']}-key "
            f"tiles {mib('online')}. "
            f"Both grow with batch x heads; only the dense one grows with T^2. ")


def _cases_text(rows: list[dict]) -> str:
    return _groups_text([(r["nonfinite_rows"], r["rows"]) for r in rows])


def _clamp_rows_text(by_clamp: dict[float, list[dict]]) -> str:
    return "".join(f"; clamp {c:g} {_cases_text(rows)}" for c, rows in by_clamp.items())


def _tiling_text(memory: dict, tiled_overflows: bool | None, in_memory: bool) -> str:
    if in_memory:
        text = (f"At T = {memory['tokens']} the dense peak is {memory['ratio']:.3g}x the tiled one: tiling keeps the "
                "large matrix out of memory. ")
    else:
        text = (f"At T = {memory['tokens']} the dense peak is only {memory['ratio']:.3g}x the tiled one (below "
                f"{MEMORY_SAVED:g}x). ")
    if tiled_overflows is None:
        text += "Too few rows to say whether tiling alone keeps the exp finite. "
    readings = [name for name, ok in (("numeric", tiled_overflows is False), ("memory", in_memory)) if ok]
    if len(readings) == 2:
        return text + "Tiling prevents the overflow in both readings. "
    if not readings:
        return text + "Tiling prevents the overflow in neither reading. "
    return text + f"Tiling prevents the overflow in the {readings[0]} reading only. "


def judge_c12(result: dict) -> claims.Finding:
    naive_rows, tiled_rows = impl_rows(result, impl="naive"), impl_rows(result, impl="tiled_naive")
    stable_rows = impl_rows(result, impl="stable")
    online_rows = impl_rows(result, result_dtypes(result), finite_logits=None, impl="online")
    naive, tiled, stable = worst_nonfinite(naive_rows), worst_nonfinite(tiled_rows), worst_nonfinite(stable_rows)
    online_all = worst_nonfinite(online_rows)
    sdpa_all = worst_nonfinite(impl_rows(result, result_dtypes(result), finite_logits=None, impl="sdpa"))
    naive_sqrt_rows = impl_rows(result, impl="naive", scale="sqrt")
    naive_sqrt = worst_nonfinite(naive_sqrt_rows)
    naive_sqrt_clean = [r["scenario"] for r in naive_sqrt_rows if r["nonfinite_share"] == 0]
    by_clamp = clamp_rows(result)
    removes, kl = _clamp_summary(result, by_clamp)
    cheapest_clamp, cheap = clamp_cheap(removes, kl)
    cheapest = kl[cheapest_clamp] if cheapest_clamp is not None else {"kl_mean": None, "kl_interval": (None, None)}
    matmul_rows = [r for r in result["grid"] if r["scale"] == "sqrt"]
    matmul_after = max((r["fp16_overflow_scale_after"] for r in matmul_rows), default=0.0)
    matmul_first = max((r["fp16_overflow_scale_first"] for r in matmul_rows), default=0.0)
    accepted = [r for r in result["impls"] if r["impl"] in ("online", "sdpa") and r["accepted"] is not None]
    memory = memory_summary(result)

    online_overflows, tiled_overflows = overflows(online_rows), overflows(tiled_rows)
    clamp_removes = bool(removes)
    tiling_memory = memory["ratio"] >= MEMORY_SAVED
    if overflows(naive_rows) is not True:
        return claims.untested("C12", "numerics", "the naive softmax never overflowed in float16 here: there is "
                               "nothing for a fix to fix.")

    def read_clamp(scale: float) -> Reading:
        found, kl_rows = _clamp_summary(result, by_clamp, scale)
        _, is_cheap = clamp_cheap(found, kl_rows, scale)
        state = claims.FAILS if not found else state_of(is_cheap)  # no clamp removes it: fails
        return Reading(state, measured=f"clamps removing every non-finite output: {', '.join(f'{c:g}' for c in found) or 'none'}"
                       + (f"; the cheapest costs KL {cheapest['kl_mean']:.3g} nats" if cheapest["kl_mean"] is not None else ""),
                       threshold=f"non-finite rate <= {RARE_ROWS * scale:.2g} in every case, at KL <= {KL_CHEAP * scale:.3g} nats")

    def read_flash(scale: float) -> Reading:
        return Reading(state_of(overflows(online_rows, scale), negate=True),
                       measured=f"online softmax non-finite in {_cases_text(online_rows)}",
                       threshold=f"every case's rate <= {RARE_ROWS * scale:.2g}")

    def read_tiling(scale: float) -> Reading:
        tiled = overflows(tiled_rows, scale)
        settings = [{"where": "numeric: tiles without max subtraction stay finite",
                     "state": state_of(tiled, negate=True)},
                    {"where": f"memory: dense attention needs >= {MEMORY_SAVED * scale:.3g}x the tiled peak",
                     "state": state_of(memory["ratio"] >= MEMORY_SAVED * scale)}]
        return Reading.over([s["state"] for s in settings],
                       measured=f"tiled without max subtraction non-finite in {_cases_text(tiled_rows)}; dense peak "
                       f"{memory['ratio']:.3g}x the tiled one at T = {memory['tokens']}",
                       threshold=f"rate <= {RARE_ROWS * scale:.2g}; memory ratio >= {MEMORY_SAVED * scale:.3g}",
                       settings=settings)

    readings = {"clamp": measured_at(read_clamp), "flash": measured_at(read_flash), "tiling": measured_at(read_tiling)}
    kl_text = ", ".join(f"clamp {c:g}: {kl[c]['kl_mean']:.3g} {intervals.fmt_interval(kl[c]['kl_interval'], 3)}"
                        for c in sorted(kl))
    evidence = (
        "Part rules (float16, scenarios whose logits are finite): an implementation 'never gives a non-finite output' "
        "where in every case (scenario, scale, dtype) the rate over query rows has its 95% Wilson interval at or "
        f"below {RARE_ROWS:g} (with fewer rows that is undecided); not testable if the naive softmax never overflows. "
        "The clamp part holds if some clamp value removes every non-finite output at a mean KL(exact || clamped) <= "
        f"{KL_CHEAP} nats where the logits reach the claimed range (the whole 95% interval of the mean over query "
        "rows; straddling: undecided), and fails if no clamp removes it or the cheapest distorts; the FlashAttention "
        "part holds if the online (FlashAttention-2) softmax never gives a non-finite output; the tiling part is read "
        "two ways, as the interview answer's 溢出 allows: numeric overflow (tiling without max subtraction stays "
        f"finite) and memory (dense attention needs >= {MEMORY_SAVED:g}x the tiled peak at the longest sequence "
        "measured); one holding and the other failing is holding in part. "
        f"Query rows with a non-finite output (rate [95% Wilson interval]): online {_cases_text(online_rows)}; tiled "
        f"without max subtraction {_cases_text(tiled_rows)}; stable {_cases_text(stable_rows)}"
        f"{_clamp_rows_text(by_clamp)}. "
        f"Measured worst non-finite shares of entries: naive {naive:.3g}; naive with 1/sqrt(d_k) {naive_sqrt:.3g} (clean in "
        f"{len(naive_sqrt_clean)} of {len(naive_sqrt_rows)} scenarios: {', '.join(naive_sqrt_clean) or 'none'}); "
        f"tiled without max subtraction {tiled:.3g}, max-subtracted stable {stable:.3g}, online {online_all:.3g} and "
        f"torch SDPA {sdpa_all:.3g} (these two over all dtypes and scenarios, including those where the float16 "
        "QK^T overflows; online keeps its scores in float32). "
        f"Clamp values removing every non-finite output: {', '.join(f'{c:g}' for c in removes) or 'none'}; "
        f"cost of each clamp where the logits reach the claimed range, mean KL in nats [95% interval]: {kl_text}. "
        + _c12_conclusion(clamp_removes, cheap, overflows(stable_rows), overflows(naive_sqrt_rows), tiled_overflows)
        + _matmul_text(matmul_after, matmul_first) + _memory_text(result)
        + _tiling_text(memory, tiled_overflows, tiling_memory) +
        "flash-attn's acceptance rule (max error <= 2x that of the plain low-precision math): online and "
        f"SDPA pass {sum(r['accepted'] for r in accepted)} of {len(accepted)} cases.")
    numbers = {"naive_nonfinite": naive, "tiled_naive_nonfinite": tiled, "stable_nonfinite": stable,
               "online_nonfinite": online_all, "sdpa_nonfinite": sdpa_all, "naive_sqrt_nonfinite": naive_sqrt,
               "clamp_values_removing_inf": ", ".join(f"{c:g}" for c in removes),
               "clamp_cost": CLAMP_COSTS[cheap] if clamp_removes else "no clamp removes it",
               "online_overflow": OVERFLOW_WORDS[online_overflows],
               "clamp_kl_cheapest_fix": cheapest["kl_mean"], "clamp_kl_cheapest_fix_low": cheapest["kl_interval"][0],
               "clamp_kl_cheapest_fix_high": cheapest["kl_interval"][1],
               "fp16_matmul_overflow_scale_after": matmul_after, "fp16_matmul_overflow_scale_first": matmul_first,
               "memory_tokens": memory["tokens"], "dense_peak_mib": memory["dense"] / 2**20,
               "online_peak_mib": memory["online"] / 2**20,
               "memory_ratio": memory["ratio"] if math.isfinite(memory["ratio"]) else None}
    return claims.Finding("C12", "numerics", evidence, numbers, readings)


def result_dtypes(result: dict) -> tuple[str, ...]:
    return tuple(sorted({r["dtype"] for r in result["impls"]}))


def impl_names_of(result: dict) -> list[str]:
    return list(dict.fromkeys(r["impl"] for r in result["impls"]))


def judge(result: dict) -> dict[str, claims.Finding]:
    return {"C11": judge_c11(result), "C12": judge_c12(result)}
