"""The variance lab's verdict rules (C01, C02, C03, C08, C15), each with its thresholds,
reading only the lab's result."""

from __future__ import annotations

import math

from ... import claims, intervals
from ...claims import Finding
from .experiment import DTYPES, GAUSS_BEYOND_3, INIT_NAMES, Z95

INDEPENDENT_UNIT = ("gaussian", "uniform", "rademacher")  # the premise of C02 exactly
# C03's two readings of "extreme values are likely": statistically, more of q.k beyond 3 std than
# this share (a Gaussian has 0.27%); for a softmax, at least this share of the unscaled q.k outside
# [-3, 3], the input range C04 calls unsaturated.
TAIL_LIKELY = 0.01
SOFTMAX_LARGE = 3.0
LARGE_LIKELY = 0.5
# C15: "differs little" at d_k = 2: rows at most this far apart in total variation, and at most this
# fraction of the distance at the largest d_k measured.
SMALL_TV, SMALL_TV_RATIO = 0.1, 0.25
# C01: q components "mean 0, variance 1": |mean| at most this, variance within this of 1
MEAN_NEAR_0, VAR_NEAR_1 = 0.05, 0.1
# C03: the spread is right if at least this share lies within +-3 sqrt(d_k) and the std is within this of sqrt(d_k)
BAND_SHARE, STD_RATIO_TOLERANCE = 0.99, 0.1
# C02: a rejected Var = d_k is 'partly' right while every row's interval reaches within this of d_k
RATIO_TOLERANCE = 0.25

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C01": tuple(f"var[{name}]" for name in INIT_NAMES) + tuple(f"closed_form_var[{name}]" for name in INIT_NAMES),
    "C02": ("max_std_errors", "critical_std_errors", "max_rel_error", "rows", "max_d_k"),
    "C03": ("share_within_band", "max_std_ratio_error", "max_share_beyond_3std", "share_abs_above_3"),
    "C08": tuple(f"share_differ[{name}]" for name in DTYPES) + ("max_ulp",),
    "C15": ("tv_dk2", "tv_dk_large", "dk_large", "entropy_dk2_sqrt", "entropy_dk2_none"),
}


def family_rows(result: dict, family: str) -> list[dict]:
    return [r for r in result["dot"] if r["family"] == family]


def init_holds(row: dict) -> bool | None:
    """One setting's 'mean 0, variance 1', on its 95% intervals over tokens."""
    mean = intervals.inside(tuple(row["mean_ci"]), -MEAN_NEAR_0, MEAN_NEAR_0)
    var = intervals.inside(tuple(row["var_ci"]), 1 - VAR_NEAR_1, 1 + VAR_NEAR_1)
    return intervals.every((mean, var))


def judge_c01(result: dict) -> Finding:
    """Per setting, on 95% intervals over tokens: holds if |mean| <= MEAN_NEAR_0 and the variance lies
    within VAR_NEAR_1 of 1, fails if either interval lies wholly outside.  Supported if every setting
    holds, refuted if none does, partly otherwise."""
    rows = result["init"]
    decided = [init_holds(r) for r in rows]
    verdict = claims.verdict_of_parts(decided)
    parts = "; ".join(f"{r['init']} ({r['fan_in']}->{r['fan_out']}): mean {r['mean']:.3f}, variance "
                      f"{r['var']:.3f} {intervals.fmt_interval(r['var_ci'], 3)} (closed form {r['closed_form_var']:.3f}): "
                      f"{'holds' if d else 'fails' if d is False else 'undecided'}" for r, d in zip(rows, decided))
    evidence = (f"q components for unit-variance input: {parts}. Rule, on 95% intervals over tokens: a setting holds if "
                f"|mean| <= {MEAN_NEAR_0:g} and the variance lies within {VAR_NEAR_1:.0%} of 1; supported if every "
                f"setting holds, refuted if none does, partly otherwise. Variance 1 needs fan_in = fan_out under Xavier "
                f"(2 fan_in / (fan_in + fan_out)); PyTorch's default nn.Linear init gives 1/3 + 1/(3 fan_in), "
                f"so unscaled q.k then has std sqrt(d_k)/3, not sqrt(d_k).")
    numbers = {f"var[{r['init']}]": r["var"] for r in rows}
    numbers.update({f"closed_form_var[{r['init']}]": r["closed_form_var"] for r in rows})
    return Finding(verdict, evidence, numbers)


def share_ci(row: dict, key: str) -> tuple[float, float]:
    """The Wilson interval of a share of a row's independent samples."""
    return intervals.wilson(round(row[key] * row["samples"]), row["samples"])


def std_ratio_ci(row: dict) -> tuple[float, float]:
    """std / sqrt(d_k), from the row's interval of the variance."""
    return (math.sqrt(max(row["var_lo"], 0.0) / row["d_k"]), math.sqrt(max(row["var_hi"], 0.0) / row["d_k"]))


def var_z(row: dict) -> float:
    """How many standard errors the measured Var(q.k) of a row lies from the exact d_k (the row's
    interval is var +- Z95 se, the standard error from the sample's own fourth moment)."""
    se = (row["var_hi"] - row["var_lo"]) / (2 * Z95)
    return abs(row["var"] - row["d_k"]) / se if se > 0 else (0.0 if row["var"] == row["d_k"] else math.inf)


def judge_c02(result: dict) -> Finding:
    """One test of Var(q.k) = d_k over every row of the independent unit-variance families: it
    rejects when some row is more than :func:`intervals.bonferroni_z` standard errors off, so a true
    premise is rejected with probability at most FAMILY_ALPHA (1%) whatever the number of rows.
    Not rejected: supported.  Rejected: refuted if some row's Var/d_k interval lies wholly more
    than RATIO_TOLERANCE from 1, partly otherwise (off, but by little)."""
    rows = [r for r in result["dot"] if r["family"] in INDEPENDENT_UNIT]
    if not rows:
        return Finding(claims.NOT_TESTABLE, "no independent unit-variance family was sampled.")
    critical = intervals.bonferroni_z(len(rows), intervals.FAMILY_ALPHA)
    zs = [var_z(r) for r in rows]
    worst_z = max(zs)
    worst = max(abs(r["var"] / r["d_k"] - 1) for r in rows)
    far_off = [r for r in rows if r["var_lo"] > r["d_k"] * (1 + RATIO_TOLERANCE) or r["var_hi"] < r["d_k"] * (1 - RATIO_TOLERANCE)]
    rejected = worst_z > critical
    verdict = claims.SUPPORTED if not rejected else (claims.REFUTED if far_off else claims.PARTLY)
    corr = [r for r in result["dot"] if r["family"] == "correlated"]
    corr_text = ""
    if corr:
        big = corr[-1]
        corr_text = (f" The premise matters: with k = q + noise (not independent) at d_k = {big['d_k']} the measured "
                     f"variance is {big['var'] / big['d_k']:.3f} d_k ({var_z({**big, 'd_k': big['pred_var']}):.0f} "
                     f"standard errors from the independent formula's {big['pred_var'] / big['d_k']:.3f} d_k) and the "
                     f"mean {big['mean']:.4g}, where the formula says 0 (exact: {big['exact_var'] / big['d_k']:.3f} d_k "
                     f"and {big['exact_mean']:.4g}).")
    dks = sorted({r["d_k"] for r in rows})
    samples = sorted({r["samples"] for r in rows})
    in_ci = sum(r["var_in_ci"] for r in rows)
    evidence = (f"For {', '.join(INDEPENDENT_UNIT)} components and d_k = {dks[0]}..{dks[-1]} ({samples[0]}-{samples[-1]} "
                f"samples each), the measured Var(q.k) is at most {worst_z:.2f} standard errors from d_k over the "
                f"{len(rows)} rows (largest |Var/d_k - 1| {worst:.3f}; d_k inside {in_ci} of the {len(rows)} nominal 95% "
                f"intervals), against a critical {critical:.2f}: the test "
                f"{'rejects' if rejected else 'does not reject'} Var(q.k) = d_k"
                f"{', so std = sqrt(d_k)' if not rejected else ''}. Rule: one test over all rows, rejecting when some "
                f"row is more than {critical:.2f} standard errors off (Bonferroni over {len(rows)} rows: a true "
                f"Var = d_k is rejected with probability at most {intervals.FAMILY_ALPHA:.0%}); not rejected supports "
                f"the claim; rejected refutes it if some row's 95% interval lies wholly more than "
                f"{RATIO_TOLERANCE:.0%} from d_k, and partly supports it otherwise.{corr_text}")
    return Finding(verdict, evidence, {"max_std_errors": worst_z, "critical_std_errors": critical,
                                       "max_rel_error": worst, "rows": len(rows), "max_d_k": dks[-1]})


def judge_c03(result: dict) -> Finding:
    """Spread part (required): at d_k 64 and 128 (gaussian), at least BAND_SHARE within +-3 sqrt(d_k)
    and std/sqrt(d_k) within STD_RATIO_TOLERANCE of 1.  'Extreme values likely', two readings:
    statistically, more than TAIL_LIKELY of q.k beyond 3 std in some family; for a softmax, at least
    LARGE_LIKELY of the unscaled q.k beyond +-SOFTMAX_LARGE.  Every part is decided on its 95%
    interval (Wilson for shares of the samples).  Spread off: refuted; spread right and the softmax
    reading holds: supported; otherwise partly (a straddling part is undecided)."""
    rows = [r for r in family_rows(result, "gaussian") if r["d_k"] in (64, 128)]
    if not rows:
        return Finding(claims.NOT_TESTABLE, "d_k = 64 and 128 were not sampled for the gaussian family.")
    within = min(1 - r["beyond_3sqrt_dk"] for r in rows)
    std_ratio = max(abs(r["std"] / math.sqrt(r["d_k"]) - 1) for r in rows)
    band = intervals.every(intervals.at_most(share_ci(r, "beyond_3sqrt_dk"), 1 - BAND_SHARE) for r in rows)
    std_ok = intervals.every(intervals.inside(std_ratio_ci(r), 1 - STD_RATIO_TOLERANCE, 1 + STD_RATIO_TOLERANCE)
                             for r in rows)
    spread = intervals.every((band, std_ok))
    at = [r for r in result["dot"] if r["d_k"] in (64, 128)]
    tail = max(r["beyond_3std"] for r in at)
    large = min(r["beyond_abs3"] for r in rows)
    tails = [share_ci(r, "beyond_3std") for r in at]  # "more than TAIL_LIKELY" in some family
    statistical = (True if any(low > TAIL_LIKELY for low, _ in tails) else
                   False if all(high <= TAIL_LIKELY for _, high in tails) else None)
    for_softmax = intervals.every(intervals.at_least(share_ci(r, "beyond_abs3"), LARGE_LIKELY) for r in rows)
    if spread is False:
        verdict = claims.REFUTED
    elif spread and for_softmax:
        verdict = claims.SUPPORTED
    else:
        verdict = claims.PARTLY
    # std sqrt(d_k) puts half of q.k beyond +-3 once 3 / sqrt(d_k) <= 0.674, the median of |Z|
    half_from = math.ceil((SOFTMAX_LARGE / 0.6744897501960817) ** 2)
    holds = [name for name, ok in (("the statistical reading", statistical), ("the softmax reading", for_softmax)) if ok]
    undecided = [name for name, ok in (("the spread", spread), ("the statistical reading", statistical),
                                       ("the softmax reading", for_softmax)) if ok is None]
    worst_tail = max(at, key=lambda r: r["beyond_3std"])
    evidence = (f"Unscaled, at d_k = 64 and 128 (gaussian, {rows[0]['samples']:,} samples each), {within:.2%} of q.k fall "
                f"within +-3 sqrt(d_k) and std/sqrt(d_k) is within {std_ratio:.1%} of 1: the spread is "
                f"{'right' if spread else 'off' if spread is False else 'undecided'}. 'Extreme values are likely', read "
                f"statistically (many values beyond 3 std): at most {tail:.2%} "
                f"{intervals.fmt_interval(share_ci(worst_tail, 'beyond_3std'), 2)} of q.k lie beyond 3 std in any of "
                f"the {len({r['family'] for r in at})} families (Gaussian: {GAUSS_BEYOND_3:.2%}), so "
                f"{'that holds' if statistical else 'such values are rare, not likely' if statistical is False else 'that is undecided'}. "
                f"Read as values that are large for a softmax: {large:.0%} of the unscaled q.k have |q.k| > "
                f"{SOFTMAX_LARGE:g}, outside the range where the softmax gradient is not saturated (C04); with std "
                f"sqrt(d_k) that is the majority from d_k = {half_from} on. Which reading holds: "
                f"{' and '.join(holds) or 'neither'}" + (f" (undecided: {', '.join(undecided)})" if undecided else "")
                + f". Rule, on 95% intervals: refuted if the spread is off (less than {BAND_SHARE:.0%} within the band "
                f"or the std off by more than {STD_RATIO_TOLERANCE:.0%}); supported if the spread holds and at least "
                f"{LARGE_LIKELY:.0%} of q.k lie beyond +-{SOFTMAX_LARGE:g} (the softmax reading); partly if only the "
                f"spread holds or only the statistical reading (more than {TAIL_LIKELY:.0%} beyond 3 std) does.")
    return Finding(verdict, evidence, {"share_within_band": within, "max_std_ratio_error": std_ratio,
                                       "max_share_beyond_3std": tail, "share_abs_above_3": large})


def judge_c08(result: dict) -> Finding:
    """Supported if the two ways are never more than 2 ulps apart, refuted otherwise.  Each way rounds
    twice (the factor, then the product or quotient), so each is within about 1 ulp of the exact
    x / sqrt(d_k), and two such results can be 2 ulps apart while both are accurate to rounding."""
    ulp = result["ulp"]
    worst = max(w["max_ulp"] for d in ulp.values() for w in d.values())
    verdict = claims.SUPPORTED if worst <= 2 else claims.REFUTED
    tensor = ", ".join(f"{name} {d['tensor']['share_differ']:.1%}" for name, d in ulp.items())
    scalar = ", ".join(f"{name} {d['scalar']['share_differ']:.2%}" for name, d in ulp.items())
    exact = ", ".join(f"{name} {d['tensor']['mul_exact_share']:.0%} vs {d['tensor']['div_exact_share']:.0%}"
                      for name, d in ulp.items() if d["tensor"]["mul_exact_share"] is not None)
    max_dk = result["config"]["ulp_max_dk"]
    same = ", ".join(f"{name} {d['tensor']['identical_dks_count']}" for name, d in ulp.items())
    evidence = (f"Mathematically the same; numerically up to {worst} ulp apart. With the factor as a tensor of the "
                f"same dtype (one IEEE rounding per op) the two differ in this share of elements over d_k = "
                f"1..{max_dk}: {tensor}; the share equal to the correctly rounded x / sqrt(d_k) is, multiply vs "
                f"divide: {exact}. The number of d_k with no difference at all is {same} of {max_dk} (among them "
                f"d_k = 1, 4, 16, 64, ..., where sqrt(d_k) is a power of two"
                f"{'' if result['ulp']['float32']['tensor']['pow4_identical'] else ' - not all of them here'}). With a "
                f"Python float factor, as attention code writes it (torch then computes half types in float32), the "
                f"share is {scalar}. A difference of an ulp or two is rounding noise, far below anything that "
                f"changes attention. Rule: supported if never more than 2 ulps apart (the two ways' combined "
                f"rounding bound), refuted otherwise.")
    numbers = {f"share_differ[{name}]": d["tensor"]["share_differ"] for name, d in ulp.items()}
    numbers["max_ulp"] = worst
    return Finding(verdict, evidence, numbers)


def judge_c15(result: dict) -> Finding:
    """'Differs little' at d_k = 2: TV distance between the rows <= 0.1 (absolute) and <= 1/4 of the
    TV distance at the largest d_k measured (relative).  Both: supported; one: partly; neither: refuted."""
    rows = {r["d_k"]: r for r in result["small_dk"]}
    if 2 not in rows or max(rows) < 16:
        return Finding(claims.NOT_TESTABLE, "needs d_k = 2 and a d_k >= 16 to compare with.")
    two, big = rows[2], rows[max(rows)]
    absolute = intervals.at_most(tuple(two["tv_distance_ci"]), SMALL_TV)
    relative = intervals.at_most(tuple(two["tv_distance_ci"]), SMALL_TV_RATIO * big["tv_distance_ci"][0])
    if relative is not True and two["tv_distance_ci"][0] <= SMALL_TV_RATIO * big["tv_distance_ci"][1]:
        relative = None  # the two intervals overlap around the ratio: undecided
    verdict = claims.verdict_of_parts([absolute, relative])
    one = rows.get(1)
    one_text = (f"At d_k = 1 the factor is 1: the TV distance is {one['tv_distance']:.3g}. " if one else "")
    evidence = (f"{one_text}At d_k = 2 (n = {two['n']} keys) the rows with and without 1/sqrt(2) are {two['tv_distance']:.3f} "
                f"{intervals.fmt_interval(two['tv_distance_ci'], 3)} apart in total variation (normalised entropy {two['entropy_sqrt']:.3f} vs {two['entropy_none']:.3f}, "
                f"output RMS difference {two['output_rms_diff']:.3f} std of v); at d_k = {big['d_k']} the same comparison gives "
                f"{big['tv_distance']:.3f} (entropy {big['entropy_sqrt']:.3f} vs {big['entropy_none']:.3f}). "
                f"Rule, on 95% intervals over rows: 'differs little' means TV <= {SMALL_TV:g} and <= {SMALL_TV_RATIO:g} "
                f"of the TV at the largest d_k; supported if both hold, refuted if neither, partly otherwise (a part "
                f"whose interval straddles its threshold is undecided).")
    return Finding(verdict, evidence, {"tv_dk2": two["tv_distance"], "tv_dk_large": big["tv_distance"],
                                       "dk_large": big["d_k"], "entropy_dk2_sqrt": two["entropy_sqrt"],
                                       "entropy_dk2_none": two["entropy_none"]})


def judge(result: dict) -> dict[str, Finding]:
    return {"C01": judge_c01(result), "C02": judge_c02(result), "C03": judge_c03(result),
            "C08": judge_c08(result), "C15": judge_c15(result)}
