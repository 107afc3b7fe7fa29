"""The doctor lab's verdict rules (C10, C13, C14), with their thresholds, reading only the lab's result."""

from __future__ import annotations

import statistics

from ... import intervals
from ...claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED, Finding
from ...probing.probe import NO_SCALING
from .experiment import mean_trajectory, runs_of

# C14: the flag "fires" when scaling too strong flags at least half of the heads; a correctly
# scaled model "false-alarms" when at least a quarter of its heads are flagged.
FIRES_SHARE = 0.5
FALSE_ALARM_SHARE = 0.25
# C10: logits "folded to unit scale" when their std at init lies in [0.5, 2].
UNIT_STD_RANGE = (0.5, 2.0)

# The numbers each verdict rule reports (claim ID -> keys): what report.json and the answer can read.
NUMBER_KEYS = {
    "C10": ("t5_factor", "t5_finding", "t5_logit_std", "bert_logit_std", "t5_wq_wk_std_ratio", "inv_sqrt_d_kv", "d_kv"),
    "C13": ("transformers", "bert_factor", "bert_d_k", "bert_finding", "gpt2_factor", "gpt2_finding"),
    "C14": ("too_strong_rule", "too_strong_factor", "over_smoothed_too_strong", "over_smoothed_trained",
            "over_smoothed_scratch_too_strong", "over_smoothed_scratch_too_strong_low",
            "over_smoothed_scratch_too_strong_high", "over_smoothed_scratch_sqrt", "over_smoothed_scratch_sqrt_low",
            "over_smoothed_scratch_sqrt_high", "entropy_scratch_too_strong", "entropy_scratch_sqrt", "scratch_steps",
            "scratch_seeds", "flag_stops_at_step", "over_smoothed_random_init",
            "constructed_uniform_flags", "constructed_one_hot_flags"),
}


def judge_c13(result: dict) -> Finding:
    by_model = {row["model"]: row for row in result["probe"]}
    bert, gpt2 = by_model["bert"], by_model["gpt2"]
    numbers = {"transformers": result["transformers_version"], "bert_factor": bert["factor_min"],
               "bert_d_k": bert["d_k"], "bert_finding": bert["finding"], "gpt2_factor": gpt2["factor_min"],
               "gpt2_finding": gpt2["finding"]}
    measured = (f"Probing the installed transformers {result['transformers_version']} (random-init models from "
                f"configs, d_k = {bert['d_k']}, the models' own eager attention on designed inputs): BERT applies "
                f"{bert['factor_min']:.4g} ({bert['finding']}; 1/sqrt(d_k) = {bert['expected']:.4g}, "
                f"1/d_k = {bert['inv_d']:.4g}), GPT-2 {gpt2['factor_min']:.4g} ({gpt2['finding']}).")
    if bert["finding"] == "looks like 1/d_k":
        return Finding(SUPPORTED, measured + " The installed BERT does divide by d_k, as the claim says. "
                       "The training slowdown is for the training lab.", numbers)
    return Finding(NOT_TESTABLE, measured + " The installed BERT does not use 1/d_k; whether an old release did "
                   "cannot be checked offline here (only the installed code can be probed), and neither can the "
                   "2-3x slowdown attributed to it.", numbers)


def judge_c10(result: dict) -> Finding:
    by_model = {row["model"]: row for row in result["init"]}
    t5, bert = by_model["t5"], by_model["bert"]
    t5_probe = next(row for row in result["probe"] if row["model"] == "t5")
    no_scaling = t5_probe["finding"] == NO_SCALING
    low, high = UNIT_STD_RANGE
    folded = low <= t5["logit_std"] <= high
    d_k = t5["d_k"]
    numbers = {"t5_factor": t5_probe["factor_min"], "t5_finding": t5_probe["finding"], "t5_logit_std": t5["logit_std"],
               "bert_logit_std": bert["logit_std"], "t5_wq_wk_std_ratio": t5["wq_wk_std_ratio"],
               "inv_sqrt_d_kv": d_k**-0.5, "d_kv": d_k}
    text = (f"Installed T5 (random init, d_kv = {d_k}): the probe finds factor {t5_probe['factor_min']:.4g} on every "
            f"attention layer ({t5_probe['finding']}). At initialisation its logits q.k have std "
            f"{t5['logit_std']:.3g} (a BERT of the same size with 1/sqrt(d_k): {bert['logit_std']:.3g}); "
            f"std(W_q)/std(W_k) = {t5['wq_wk_std_ratio']:.3g} vs 1/sqrt(d_kv) = {d_k**-0.5:.3g}, i.e. the extra 1/d_kv "
            f"sits in the variance of W_q alone, not 'Q and K at 1/d_k' nor '1/sqrt(d_k)'. Rule: no scaling (factor "
            f"within 2% of 1) and unit-scale logits at init (std in [{low}, {high}]) -> the structural part holds; "
            f"the interview answer's two variance statements cannot both be right, equivalence beyond initialisation is the "
            f"training lab's question and TPU cost is not testable here, so at most partly supported.")
    if not no_scaling:
        return Finding(REFUTED, text + " T5 does scale explicitly.", numbers)
    if folded:
        return Finding(PARTLY, text + " Both structural parts hold.", numbers)
    return Finding(PARTLY, text + " No explicit scaling, but the initialisation does not bring the logits to unit "
                   "scale.", numbers)


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


def judge_c14(result: dict) -> Finding:
    """On trained models: the flag 'fires' if too-strong scaling flags >= FIRES_SHARE of the heads,
    and false-alarms if a correctly scaled trained model has >= FALSE_ALARM_SHARE flagged.  Two
    too-strong cases: the pretrained model with its factor replaced (one fixed model), and small
    decoders trained with the too-strong factor at several seeds, decided by the interval of the
    mean share over seeds (straddling a threshold: undecided).  Fires in both with no false alarm:
    supported; fires in neither: refuted; otherwise partly.  The random-init model is a caveat, not
    part of the rule."""
    pre, too_strong = result["pretrained"], result["too_strong"]
    by_condition = {row["condition"]: row for row in pre["conditions"]}
    swapped = by_condition[f"trained, {too_strong}"]
    own = by_condition["trained, own factor"]
    fresh = by_condition["random init, 1/sqrt(d_k)"]
    bad, good = scratch_share(result, too_strong), scratch_share(result, "sqrt")
    fires = {"swapped": swapped["over_smoothed_heads"] >= FIRES_SHARE,
             "trained": intervals.at_least(bad["interval"], FIRES_SHARE)}
    false_alarm = intervals.some([own["over_smoothed_heads"] >= FALSE_ALARM_SHARE,
                          intervals.at_least(good["interval"], FALSE_ALARM_SHARE)])
    stops = next((c["step"] for c in bad["trajectory"] if c["over_smoothed_heads"] < FIRES_SHARE), None)
    seeds = len(bad["shares"])
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
            f"every key gets about 1/n), share of heads flagged. A too-strong factor at inference: {pre['model_type']} "
            f"({pre['n_layers']}x{pre['n_heads']} heads, d_k = {pre['d_k']}, {pre['n_tokens']} tokens) gives "
            f"{own['over_smoothed_heads']:.0%} at its trained factor {own['factor']:.4g} and "
            f"{swapped['over_smoothed_heads']:.0%} with it replaced by {too_strong} ({swapped['factor']:.4g})"
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
            + f"Caveat: at initialisation near-uniform attention is normal, not a sign of a wrong factor: a randomly "
            f"initialised model of the pretrained shape with the correct 1/sqrt(d_k) has "
            f"{fresh['over_smoothed_heads']:.0%} of its heads flagged, so the diagnostic reads only on trained "
            f"weights. Rule, on trained models: the flag fires if >= {FIRES_SHARE:.0%} of heads are flagged under "
            f"too-strong scaling, and false-alarms if a correctly scaled model has >= {FALSE_ALARM_SHARE:.0%}; for "
            f"the decoders trained from scratch the share is the mean over seeds, decided only where its {level} "
            f"bootstrap interval lies wholly on one side of the threshold (straddling: undecided); supported if it "
            f"fires in both too-strong cases without a false alarm, refuted if it fires in neither, partly otherwise.")
    if fires["swapped"] is False and fires["trained"] is False:
        return Finding(REFUTED, text + " Too-strong scaling does not make the trained weights near 1/n.", numbers)
    if fires["swapped"] and fires["trained"] and false_alarm is False:
        return Finding(SUPPORTED, text + " The flag separates too-strong from correct scaling in both cases.", numbers)
    return Finding(PARTLY, text + " " + c14_partly(fires, false_alarm, bad, seeds), numbers)


def c14_partly(fires: dict, false_alarm: bool | None, bad: dict, seeds: int) -> str:
    """What the flag caught, missed or left undecided, in one sentence."""
    cases = {"swapped": "a factor made too strong at inference", "trained": "a model trained with too strong a factor"}
    caught = [cases[case] for case, fired in fires.items() if fired is True]
    missed = [cases[case] for case, fired in fires.items() if fired is False]
    parts = []
    if caught:
        parts.append(f"The flag catches {' and '.join(caught)}")
    if missed:
        parts.append(("but not " if caught else "The flag does not catch ") + " or ".join(missed)
                     + (" (whose attention sharpens in training all the same)" if fires["trained"] is False else ""))
    sentence = " ".join(parts)
    if fires["trained"] is None:
        sentence += (f"{'; ' if sentence else ''}whether it catches a model trained with too strong a factor is "
                     f"undecided at {seeds} seeds (mean share {bad['mean']:.0%}, interval "
                     f"{intervals.fmt_interval(bad['interval'], percent=True)} around {FIRES_SHARE:.0%})")
    if false_alarm is True:
        sentence += "; and it also fires on a correctly scaled trained model"
    elif false_alarm is None:
        sentence += "; whether it false-alarms on a correctly scaled model is undecided"
    return sentence[0].upper() + sentence[1:] + "."


def judge(result: dict) -> dict[str, Finding]:
    return {"C10": judge_c10(result), "C13": judge_c13(result), "C14": judge_c14(result)}
