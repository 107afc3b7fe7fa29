"""The doctor lab's part readings (C10, C14), with their thresholds, reading only the lab's result;
:func:`attnscale.claims.label` turns the parts into the label.  Every reading function takes
``scale``, the factor its thresholds are moved by (1 as declared; 0.8 and 1.2 for the margin the
report states)."""

from __future__ import annotations

import statistics

from ... import intervals
from ...claims import NOT_TESTABLE, Finding, Reading, measured_at, state_of
from ...probing.loading import model_name
from .experiment import mean_trajectory, runs_of

# C14: the flag "fires" when scaling too strong flags at least half of the heads; a correctly
# scaled model "false-alarms" when at least a quarter of its heads are flagged.
FIRES_SHARE = 0.5
FALSE_ALARM_SHARE = 0.25
# C10: logits "folded to unit scale" when their std at init lies in [0.5, 2]; "no explicit factor"
# when the probed factor is within 2% of 1; the extra 1/d_kv "in both Q and K" when std(W_q)/std(W_k)
# is within 10% of 1 (it is d_kv^-1/2 when it sits in W_q alone)
UNIT_STD_RANGE = (0.5, 2.0)
NO_FACTOR_TOLERANCE = 0.02
BOTH_TOLERANCE = 0.1


# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C10": ("t5_factor", "t5_finding", "t5_logit_std", "bert_logit_std", "t5_wq_wk_std_ratio", "inv_sqrt_d_kv", "d_kv"),
    "C14": ("too_strong_rule", "too_strong_factor", "over_smoothed_too_strong", "over_smoothed_trained",
            "over_smoothed_scratch_too_strong", "over_smoothed_scratch_too_strong_low",
            "over_smoothed_scratch_too_strong_high", "over_smoothed_scratch_sqrt", "over_smoothed_scratch_sqrt_low",
            "over_smoothed_scratch_sqrt_high", "entropy_scratch_too_strong", "entropy_scratch_sqrt", "scratch_steps",
            "scratch_seeds", "flag_stops_at_step", "over_smoothed_random_init",
            "constructed_uniform_flags", "constructed_one_hot_flags"),
}


def judge_c10(result: dict) -> Finding:
    """Four parts on the installed T5: no explicit factor (the probed factor within NO_FACTOR_TOLERANCE
    of 1); its initialisation brings the logits to unit scale (std at init in UNIT_STD_RANGE); the
    interview answer's 'Q and K at variance 1/d_k' (std(W_q)/std(W_k) within BOTH_TOLERANCE of 1; it is
    d_kv^-1/2 where the factor sits in W_q alone); 'cheaper on TPUs' (no TPU here)."""
    by_model = {row["model"]: row for row in result["init"]}
    t5, bert = by_model["t5"], by_model["bert"]
    t5_probe = next(row for row in result["probe"] if row["model"] == "t5")
    low, high = UNIT_STD_RANGE
    d_k = t5["d_k"]
    numbers = {"t5_factor": t5_probe["factor_min"], "t5_finding": t5_probe["finding"], "t5_logit_std": t5["logit_std"],
               "bert_logit_std": bert["logit_std"], "t5_wq_wk_std_ratio": t5["wq_wk_std_ratio"],
               "inv_sqrt_d_kv": d_k**-0.5, "d_kv": d_k}

    def read_no_scale(scale: float) -> Reading:
        factors = (t5_probe["factor_min"], t5_probe.get("factor_max", t5_probe["factor_min"]))
        ok = all(abs(f - 1) <= NO_FACTOR_TOLERANCE * scale for f in factors if f is not None)
        return Reading(state_of(ok), measured=f"factor {t5_probe['factor_min']:.4g} ({t5_probe['finding']})",
                       threshold=f"within {NO_FACTOR_TOLERANCE * scale:.2g} of 1")

    def read_folded(scale: float) -> Reading:
        lo, hi = low ** scale, high ** scale  # the range moved on a log scale: [0.5, 2] -> [0.57, 1.74] / [0.44, 2.3]
        return Reading(state_of(lo <= t5["logit_std"] <= hi), measured=f"logit std {t5['logit_std']:.3g} at init",
                       threshold=f"in [{lo:.2g}, {hi:.2g}]")

    def read_variances(scale: float) -> Reading:
        ratio = t5["wq_wk_std_ratio"]
        return Reading(state_of(abs(ratio - 1) <= BOTH_TOLERANCE * scale),
                       measured=f"std(W_q)/std(W_k) = {ratio:.3g} (1/sqrt(d_kv) = {d_k ** -0.5:.3g})",
                       threshold=f"within {BOTH_TOLERANCE * scale:.2g} of 1")

    readings = {"no_scale": measured_at(read_no_scale), "folded": measured_at(read_folded),
                "variances": measured_at(read_variances),
                "tpu": Reading(NOT_TESTABLE, note="no TPU here: the cost on a TPU cannot be measured")}
    evidence = (f"Installed T5 (random init, d_kv = {d_k}): the probe finds factor {t5_probe['factor_min']:.4g} on every "
                f"attention layer ({t5_probe['finding']}). At initialisation its logits q.k have std "
                f"{t5['logit_std']:.3g} (a BERT of the same size with 1/sqrt(d_k): {bert['logit_std']:.3g}); "
                f"std(W_q)/std(W_k) = {t5['wq_wk_std_ratio']:.3g} vs 1/sqrt(d_kv) = {d_k**-0.5:.3g}, i.e. the extra 1/d_kv "
                f"sits in the variance of W_q alone, not 'Q and K at 1/d_k' nor '1/sqrt(d_k)'. Part rules: no explicit "
                f"factor if the probed factor is within {NO_FACTOR_TOLERANCE:.0%} of 1; folded into the initialisation "
                f"if the logit std at init lies in [{low}, {high}]; 'in both Q and K' if std(W_q)/std(W_k) is within "
                f"{BOTH_TOLERANCE:.0%} of 1; TPU cost is not testable here; equivalence in training is the training lab's part.")
    return Finding("C10", "doctor", evidence, numbers, readings)


def scratch_share(result: dict, rule: str) -> dict:
    """One rule's decoders trained from scratch: the share of heads flagged at the end of training,
    per seed, its mean and the bootstrap interval of that mean (no interval from fewer than two seeds)."""
    runs = runs_of(result, rule)
    shares = [run["over_smoothed_heads"] for run in runs]
    # sorted, so that the interval does not depend on the order the seeds were listed in
    interval = intervals.bootstrap(sorted(shares), statistics.fmean) if len(shares) >= 2 else (0.0, 1.0)
    return {"runs": runs, "shares": shares, "mean": statistics.fmean(shares), "interval": interval,
            "entropy": statistics.fmean(run["normalized_entropy"] for run in runs),
            "trajectory": mean_trajectory(runs)}


def heads_rate(share: float, heads: int) -> tuple[int, int, tuple[float, float]]:
    """A share of one model's heads as a count with its Wilson interval over the heads."""
    count = round(share * heads)
    return count, heads, intervals.wilson(count, heads)


def judge_c14(result: dict) -> Finding:
    """Two parts, on trained models.  The flag fires under too-strong scaling: the share of heads
    flagged at least FIRES_SHARE, read in two settings, a pretrained model with its factor replaced (a
    rate over its heads, Wilson interval) and small decoders trained with the too-strong factor (the
    mean share over seeds, bootstrap interval).  The flag means too-strong scaling: a correctly scaled
    trained model has fewer than FALSE_ALARM_SHARE of its heads flagged (the pretrained model at its
    own factor, over its heads; the decoders trained with 1/sqrt(d_k), over seeds).  The random-init
    model is context, not a part."""
    pre, too_strong = result["pretrained"], result["too_strong"]
    by_condition = {row["condition"]: row for row in pre["conditions"]}
    swapped = by_condition[f"trained, {too_strong}"]
    own = by_condition["trained, own factor"]
    fresh = by_condition["random init, 1/sqrt(d_k)"]
    bad, good = scratch_share(result, too_strong), scratch_share(result, "sqrt")
    heads = pre["n_layers"] * pre["n_heads"]
    swapped_rate, own_rate = heads_rate(swapped["over_smoothed_heads"], heads), heads_rate(own["over_smoothed_heads"], heads)
    stops = next((c["step"] for c in bad["trajectory"] if c["over_smoothed_heads"] < FIRES_SHARE), None)
    seeds = len(bad["shares"])

    def read_fires(scale: float) -> Reading:
        settings = [{"where": "pretrained model, factor replaced",
                     "state": state_of(intervals.at_least(swapped_rate[2], FIRES_SHARE * scale)),
                     "measured": f"{swapped_rate[0]} of {heads} heads {intervals.fmt_interval(swapped_rate[2], percent=True)}"},
                    {"where": f"decoders trained with {too_strong}",
                     "state": state_of(intervals.at_least(bad["interval"], FIRES_SHARE * scale)),
                     "measured": f"mean {bad['mean']:.0%} {intervals.fmt_interval(bad['interval'], percent=True)} over {seeds} seeds"}]
        return Reading.over([st["state"] for st in settings], measured="; ".join(
                       f"{st['where']}: {st['measured']}" for st in settings),
                       threshold=f">= {FIRES_SHARE * scale:.0%} of heads flagged", settings=settings,
                       decide=(f"more seeds of decoders trained with {too_strong} (mean share {bad['mean']:.0%} around "
                               f"{FIRES_SHARE:.0%})" if intervals.at_least(bad["interval"], FIRES_SHARE) is None else ""))

    def read_specific(scale: float) -> Reading:
        settings = [{"where": "pretrained model at its own factor",
                     "state": state_of(intervals.at_most(own_rate[2], FALSE_ALARM_SHARE * scale)),
                     "measured": f"{own_rate[0]} of {heads} heads {intervals.fmt_interval(own_rate[2], percent=True)}"},
                    {"where": "decoders trained with 1/sqrt(d_k)",
                     "state": state_of(intervals.at_most(good["interval"], FALSE_ALARM_SHARE * scale)),
                     "measured": f"mean {good['mean']:.0%} {intervals.fmt_interval(good['interval'], percent=True)}"}]
        return Reading.over([st["state"] for st in settings], measured="; ".join(
                       f"{st['where']}: {st['measured']}" for st in settings),
                       threshold=f"< {FALSE_ALARM_SHARE * scale:.0%} of heads flagged", settings=settings)

    readings = {"fires": measured_at(read_fires), "specific": measured_at(read_specific)}
    numbers = {"too_strong_rule": too_strong, "too_strong_factor": swapped["factor"],
               "over_smoothed_too_strong": swapped["over_smoothed_heads"],
               "over_smoothed_trained": own["over_smoothed_heads"],
               "over_smoothed_scratch_too_strong": bad["mean"],
               "over_smoothed_scratch_too_strong_low": bad["interval"][0],
               "over_smoothed_scratch_too_strong_high": bad["interval"][1],
               "over_smoothed_scratch_sqrt": good["mean"],
               "over_smoothed_scratch_sqrt_low": good["interval"][0],
               "over_smoothed_scratch_sqrt_high": good["interval"][1],
               "entropy_scratch_too_strong": bad["entropy"], "entropy_scratch_sqrt": good["entropy"],
               "scratch_steps": result["scratch"]["steps"], "scratch_seeds": seeds, "flag_stops_at_step": stops,
               "over_smoothed_random_init": fresh["over_smoothed_heads"],
               "constructed_uniform_flags": ",".join(pre["constructed"]["uniform"]),
               "constructed_one_hot_flags": ",".join(pre["constructed"]["one_hot"])}
    extra = "; ".join(f"{row['condition']}: {row['over_smoothed_heads']:.0%}" for row in pre["conditions"]
                      if row not in (swapped, own, fresh))
    path = ", ".join(f"step {c['step']}: {c['over_smoothed_heads']:.0%} (entropy {c['normalized_entropy']:.2f})"
                     for c in bad["trajectory"])
    level = f"{intervals.LEVEL:.0%}"
    text = (f"Over-smoothed flag (KL to uniform < {result['thresholds']['over_smoothed_kl']} nats on most rows, i.e. "
            f"every key gets about 1/n), share of heads flagged. A too-strong factor at inference: "
            f"{model_name(pre['model'], pre['model_type'])} "
            f"({pre['n_layers']}x{pre['n_heads']} heads, d_k = {pre['d_k']}, {pre['n_tokens']} tokens) gives "
            f"{own['over_smoothed_heads']:.0%} at its trained factor {own['factor']:.4g} and "
            f"{swapped['over_smoothed_heads']:.0%} {intervals.fmt_interval(swapped_rate[2], percent=True)} with it "
            f"replaced by {too_strong} ({swapped['factor']:.4g})"
            f"{'; ' + extra if extra else ''}. A too-strong factor during training: small decoders trained "
            f"{result['scratch']['steps']} steps on associative recall (d_head {bad['runs'][0]['d_head']}, AdamW lr "
            f"{result['scratch']['lr']:g}), {seeds} seeds per factor; with 1/sqrt(d_k): {good['mean']:.0%} of heads "
            f"flagged on average ({level} interval {intervals.fmt_interval(good['interval'], percent=True)}), "
            f"normalised entropy {good['entropy']:.2f}; with {too_strong} ({bad['runs'][0]['factor']:.4g}): "
            f"{bad['mean']:.0%} ({intervals.fmt_interval(bad['interval'], percent=True)}; per seed "
            f"{', '.join(f'{share:.0%}' for share in bad['shares'])}), entropy {bad['entropy']:.2f}; its mean along "
            f"training: {path}"
            + (f": as training sharpens its attention the flag stops firing by step {stops}, though the attention "
               f"stays flatter than the sqrt model's. " if stops else ". ")
            + f"Context: at initialisation near-uniform attention is normal, not a sign of a wrong factor: a randomly "
            f"initialised model of the pretrained shape with the correct 1/sqrt(d_k) has "
            f"{fresh['over_smoothed_heads']:.0%} of its heads flagged, so the diagnostic reads only on trained "
            f"weights. Part rules, on trained models, each share on its {level} interval (Wilson over one model's "
            f"heads; bootstrap over seeds for the decoders; straddling: undecided): the flag fires under too-strong "
            f"scaling if >= {FIRES_SHARE:.0%} of heads are flagged, in both settings; it means too-strong scaling if "
            f"a correctly scaled trained model has fewer than {FALSE_ALARM_SHARE:.0%} flagged, in both settings.")
    return Finding("C14", "doctor", text, numbers, readings)


def judge(result: dict) -> dict[str, Finding]:
    return {"C10": judge_c10(result), "C14": judge_c14(result)}
