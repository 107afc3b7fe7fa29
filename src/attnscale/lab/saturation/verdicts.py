"""The saturation lab's part readings (C04, C05, C06, C16, C18), each with its thresholds, reading
only the lab's result; :func:`attnscale.claims.label` turns the parts into the label.  Every
reading function takes ``scale``, the factor its thresholds are moved by (1 as declared; 0.8 and
1.2 for the margin the report states); a threshold near 1 (an entropy, a share of 95%) moves by
its distance from 1."""

from __future__ import annotations

import math

from ... import claims, intervals
from ...claims import Finding, Reading, measured_at, state_of
from .experiment import DIAG_RANGE, P_RANGE

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C04": ("max_std_error", "min_share_within_3", "max_saturated_share"),
    "C05": ("min_normalized_entropy", "min_uniform_share"),
    "C06": ("max_logit_abs", "min_saturated_share", "grad_ratio_none_sqrt", "grad_ratio_probs", "dk_logits_reach_100"),
    "C16": ("max_entry_at_100", "small_n", "large_n", "share_p_in_range_small_n", "share_diag_in_range_small_n",
            "share_p_in_range_large_n", "holds_up_to_n", "possible_up_to_n"),
    "C18": ("zero_slope_exponent", "least_varying_exponent", "sqrt_entropy_spread", "inv_d_entropy_at_max_dk",
            "constant_factor", "constant_entropy_min", "constant_entropy_max"),
}


def pick(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def reference_n(result: dict) -> int:
    ns = result["config"]["ns"]
    return 128 if 128 in ns else ns[len(ns) // 2]


# C04: the logits under sqrt
STD_BAND = (0.9, 1.1)       # logit std within 10% of 1
WITHIN_3_SHARE = 0.95       # at least this share of logits in [-3, 3]
SATURATED = 0.01            # at most this share of saturated rows (max p > 0.99) at every d_k and n
# C05: inv_d near uniform
NEAR_UNIFORM_ENTROPY = 0.99
NEAR_UNIFORM_ROWS = 0.5     # at least this share of rows within KL 0.01 of uniform
FLAT_ENTROPY = 0.95         # below this, not near uniform at all
# C06: no scaling
LOGITS_AROUND_100 = 50.0    # mean max |logit| at least this: "around +-100"
ONE_HOT_ROWS = 0.5          # at least this share of rows saturated: "near one-hot"
GRADIENT_NEAR_0 = 0.1       # the gradient to W_q below this fraction of sqrt's
# C18
BALANCE_SLOPE = 0.05        # the zero-slope exponent (and a constant's slope) within this of 0.5
OVERSMOOTH_LEVEL = 0.99     # inv_d's normalised entropy at the largest d_k: over-smoothed
CONSTANT_SPREAD = 0.3       # a constant's normalised entropy varies at least this much across d_k
# C16
EXTREME_NEAR_0 = 1e-10      # every softmax Jacobian entry below this at an input of 100: "near 0"
FORMULA_AGREES = 1e-6       # p_i(1 - p_i) against autograd's Jacobian diagonal: "is" the derivative


def ci(row: dict, key: str) -> tuple[float, float]:
    """A row's 95% interval of ``key``."""
    return tuple(row[f"{key}_ci"])


def near_one(level: float, scale: float) -> float:
    """A threshold near 1 moved by ``scale`` as a distance from 1 (0.99 -> 0.988 / 0.992)."""
    return 1 - (1 - level) * scale


def by_row(rows: list[dict], decide, where=lambda r: f"d_k = {r['d_k']}", **fields) -> Reading:
    """A part read row by row: its state over the rows, with each row's state as a setting."""
    states = [state_of(decide(r)) for r in rows]
    return Reading.over(states, settings=[{"where": where(r), "state": st} for r, st in zip(rows, states)], **fields)


def judge_c04(result: dict) -> Finding:
    """Three parts under sqrt, each read at every setting on its 95% interval: logit std within
    STD_BAND at every d_k (n = 128); at least WITHIN_3_SHARE of logits in [-3, 3] at every d_k; at
    most SATURATED saturated rows at every d_k and n."""
    n = reference_n(result)
    rows = pick(result["sweep"], rule="sqrt", n=n)
    every = pick(result["sweep"], rule="sqrt")
    if not rows:
        return claims.untested("C04", "saturation", "the sqrt rule (A = 0.5) is not on the exponent grid.")
    std_err = max(abs(r["logit_std"] - 1) for r in rows)
    within = min(r["share_within_3"] for r in rows)
    saturated = max(r["saturated_share"] for r in every)
    band = (STD_BAND[1] - STD_BAND[0]) / 2

    def read_variance(scale: float) -> Reading:
        return by_row(rows, lambda r: intervals.inside(ci(r, "logit_std"), 1 - band * scale, 1 + band * scale),
                      measured=f"logit std within {std_err:.1%} of 1", threshold=f"within {band * scale:.0%} of 1")

    def read_within(scale: float) -> Reading:
        level = near_one(WITHIN_3_SHARE, scale)
        return by_row(rows, lambda r: intervals.at_least(ci(r, "share_within_3"), level),
                      measured=f"at least {within:.1%} in [-3, 3]", threshold=f">= {level:.0%}")

    def read_unsaturated(scale: float) -> Reading:
        return by_row(every, lambda r: intervals.at_most(ci(r, "saturated_share"), SATURATED * scale),
                      lambda r: f"d_k = {r['d_k']}, n = {r['n']}",
                      measured=f"at most {saturated:.1%} of rows saturated (max p > 0.99)",
                      threshold=f"<= {SATURATED * scale:.1%} of rows")

    readings = {"variance": measured_at(read_variance), "within": measured_at(read_within),
                "unsaturated": measured_at(read_unsaturated)}
    worst_std = max(rows, key=lambda r: abs(r["logit_std"] - 1))
    least_within = min(rows, key=lambda r: r["share_within_3"])
    most_saturated = max(every, key=lambda r: ci(r, "saturated_share")[1])
    big = rows[-1]
    none_sat = pick(result["sweep"], rule="none", n=n)
    none_text = (f" Without the factor, the same rows at d_k = {none_sat[-1]['d_k']} are saturated in "
                 f"{none_sat[-1]['saturated_share']:.0%} of cases." if none_sat else "")
    evidence = (f"With q and k components of variance {result['config']['qk_std'] ** 2:g} and the 1/sqrt(d_k) factor, "
                f"the logit std stays within {std_err:.1%} of 1 for d_k = {rows[0]['d_k']}..{big['d_k']} (n = {n}; "
                f"farthest at d_k = {worst_std['d_k']}: {worst_std['logit_std']:.3f} "
                f"{intervals.fmt_interval(ci(worst_std, 'logit_std'), 3)}); at least {within:.1%} of logits lie in "
                f"[-3, 3] (least at d_k = {least_within['d_k']}: "
                f"{intervals.fmt_interval(ci(least_within, 'share_within_3'), 3)}; at d_k = 1 q.k is a product of two "
                f"normals); at most {saturated:.1%} of rows are saturated (max p > 0.99) at any d_k and n (the largest "
                f"upper bound: {ci(most_saturated, 'saturated_share')[1]:.2%} of {most_saturated['rows']} rows at d_k = "
                f"{most_saturated['d_k']}, n = {most_saturated['n']}), and the mean Jacobian Frobenius norm is "
                f"{big['jacobian_frobenius']:.3f} at d_k = {big['d_k']}.{none_text} Variance 1 needs unit-variance q "
                f"and k components, which PyTorch's default init does not give (C01). Part rules, on 95% intervals over "
                f"rows, at every setting: the std within {STD_BAND[0]:g}-{STD_BAND[1]:g}; at least {WITHIN_3_SHARE:.0%} "
                f"of logits in [-3, 3]; at most {SATURATED:.0%} of rows saturated (a setting whose interval straddles "
                f"its threshold is undecided).")
    return Finding("C04", "saturation", evidence, {"max_std_error": std_err, "min_share_within_3": within,
                                                   "max_saturated_share": saturated}, readings)


def judge_c05(result: dict) -> Finding:
    """The premise, inv_d at d_k in {64, 128} (n = 128), on 95% intervals: near uniform if the mean
    normalised entropy >= NEAR_UNIFORM_ENTROPY and >= NEAR_UNIFORM_ROWS of rows are within KL 0.01
    of uniform; fails if the entropy lies below FLAT_ENTROPY (far from uniform); undecided between."""
    n = reference_n(result)
    rows = [r for r in pick(result["sweep"], rule="inv_d", n=n) if r["d_k"] in (64, 128)]
    if not rows:
        return claims.untested("C05", "saturation", "needs inv_d (A = 1) at d_k = 64 or 128.")
    ent = min(r["normalized_entropy"] for r in rows)
    uni = min(r["uniform_share"] for r in rows)

    def uniform(r: dict, scale: float) -> bool | None:
        near = intervals.at_least(ci(r, "normalized_entropy"), near_one(NEAR_UNIFORM_ENTROPY, scale))
        most_rows = intervals.at_least(ci(r, "uniform_share"), NEAR_UNIFORM_ROWS * scale)
        if near and most_rows:
            return True
        return False if intervals.at_least(ci(r, "normalized_entropy"), near_one(FLAT_ENTROPY, scale)) is False else None

    def read(scale: float) -> Reading:
        return by_row(rows, lambda r: uniform(r, scale),
                      measured=f"normalised entropy >= {ent:.4f}, {uni:.0%} of rows within KL 0.01 of uniform",
                      threshold=f"entropy >= {near_one(NEAR_UNIFORM_ENTROPY, scale):.3g} and >= "
                                f"{NEAR_UNIFORM_ROWS * scale:.0%} of rows near uniform (fails below entropy "
                                f"{near_one(FLAT_ENTROPY, scale):.3g})")

    desc = "; ".join(f"d_k = {r['d_k']}: logit std {r['logit_std']:.3f}, normalised entropy {r['normalized_entropy']:.4f} "
                     f"{intervals.fmt_interval(ci(r, 'normalized_entropy'), 4)}, max p {r['max_prob']:.4f} (uniform: "
                     f"{1 / n:.4f}), {r['uniform_share']:.0%} {intervals.fmt_interval(ci(r, 'uniform_share'), percent=True)} "
                     f"of rows within KL 0.01 of uniform" for r in rows)
    sqrt_rows = [r for r in pick(result["sweep"], rule="sqrt", n=n) if r["d_k"] in (64, 128)]
    sqrt_text = f" Under sqrt the same rows have normalised entropy {sqrt_rows[0]['normalized_entropy']:.3f}." if sqrt_rows else ""
    evidence = (f"At initialisation (unit-variance q, k components), dividing by d_k with n = {n} keys: {desc}.{sqrt_text} "
                f"So the softmax starts near uniform; whether training grows q and k to compensate, and whether the "
                f"model is 'unusable', is the training lab's part. Part rule (the premise), on 95% intervals over rows: "
                f"holds if the mean normalised entropy >= {NEAR_UNIFORM_ENTROPY:g} and >= {NEAR_UNIFORM_ROWS:.0%} of "
                f"rows are within KL 0.01 of uniform, fails if the entropy lies below {FLAT_ENTROPY:g}, undecided "
                f"otherwise.")
    return Finding("C05", "saturation", evidence, {"min_normalized_entropy": ent, "min_uniform_share": uni},
                   {"uniform": measured_at(read)})


def _dk_reaching(rows: list[dict], key: str, level: float) -> float | None:
    """The d_k (log-interpolated) where rows[key] first reaches ``level``."""
    pts = sorted((r["d_k"], r[key]) for r in rows)
    for (d0, y0), (d1, y1) in zip(pts, pts[1:]):
        if y0 >= level:
            return d0
        if y1 >= level:
            t = (level - y0) / (y1 - y0)
            return math.exp(math.log(d0) + t * (math.log(d1) - math.log(d0)))
    return None


def judge_c06(result: dict) -> Finding:
    """Three parts, no scaling at d_k in {64, 128}, n = 128, each read at both d_k: (i) logits around
    +-100: mean max |logit| >= LOGITS_AROUND_100 on its 95% interval; (ii) near one-hot: >= ONE_HOT_ROWS
    of rows saturated (max p > 0.99); (iii) the gradient to W_q near 0: below GRADIENT_NEAR_0 of the
    sqrt rule's."""
    n = reference_n(result)
    rows = [r for r in pick(result["sweep"], rule="none", n=n) if r["d_k"] in (64, 128)]
    grads = {(r["rule"], r["d_k"]): r for r in result["gradient"] if r["d_k"] in (64, 128)}
    if not rows or ("sqrt", rows[0]["d_k"]) not in grads or ("none", rows[0]["d_k"]) not in grads:
        return claims.untested("C06", "saturation", "needs none and sqrt at d_k = 64 or 128.")
    max_abs = max(r["logit_max_abs"] for r in rows)
    saturated = min(r["saturated_share"] for r in rows)
    ratios = {r["d_k"]: grads[("none", r["d_k"])]["grad_wq_output"] / grads[("sqrt", r["d_k"])]["grad_wq_output"]
              for r in rows}
    ratio = max(ratios.values())
    ratio_p = max(grads[("none", r["d_k"])]["grad_wq_probs"] / grads[("sqrt", r["d_k"])]["grad_wq_probs"] for r in rows)

    most_saturated = max(r["saturated_share"] for r in rows)
    least_ratio = min(ratios.values())
    at_dk = f"d_k {' and '.join(str(r['d_k']) for r in rows)}"

    def read_logits(scale: float) -> Reading:
        return by_row(rows, lambda r: intervals.at_least(ci(r, "logit_max_abs"), LOGITS_AROUND_100 * scale),
                      measured=f"mean max |logit| up to {max_abs:.1f}", threshold=f">= {LOGITS_AROUND_100 * scale:g}",
                      direction=f"{max_abs:.0f} at most at {at_dk}, below ±100")

    def read_one_hot(scale: float) -> Reading:
        return by_row(rows, lambda r: intervals.at_least(ci(r, "saturated_share"), ONE_HOT_ROWS * scale),
                      measured=f"at least {saturated:.0%} of rows with max p > 0.99",
                      threshold=f">= {ONE_HOT_ROWS * scale:.0%} of rows",
                      direction=f"{most_saturated:.0%} of rows at most at {at_dk}, not most of them")

    def read_gradient(scale: float) -> Reading:
        return by_row(rows, lambda r: ratios[r["d_k"]] <= GRADIENT_NEAR_0 * scale,
                      measured=f"the unscaled gradient to W_q is up to {ratio:.2f}x sqrt's",
                      threshold=f"<= {GRADIENT_NEAR_0 * scale:.2g}x sqrt's",
                      direction=(f"{least_ratio:.3g}x-{ratio:.3g}x sqrt's at {at_dk}: larger, not near 0"
                                 if least_ratio > 1 else
                                 f"{least_ratio:.3g}x sqrt's at least, not below {GRADIENT_NEAR_0 * scale:.2g}x"))

    readings = {"logits": measured_at(read_logits), "one_hot": measured_at(read_one_hot),
                "gradient": measured_at(read_gradient)}
    all_none = pick(result["sweep"], rule="none", n=n)
    reach = _dk_reaching(all_none, "logit_max_abs", 100)
    half_sat = _dk_reaching(all_none, "saturated_share", 0.5)
    big_g = [r for r in result["gradient"] if r["rule"] in ("none", "sqrt")]
    big_dk = max(r["d_k"] for r in big_g)
    big_ratio = (pick(big_g, rule="none", d_k=big_dk)[0]["grad_wq_output"]
                 / pick(big_g, rule="sqrt", d_k=big_dk)[0]["grad_wq_output"])
    desc = "; ".join(f"d_k = {r['d_k']}: logit std {r['logit_std']:.1f}, mean max |logit| {r['logit_max_abs']:.1f} "
                     f"{intervals.fmt_interval(ci(r, 'logit_max_abs'), 3)}, max p {r['max_prob']:.3f}, "
                     f"{r['saturated_share']:.0%} {intervals.fmt_interval(ci(r, 'saturated_share'), percent=True)} of rows "
                     f"saturated" for r in rows)
    evidence = (f"Unscaled, n = {n} keys, unit-variance q and k: {desc}. The gradient reaching W_q is at most "
                f"{ratio:.2f}x the sqrt rule's (loss on the output; {ratio_p:.2f}x for a loss on the probabilities); at "
                f"d_k = {big_dk} it is {big_ratio:.3f}x. The mean max |logit| reaches 100 only at d_k "
                f"{'~ %.0f' % reach if reach else 'beyond the grid'}, and half of the rows are saturated from d_k "
                f"{'~ %.0f' % half_sat if half_sat else 'beyond the grid'}. Part rules, at d_k = 64 and 128, on 95% "
                f"intervals over rows: 'around +-100' holds if the mean max |logit| >= {LOGITS_AROUND_100:g}; 'near "
                f"one-hot' if >= {ONE_HOT_ROWS:.0%} of rows have max p > 0.99; 'gradients near 0' if below "
                f"{GRADIENT_NEAR_0:g} of the sqrt rule's (a part whose interval straddles its threshold is undecided). "
                f"Whether training stalls is the training lab's part.")
    return Finding("C06", "saturation", evidence, {"max_logit_abs": max_abs, "min_saturated_share": saturated,
                                                   "grad_ratio_none_sqrt": ratio, "grad_ratio_probs": ratio_p,
                                                   "dk_logits_reach_100": reach}, readings)


IN_RANGE_SHARE = 0.5  # C16's ranges hold at n keys if at least half of p_i (and of p_i(1 - p_i)) lie in them


def range_holds(row: dict, scale: float = 1.0) -> bool | None:
    """Both of C16's ranges at one key count, on 95% intervals over rows."""
    parts = [intervals.at_least(ci(row, "share_p_in_5_95"), IN_RANGE_SHARE * scale),
             intervals.at_least(ci(row, "share_diag_in_5_25"), IN_RANGE_SHARE * scale)]
    return intervals.every(parts)


def judge_c16(result: dict) -> Finding:
    """Three parts.  (i) The formula: the diagonal of the softmax Jacobian agrees with autograd within
    FORMULA_AGREES.  (ii) Near 0 for an extreme input: every Jacobian entry < EXTREME_NEAR_0 at 100,
    n = 2 and 128.  (iii) The ranges, read at every key count n measured for sqrt-scaled logits: >=
    IN_RANGE_SHARE of p_i in [0.05, 0.95] and of p_i(1 - p_i) in [0.05, 0.25].  The claim names no n,
    so ranges that hold with few keys and fail at realistic n hold in part.  Since the p_i sum to 1,
    at most 20 of them reach 0.05, so (iii) cannot hold beyond 40 keys."""
    curves, used = result["derivative"], result["derivative_in_use"]
    at100 = max(max(c["at_100"]["diag"], c["at_100"]["max_off_diag"]) for c in curves.values())
    formula_error = max(c["formula_error"] for c in curves.values())
    ns = sorted(int(n) for n in used)
    holds = {n: range_holds(used[str(n)]) for n in ns}
    small, large = used[str(ns[0])], used[str(ns[-1])]
    up_to = None
    for n in ns:
        if holds[n] is not True:
            break
        up_to = n
    undecided_at = next((n for n in ns if holds[n] is None), None)
    possible = round(2 / P_RANGE[0])  # 1 / 0.05 = 20 values can reach 0.05: half of 40 keys

    def read_formula(scale: float) -> Reading:
        return Reading(state_of(formula_error <= FORMULA_AGREES * scale),
                       measured=f"autograd agrees to {formula_error:.1e}", threshold=f"<= {FORMULA_AGREES * scale:.1e}")

    def read_extreme(scale: float) -> Reading:
        return Reading(state_of(at100 < EXTREME_NEAR_0 * scale), measured=f"every entry below {max(at100, 1e-300):.1e}",
                       threshold=f"< {EXTREME_NEAR_0 * scale:.1e}")

    def read_ranges(scale: float) -> Reading:
        states = [state_of(range_holds(used[str(n)], scale)) for n in ns]
        return Reading.over(states, measured=", ".join(f"n = {n}: {used[str(n)]['share_p_in_5_95']:.0%}"
                                                                 for n in ns) + " of p_i in range",
                       threshold=f">= {IN_RANGE_SHARE * scale:.0%} of p_i and of p_i(1 - p_i) in range",
                       settings=[{"where": f"n = {n}", "state": st} for n, st in zip(ns, states)])

    readings = {"formula": measured_at(read_formula), "extreme": measured_at(read_extreme),
                "ranges": measured_at(read_ranges)}
    c2, c128 = curves["2"], curves["128"]
    by_n = ", ".join(f"n = {n}: {used[str(n)]['share_p_in_5_95']:.0%}" for n in ns)
    evidence = (f"The diagonal of the softmax Jacobian is p_i(1 - p_i) (autograd agrees to "
                f"{formula_error:.1e}); the full Jacobian also has off-diagonal "
                f"terms -p_i p_j (for n = {large['n']} the diagonal carries {large['diagonal_share_of_jacobian']:.0%} "
                f"of its squared norm). At an input of 100 every entry is below {max(at100, 1e-300):.1e}: "
                f"{'near 0, as claimed' if at100 < EXTREME_NEAR_0 else 'not near 0'}. For one logit swept over [-3, 3]: with n = 2 "
                f"(the other logit 0; a sigmoid) p runs {c2['p_range'][0]:.3f}-{c2['p_range'][1]:.3f} and p(1 - p) "
                f"{c2['diag_range'][0]:.3f}-{c2['diag_range'][1]:.3f}, the interview answer's numbers; with n = 128 (others "
                f"N(0, 1)) p runs only {c128['p_range'][0]:.4f}-{c128['p_range'][1]:.4f} and p(1 - p) "
                f"{c128['diag_range'][0]:.4f}-{c128['diag_range'][1]:.4f}. For logits as the sqrt rule gives them "
                f"(d_k = {small['d_k']}), the share of p_i in [{P_RANGE[0]}, {P_RANGE[1]}] is {by_n}; with "
                f"{small['n']} keys {small['share_diag_in_5_25']:.0%} of p_i(1 - p_i) lie in [{DIAG_RANGE[0]}, "
                f"{DIAG_RANGE[1]}]. The p_i sum to 1, so at most {possible // 2} of them can reach {P_RANGE[0]}: beyond "
                f"{possible} keys fewer than half can, whatever the logits. So the interview answer's ranges describe a softmax "
                f"over a few keys: measured, they hold "
                + (f"up to n = {up_to}" if up_to is not None else "for no n measured")
                + (f" (at n = {undecided_at} the share's interval straddles {IN_RANGE_SHARE:.0%}: undecided there)"
                   if undecided_at is not None else "")
                + f" and fail for realistic n (n = {large['n']}: {large['share_p_in_5_95']:.1%} of p_i in range, "
                f"median p_i {large['p_quantiles'][1]:.4f}, 95th percentile of p_i(1 - p_i) "
                f"{large['diag_quantiles'][2]:.4f}). Part rules: the formula agrees with autograd within "
                f"{FORMULA_AGREES:g}; every Jacobian entry at 100 is below {EXTREME_NEAR_0:g}; the ranges hold at n keys "
                f"where >= {IN_RANGE_SHARE:.0%} of p_i lie in [{P_RANGE[0]}, {P_RANGE[1]}] and >= {IN_RANGE_SHARE:.0%} "
                f"of p_i(1 - p_i) in [{DIAG_RANGE[0]}, {DIAG_RANGE[1]}], on 95% intervals over rows (the claim names no "
                f"n: holding at few keys and failing at realistic n is holding in part).")
    return Finding("C16", "saturation", evidence, {
        "max_entry_at_100": at100, "small_n": small["n"], "large_n": large["n"],
        "share_p_in_range_small_n": small["share_p_in_5_95"], "share_diag_in_range_small_n": small["share_diag_in_5_25"],
        "share_p_in_range_large_n": large["share_p_in_5_95"], "holds_up_to_n": up_to, "possible_up_to_n": possible},
        readings)


def judge_c18(result: dict) -> Finding:
    """Three parts at initialisation: (i) sqrt is the balance point: the exponent with zero slope of
    log(logit std) vs log(d_k) within BALANCE_SLOPE of 0.5, and the exponent whose normalised entropy
    varies least across d_k within one grid step of 0.5 (both, else fails); (ii) inv_d over-smooths:
    normalised entropy >= OVERSMOOTH_LEVEL at the largest d_k; (iii) a constant cannot adapt: its
    slope within BALANCE_SLOPE of 0.5 and its entropy spread across d_k >= CONSTANT_SPREAD."""
    n = reference_n(result)
    slope_rows = [r for r in result["slopes"] if r["n"] == n]
    powers = [r for r in slope_rows if r["exponent"] is not None]
    const = [r for r in slope_rows if r["exponent"] is None]
    if len(powers) < 2:
        return claims.untested("C18", "saturation", "needs at least two exponents on the grid.")
    a_star = result["zero_slope_exponent"].get(str(n))
    grid = sorted(r["exponent"] for r in powers)
    step = min(b - a for a, b in zip(grid, grid[1:]))
    best = min(powers, key=lambda r: r["entropy_spread"])
    inv = sorted(pick(result["sweep"], rule="inv_d", n=n), key=lambda r: r["d_k"])

    def read_balance(scale: float) -> Reading:
        a_ok = a_star is not None and abs(a_star - 0.5) <= BALANCE_SLOPE * scale
        best_ok = abs(best["exponent"] - 0.5) <= step * scale + 1e-9
        return Reading(state_of(a_ok and best_ok), measured=f"zero slope at A = {a_star if a_star is None else round(a_star, 3)}, "
                       f"least-varying entropy at A = {best['exponent']:g}",
                       threshold=f"both within {BALANCE_SLOPE * scale:.2g} and {step * scale:.2g} of 0.5")

    def read_oversmooth(scale: float) -> Reading:
        if not inv:
            return Reading(claims.NOT_TESTABLE, note="inv_d is not on the exponent grid")
        level = near_one(OVERSMOOTH_LEVEL, scale)
        return Reading(state_of(inv[-1]["normalized_entropy"] >= level),
                       measured=f"normalised entropy {inv[-1]['normalized_entropy']:.4f} at d_k = {inv[-1]['d_k']}",
                       threshold=f">= {level:.3g}")

    def read_constant(scale: float) -> Reading:
        if not const:
            return Reading(claims.NOT_TESTABLE, note="no constant factor on the grid")
        fails = abs(const[0]["slope"] - 0.5) <= BALANCE_SLOPE * scale and const[0]["entropy_spread"] >= CONSTANT_SPREAD * scale
        return Reading(state_of(fails), measured=f"slope {const[0]['slope']:.3f}, entropy spread "
                       f"{const[0]['entropy_spread']:.3f} across d_k",
                       threshold=f"slope within {BALANCE_SLOPE * scale:.2g} of 0.5 and spread >= {CONSTANT_SPREAD * scale:.2g}")

    readings = {"balance_init": measured_at(read_balance), "oversmooth_init": measured_at(read_oversmooth),
                "constant_init": measured_at(read_constant)}
    slope_text = ", ".join(f"A = {r['exponent']:g}: {r['slope']:.3f}" for r in powers if r["exponent"] in (0, 0.5, 1, 1.5))
    sqrt_spread = next((r["entropy_spread"] for r in powers if r["exponent"] == 0.5), float("nan"))
    evidence = (f"The slope of log(logit std) against log(d_k) follows 0.5 - A ({slope_text}); it crosses 0 at "
                f"A = {a_star if a_star is None else round(a_star, 3)}. The normalised entropy (n = {n}) varies least "
                f"across d_k = {inv[0]['d_k'] if inv else '?'}..{inv[-1]['d_k'] if inv else '?'} at A = "
                f"{best['exponent']:g} (spread {best['entropy_spread']:.3f}; sqrt: {sqrt_spread:.3f}). Dividing by d_k "
                f"over-smooths: normalised entropy {inv[-1]['normalized_entropy']:.4f} at d_k = {inv[-1]['d_k']}. "
                + (f"A constant factor {const[0]['spec']} has slope {const[0]['slope']:.3f} and its entropy spans "
                   f"{const[0]['entropy_min']:.3f}-{const[0]['entropy_max']:.3f} across d_k: right for one d_k only. "
                   if const else "")
                + "This is the balance at initialisation with unit-variance q and k; what training prefers is the "
                f"training lab's part. Part rules: the balance point holds if the zero-slope A is within "
                f"{BALANCE_SLOPE:g} of 0.5 and the least-varying A within one grid step of 0.5; over-smoothing if "
                f"inv_d's normalised entropy >= {OVERSMOOTH_LEVEL:g} at the largest d_k; 'no constant adapts' if the "
                f"constant's slope is within {BALANCE_SLOPE:g} of 0.5 and its entropy spread >= {CONSTANT_SPREAD:g}.")
    return Finding("C18", "saturation", evidence, {"zero_slope_exponent": a_star, "least_varying_exponent": best["exponent"],
                                                   "sqrt_entropy_spread": sqrt_spread,
                                                   "inv_d_entropy_at_max_dk": inv[-1]["normalized_entropy"] if inv else None,
                                                   "constant_factor": result["config"]["constant"] if const else None,
                                                   "constant_entropy_min": const[0]["entropy_min"] if const else None,
                                                   "constant_entropy_max": const[0]["entropy_max"] if const else None},
                   readings)


def judge(result: dict) -> dict[str, Finding]:
    return {"C04": judge_c04(result), "C05": judge_c05(result), "C06": judge_c06(result),
            "C16": judge_c16(result), "C18": judge_c18(result)}
