"""The variance lab's part readings (C01, C02, C03, C08, C15), each with its thresholds, reading
only the lab's result; :func:`attnscale.claims.label` turns the parts into the label.  Every
reading function takes ``scale``, the factor its thresholds are moved by (1 as declared; 0.8 and
1.2 for the margin the report states)."""

from __future__ import annotations

import math

from ... import claims, intervals
from ...claims import Finding, Reading, measured_at, state_of
from .experiment import DTYPES, GAUSS_BEYOND_3, INIT_NAMES, Z95

INDEPENDENT_UNIT = ("gaussian", "uniform", "rademacher")  # the premise of C02 exactly
# C03's two readings of "extreme values are likely": statistically, more of q.k beyond 3 std than
# this share (a Gaussian has 0.27%); for a softmax, at least this share of the unscaled q.k outside
# [-3, 3], the input range C04 calls unsaturated.
SOFTMAX_LARGE = 3.0
LARGE_LIKELY = 0.5
# C15: "differs little" at small d_k, anchored on a measured contrast (the claim gives no number): the
# rows with and without the factor at most this fraction as far apart in total variation as the same
# rows at the largest d_k measured, where the source calls the factor necessary.
SMALL_TV_RATIO = 0.25
# C01: q components "mean 0, variance 1": |mean| at most this, variance within this of 1
MEAN_NEAR_0, VAR_NEAR_1 = 0.05, 0.1
# C03: the spread is right if at least this share lies within +-3 sqrt(d_k) and the std is within this of sqrt(d_k)
BAND_SHARE, STD_RATIO_TOLERANCE = 0.99, 0.1
# C08: two roundings each way, so two results accurate to rounding can be this many ulps apart
SAME_ULPS = 2

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


def init_holds(row: dict, scale: float = 1.0) -> bool | None:
    """One setting's 'mean 0, variance 1', on its 95% intervals over tokens."""
    mean = intervals.inside(tuple(row["mean_ci"]), -MEAN_NEAR_0 * scale, MEAN_NEAR_0 * scale)
    var = intervals.inside(tuple(row["var_ci"]), 1 - VAR_NEAR_1 * scale, 1 + VAR_NEAR_1 * scale)
    return intervals.every((mean, var))


def judge_c01(result: dict) -> Finding:
    """One part read at each initialisation, on 95% intervals over tokens: holds there if |mean| <=
    MEAN_NEAR_0 and the variance lies within VAR_NEAR_1 of 1, fails if either interval lies wholly
    outside."""
    rows = result["init"]

    def read(scale: float) -> Reading:
        states = [state_of(init_holds(r, scale)) for r in rows]
        return Reading.over(states, measured="; ".join(f"{r['init']}: variance {r['var']:.3f} "
                                                                 f"{intervals.fmt_interval(r['var_ci'], 3)}" for r in rows),
                       threshold=f"|mean| <= {MEAN_NEAR_0 * scale:g}, variance within {VAR_NEAR_1 * scale:.0%} of 1",
                       settings=[{"where": r["init"], "state": st} for r, st in zip(rows, states)])

    reading = measured_at(read)
    parts = "; ".join(f"{r['init']} ({r['fan_in']}->{r['fan_out']}): mean {r['mean']:.3f}, variance "
                      f"{r['var']:.3f} {intervals.fmt_interval(r['var_ci'], 3)} (closed form {r['closed_form_var']:.3f}): "
                      f"{s['state']}" for r, s in zip(rows, reading.settings))
    evidence = (f"q components for unit-variance input: {parts}. Part rule, on 95% intervals over tokens: an "
                f"initialisation gives 'mean 0, variance 1' if |mean| <= {MEAN_NEAR_0:g} and the variance lies within "
                f"{VAR_NEAR_1:.0%} of 1; the part holds if every initialisation does, in part if some do. Variance 1 "
                f"needs fan_in = fan_out under Xavier (2 fan_in / (fan_in + fan_out)); PyTorch's default nn.Linear "
                f"init gives 1/3 + 1/(3 fan_in), so unscaled q.k then has std sqrt(d_k)/3, not sqrt(d_k).")
    numbers = {f"var[{r['init']}]": r["var"] for r in rows}
    numbers.update({f"closed_form_var[{r['init']}]": r["closed_form_var"] for r in rows})
    return Finding("C01", "variance", evidence, numbers, {"init": reading})


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
    """One test of Var(q.k) = d_k over every row of the independent unit-variance families: a row
    fails when it lies more than :func:`intervals.bonferroni_z` standard errors off, so a true
    premise is rejected with probability at most FAMILY_ALPHA (1%) whatever the number of rows."""
    rows = [r for r in result["dot"] if r["family"] in INDEPENDENT_UNIT]
    if not rows:
        return claims.untested("C02", "variance", "no independent unit-variance family was sampled.")
    critical = intervals.bonferroni_z(len(rows), intervals.FAMILY_ALPHA)
    zs = [var_z(r) for r in rows]
    worst_z = max(zs)
    worst = max(abs(r["var"] / r["d_k"] - 1) for r in rows)
    rejected = worst_z > critical

    def read(scale: float) -> Reading:
        states = [state_of(z <= critical * scale) for z in zs]
        return Reading.over(states, measured=f"at most {worst_z:.2f} standard errors from d_k over "
                       f"{len(rows)} rows (largest |Var/d_k - 1| {worst:.3f})",
                       threshold=f"every row within {critical * scale:.2f} standard errors (Bonferroni, 1% false rejection)")

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
                f"{', so std = sqrt(d_k)' if not rejected else ''}. Part rule: one test over all rows; a row more than "
                f"{critical:.2f} standard errors off fails (Bonferroni over {len(rows)} rows: a true Var = d_k is "
                f"rejected with probability at most {intervals.FAMILY_ALPHA:.0%}).{corr_text}")
    return Finding("C02", "variance", evidence, {"max_std_errors": worst_z, "critical_std_errors": critical,
                                                 "max_rel_error": worst, "rows": len(rows), "max_d_k": dks[-1]},
                   {"variance": measured_at(read)})


def judge_c03(result: dict) -> Finding:
    """Two parts, on 95% intervals (Wilson for shares of the samples).  The spread, at d_k 64 and 128
    (gaussian): at least BAND_SHARE within +-3 sqrt(d_k) and std/sqrt(d_k) within STD_RATIO_TOLERANCE
    of 1.  'Extreme values are likely': at least LARGE_LIKELY of the unscaled q.k beyond +-SOFTMAX_LARGE
    (the range C04 calls unsaturated) at both d_k.  Read statistically (many beyond 3 std) the sentence
    would contradict its own band, so that is context (the share beyond 3 std in the premise's
    families), not a reading."""
    rows = [r for r in family_rows(result, "gaussian") if r["d_k"] in (64, 128)]
    if not rows:
        return claims.untested("C03", "variance", "d_k = 64 and 128 were not sampled for the gaussian family.")
    within = min(1 - r["beyond_3sqrt_dk"] for r in rows)
    std_ratio = max(abs(r["std"] / math.sqrt(r["d_k"]) - 1) for r in rows)
    at = [r for r in result["dot"] if r["d_k"] in (64, 128) and r["family"] in INDEPENDENT_UNIT]  # the premise's rows
    tail = max(r["beyond_3std"] for r in at)
    large = min(r["beyond_abs3"] for r in rows)

    def read_spread(scale: float) -> Reading:
        states = [state_of(intervals.every((
            intervals.at_most(share_ci(r, "beyond_3sqrt_dk"), (1 - BAND_SHARE) * scale),
            intervals.inside(std_ratio_ci(r), 1 - STD_RATIO_TOLERANCE * scale, 1 + STD_RATIO_TOLERANCE * scale))))
            for r in rows]
        return Reading.over(states, measured=f"{within:.2%} within +-3 sqrt(d_k); std/sqrt(d_k) within "
                       f"{std_ratio:.1%} of 1", threshold=f">= {1 - (1 - BAND_SHARE) * scale:.2%} within the band, std "
                       f"within {STD_RATIO_TOLERANCE * scale:.0%}",
                       settings=[{"where": f"d_k = {r['d_k']}", "state": st} for r, st in zip(rows, states)])

    def read_extreme(scale: float) -> Reading:
        # the one reading the sentence allows: "many beyond 3 std" would contradict its own +-3 sqrt(d_k) band
        states = [state_of(intervals.at_least(share_ci(r, "beyond_abs3"), LARGE_LIKELY * scale)) for r in rows]
        return Reading.over(states, measured=f"{large:.0%} of |q.k| > {SOFTMAX_LARGE:g} (large for a softmax, C04)",
                            threshold=f">= {LARGE_LIKELY * scale:.0%} of |q.k| beyond +-{SOFTMAX_LARGE:g}",
                            settings=[{"where": f"d_k = {r['d_k']}", "state": st} for r, st in zip(rows, states)],
                            direction=f"{large:.0%} of |q.k| > {SOFTMAX_LARGE:g}, not most")

    spread, extreme = measured_at(read_spread), measured_at(read_extreme)
    # std sqrt(d_k) puts half of q.k beyond +-3 once 3 / sqrt(d_k) <= 0.674, the median of |Z|
    half_from = math.ceil((SOFTMAX_LARGE / 0.6744897501960817) ** 2)
    worst_tail = max(at, key=lambda r: r["beyond_3std"])
    evidence = (f"Unscaled, at d_k = 64 and 128 (gaussian, {rows[0]['samples']:,} samples each), {within:.2%} of q.k fall "
                f"within +-3 sqrt(d_k) and std/sqrt(d_k) is within {std_ratio:.1%} of 1: the spread {spread.state}. "
                f"'Extreme values are likely' is read as values that are large for a softmax: {large:.0%} of the "
                f"unscaled q.k have |q.k| > {SOFTMAX_LARGE:g}, outside the range where the softmax gradient is not "
                f"saturated (C04); with std sqrt(d_k) that is the majority from d_k = {half_from} on; that part "
                f"{extreme.state}. Read statistically (many values beyond 3 std) the sentence would contradict its own "
                f"band, which a near-Gaussian sum fills but for {GAUSS_BEYOND_3:.2%}, so that is not a reading of it; "
                f"as context, at most {tail:.2%} {intervals.fmt_interval(share_ci(worst_tail, 'beyond_3std'), 2)} of "
                f"q.k lie beyond 3 std in any of the {len({r['family'] for r in at})} premise families "
                f"({', '.join(INDEPENDENT_UNIT)}). Part rules, on 95% intervals: the spread holds if at least "
                f"{BAND_SHARE:.0%} lie within the band and the std is within {STD_RATIO_TOLERANCE:.0%} of sqrt(d_k) at "
                f"both d_k; 'extreme values are likely' holds if at least {LARGE_LIKELY:.0%} ('likely': more often "
                f"than not) of q.k lie beyond +-{SOFTMAX_LARGE:g} at both d_k.")
    return Finding("C03", "variance", evidence, {"share_within_band": within, "max_std_ratio_error": std_ratio,
                                                 "max_share_beyond_3std": tail, "share_abs_above_3": large},
                   {"spread": spread, "extreme": extreme})


def judge_c08(result: dict) -> Finding:
    """Holds if the two ways are never more than SAME_ULPS apart, fails otherwise.  Each way rounds
    twice (the factor, then the product or quotient), so each is within about 1 ulp of the exact
    x / sqrt(d_k), and two such results can be 2 ulps apart while both are accurate to rounding."""
    ulp = result["ulp"]
    worst = max(w["max_ulp"] for d in ulp.values() for w in d.values())

    def read(scale: float) -> Reading:
        return Reading(state_of(worst <= SAME_ULPS * scale), measured=f"at most {worst} ulp apart",
                       threshold=f"<= {SAME_ULPS * scale:g} ulp (the two ways' combined rounding)")
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
                f"changes attention. Part rule: the same if never more than {SAME_ULPS} ulps apart (the two ways' "
                f"combined rounding bound).")
    numbers = {f"share_differ[{name}]": d["tensor"]["share_differ"] for name, d in ulp.items()}
    numbers["max_ulp"] = worst
    return Finding("C08", "variance", evidence, numbers, {"same": measured_at(read)})


def judge_c15(result: dict) -> Finding:
    """One part, read at d_k = 2 on 95% intervals over rows: the rows with and without the factor
    differ little where their total-variation distance is at most SMALL_TV_RATIO of the same distance
    at the largest d_k measured (the claim names no number, so "little" is measured against the
    difference the factor makes where the source calls it necessary; intervals overlapping that ratio
    leave it undecided).  d_k = 1 is arithmetic (the factor is 1), said in the evidence, not a test."""
    rows = {r["d_k"]: r for r in result["small_dk"]}
    if 2 not in rows or max(rows) < 16:
        return claims.untested("C15", "variance", "needs d_k = 2 and a d_k >= 16 to compare with.")
    two, big = rows[2], rows[max(rows)]
    tv = tuple(two["tv_distance_ci"])

    def read(scale: float) -> Reading:
        ratio = SMALL_TV_RATIO * scale
        relative = intervals.at_most(tv, ratio * big["tv_distance_ci"][0])
        if relative is not True and tv[0] <= ratio * big["tv_distance_ci"][1]:
            relative = None  # the two intervals overlap around the ratio: undecided
        return Reading(state_of(relative), measured=f"TV {two['tv_distance']:.3f} {intervals.fmt_interval(tv, 3)} at "
                       f"d_k = 2 vs {big['tv_distance']:.3f} at d_k = {big['d_k']}",
                       threshold=f"<= {ratio:.3g} of the TV at d_k = {big['d_k']}",
                       direction=f"{two['tv_distance'] / big['tv_distance']:.2f} of the TV at d_k = {big['d_k']}")

    one = rows.get(1)
    one_text = (f"At d_k = 1 the factor is 1: the TV distance is {one['tv_distance']:.3g}. " if one else "")
    evidence = (f"{one_text}At d_k = 2 (n = {two['n']} keys) the rows with and without 1/sqrt(2) are {two['tv_distance']:.3f} "
                f"{intervals.fmt_interval(two['tv_distance_ci'], 3)} apart in total variation (normalised entropy {two['entropy_sqrt']:.3f} vs {two['entropy_none']:.3f}, "
                f"output RMS difference {two['output_rms_diff']:.3f} std of v); at d_k = {big['d_k']} the same comparison gives "
                f"{big['tv_distance']:.3f} (entropy {big['entropy_sqrt']:.3f} vs {big['entropy_none']:.3f}). "
                f"Part rule, on 95% intervals over rows, at d_k = 2: 'differs little' holds where the TV is <= "
                f"{SMALL_TV_RATIO:g} of the TV at the largest d_k (the claim gives no number: 'little' is read against the "
                f"difference the factor makes where the source calls it necessary); an interval straddling that line is "
                f"undecided.")
    return Finding("C15", "variance", evidence, {"tv_dk2": two["tv_distance"], "tv_dk_large": big["tv_distance"],
                                                 "dk_large": big["d_k"], "entropy_dk2_sqrt": two["entropy_sqrt"],
                                                 "entropy_dk2_none": two["entropy_none"]},
                   {"little": measured_at(read)})


def judge(result: dict) -> dict[str, Finding]:
    return {"C01": judge_c01(result), "C02": judge_c02(result), "C03": judge_c03(result),
            "C08": judge_c08(result), "C15": judge_c15(result)}
