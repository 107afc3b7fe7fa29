"""The length lab's part readings of the statements beyond the source (L1-L4), from its result alone.

At initialisation the numbers are exact (the needle among equal keys) or Monte Carlo means with a
standard error (noisy keys, entropy): a part decides where the interval clears its threshold.  Trained,
each part is a rate over seeds (those that learned the task at the training length) with its Wilson
interval against 1/2, as the training lab decides a cell, or, for L3's contrast of two laws, the
per-seed difference of the needle's kept share with its t interval.
"""

from __future__ import annotations

import math
import statistics

from ... import claims, intervals
from ...claims import NOT_IN_PRESET, Finding, Reading, measured_at, state_of
from .experiment import DECIDED_RATE, DROPS_BY, FADES_BELOW, drops, fades, learned, rate

ENTROPY_MOVE = 0.05                 # the entropy fraction "keeps" within this, "falls" by more
N_FROM, N_TO = 64, 65536            # the init parts compare these key counts
LOGN, SSMAX = "sqrt+logn:34", "sqrt+ssmax"
# log-n from 16 keys on (ln n / ln 16, 1.27 at the training length): a model trained with the term acting,
# beside LOGN, which is 1 up to the training length and so is read on the weights the plain rule learned
LOGN_TRAINED = "sqrt+logn:16"
LOGN_SETTINGS = ("log_34 n on the weights 1/sqrt(d_k) learned", "log_16 n, trained with it")
SQRT_LOG_TRAINED = "sqrt+sqrtlogn:16"  # the slower law, trained: L3's trained part sets it against LOGN_TRAINED

NUMBER_KEYS = {
    "L1": ("sqrt_weight_equal_*", "sqrt_weight_noisy_*", "sqrt_fade_rate", "sqrt_fading", "sqrt_seeds"),
    "L2": ("logn_weight_equal_*", "ssmax_weight_equal_*", "logn_weight_noisy_*", "logn_fade_rate",
           "ssmax_fade_rate", "logn_fading", "logn_seeds", "ssmax_fading", "ssmax_seeds", "logn_trained_fade_rate",
           "logn_trained_fading", "logn_trained_seeds"),
    "L3": ("sqrt_log_weight_equal_*", "log_weight_equal_*", "sqrt_log_entropy_*", "log_entropy_*",
           "sqrt_log_trained_fade_rate", "sqrt_log_trained_fading", "sqrt_log_trained_seeds", "sqrt_log_trained_kept",
           "logn_trained_kept", "kept_difference"),
    "L4": ("train_length", "test_length", "sqrt_drop_rate", "logn_drop_rate", "ssmax_drop_rate", "sqrt_dropping",
           "sqrt_drop_seeds", "logn_dropping", "logn_drop_seeds", "ssmax_dropping", "ssmax_drop_seeds",
           "sqrt_accuracy_*", "logn_accuracy_*", "ssmax_accuracy_*", "logn_trained_drop_rate", "logn_trained_dropping",
           "logn_trained_drop_seeds", "logn_trained_accuracy_*", "rope_*"),
}


def init_row(result: dict, name: str, n: int) -> dict:
    return next(r for r in result["init"] if r["name"] == name and r["n"] == n)


def mc_interval(row: dict, key: str) -> tuple[float, float]:
    half = intervals.z_of() * row[key.replace("_mc", "_se")]
    return row[key] - half, row[key] + half


def share_kept(scale: float) -> float:
    """The share of its weight a needle must keep not to fade: FADES_BELOW, its loss moved by ``scale``."""
    return 1 - (1 - FADES_BELOW) * scale


def kept_exact(start: float, end: float, scale: float) -> bool:
    """An exact weight 'kept' from ``start`` to ``end``: at least :func:`share_kept` of it."""
    return end >= share_kept(scale) * start


def weight_text(name: str, start: float, end: float) -> str:
    return f"{name}: {start:.3g} at n = {N_FROM}, {end:.3g} at n = {N_TO}"


def equal_keys_part(result: dict, name: str, keeps: bool) -> Reading:
    """The needle among equal keys (exact): ``keeps`` asks it to stay, otherwise to fall."""
    start, end = init_row(result, name, N_FROM)["weight_equal"], init_row(result, name, N_TO)["weight_equal"]

    def read(scale):
        kept = kept_exact(start, end, scale)
        return Reading(state_of(kept, negate=not keeps), measured=weight_text(name, start, end),
                       threshold=f"{'at least' if keeps else 'below'} {share_kept(scale):.2g} x its weight at n = {N_FROM}")
    return measured_at(read)


def noisy_part(result: dict, name: str, keeps: bool) -> Reading:
    """The needle among keys of iid logits (Monte Carlo, mean and SE): kept or fallen on its interval."""
    start, end = init_row(result, name, N_FROM), init_row(result, name, N_TO)
    low, high = mc_interval(end, "weight_mc")

    def read(scale):
        bar = share_kept(scale) * start["weight_mc"]
        kept = intervals.at_least((low, high), bar)
        return Reading(state_of(kept, negate=not keeps),
                       measured=weight_text(name, start["weight_mc"], end["weight_mc"])
                       + f" (Monte Carlo, 95% interval {low:.3g}-{high:.3g})",
                       threshold=f"{'at least' if keeps else 'below'} {share_kept(scale):.2g} x its weight at n = {N_FROM}")
    return measured_at(read)


def cell_runs(result: dict, rule: str, pos: str = "none") -> list[dict]:
    best = next((b for b in result["best"] if b["rule"] == rule and b["pos"] == pos), None)
    if best is None:
        return []
    return [r for r in result["models"] if r["rule"] == rule and r["pos"] == pos and r["lr"] == best["lr"]]


def rate_part(result: dict, rule: str, event, what: str, happens: bool, pos: str = "none") -> Reading:
    """A trained part as a rate over seeds: ``happens`` asks the event (fades, drops) in most seeds,
    otherwise in few; decided where the Wilson interval clears 1/2."""
    runs = cell_runs(result, rule, pos)
    if pos not in result["config"]["positions"] or not runs:
        return Reading(NOT_IN_PRESET, note=f"{rule} with positions {pos!r} is trained in the full preset")
    def read(scale):
        k, n, interval = rate(runs, lambda r: event(r, -1, scale))
        most = {"above": True, "below": False}.get(intervals.side(interval, DECIDED_RATE)) if n else None
        return Reading(state_of(most, negate=not happens), measured=f"{k} of {n} seeds {what(scale)} ({intervals.fmt_interval(interval)})",
                       threshold=f"{'more' if happens else 'fewer'} than {DECIDED_RATE:.2g} of the seeds",
                       decide=f"more seeds (the interval straddles {DECIDED_RATE:.2g})" if most is None else "")
    return measured_at(read)


def kept_share(run: dict) -> float:
    """The share of its weight at 1x that a seed's needle keeps at the longest length."""
    return run["needle_weight"][-1] / run["needle_weight"][0]


def kept_by_seed(result: dict, rule: str) -> dict[int, float]:
    """{seed: kept share} over the seeds of a rule's best cell that learned the task (and gave their needle a
    weight at 1x to keep)."""
    return {r["seed"]: kept_share(r) for r in cell_runs(result, rule)
            if learned(r) and r["needle_weight"][0] > 0 and math.isfinite(kept_share(r))}


def paired_kept(result: dict, more: str, less: str) -> tuple[list[int], dict[int, float], dict[int, float]]:
    """The seeds both rules' best cells learned the task at, and each rule's {seed: kept share}."""
    more_kept, less_kept = kept_by_seed(result, more), kept_by_seed(result, less)
    return sorted(set(more_kept) & set(less_kept)), more_kept, less_kept


def keeps_less_part(result: dict, more: str, less: str, names: tuple[str, str]) -> Reading:
    """'``less`` keeps less of its needle's weight at 16x than ``more``' (``names`` say them), on the seeds both
    learned the task at.  A seed trains both from the same initial weights on the same batches, so the
    statistic is the per-seed difference of the kept share (``more``'s minus ``less``'s) with its t interval: it
    holds where the interval lies above 0, fails where it lies at or below 0 (``less`` keeps as much or more).  The contrast is
    measured against the faster law's own models, so no cut is chosen (0 does not move with the margins)."""
    seeds, more_kept, less_kept = paired_kept(result, more, less)
    if len(seeds) < 2:
        return Reading(claims.UNDECIDED, measured=f"{len(seeds)} seed(s) where both learned the task",
                       threshold="the per-seed difference above 0", decide="seeds where both models learn the task")
    differences = [more_kept[s] - less_kept[s] for s in seeds]
    low, high = intervals.t_interval(differences)
    mean = statistics.fmean(differences)
    state = state_of(intervals.at_most((low, high), 0.0), negate=True)  # less is strictly less: 0 is not
    # the interval's half-width shrinks as 1/sqrt(seeds): the count that would put its low end at 0 at this mean
    needed = (max(len(seeds) + 1, math.ceil(len(seeds) * (((high - low) / 2) / mean) ** 2))
              if state == claims.UNDECIDED and mean > 0 else None)
    measured = (f"the needle keeps {statistics.fmean(less_kept[s] for s in seeds):.3f} of its weight, against "
                f"{statistics.fmean(more_kept[s] for s in seeds):.3f} under {names[0]}: {mean:.3f} less per seed "
                f"({intervals.fmt_interval((low, high))}) over the {len(seeds)} seeds both learned at")
    reading = Reading(state, measured=measured, threshold="the per-seed difference above 0",
                      direction=f"{names[1]} keeps as much or more, not less" if state == claims.FAILS else "",
                      decide=("" if state != claims.UNDECIDED else
                              f"about {needed} seeds at the observed difference" if needed else
                              "no number of seeds at the observed difference (it sits at or below 0)"))
    reading.moved = {f"{m:g}": state for m in claims.MOVES}
    return reading


def logn_part(result: dict, event, what) -> Reading:
    """'Log-n keeps it', read on both log-n models: the plain rule's weights run under log_34 n, and a
    model trained with log_16 n acting from 16 keys on (a report without the trained one reads the
    first alone)."""
    evaluated = rate_part(result, LOGN, event, what, happens=False)
    trained = rate_part(result, LOGN_TRAINED, event, what, happens=False)
    if trained.state == NOT_IN_PRESET:
        return evaluated
    return in_both(evaluated, trained, LOGN_SETTINGS)


def joined_threshold(first: Reading, second: Reading, where: tuple[str, str]) -> str:
    """One threshold where the two settings share it, else each with its setting."""
    if first.threshold == second.threshold:
        return first.threshold
    return f"{where[0]}: {first.threshold}; {where[1]}: {second.threshold}"


def in_both(first: Reading, second: Reading, where: tuple[str, str]) -> Reading:
    """One part read in two settings (``where`` names them): its state over both, what an undecided one
    could still become, each setting's reading, and the states with the thresholds moved."""
    over = Reading.over([first.state, second.state])
    return Reading(over.state, measured=f"{where[0]}: {first.measured}; {where[1]}: {second.measured}",
                   threshold=joined_threshold(first, second, where), could_be=over.could_be,
                   settings=[{"where": w, "state": r.state, "measured": r.measured} for w, r in zip(where, (first, second))],
                   moved={m: Reading.over([first.moved.get(m, first.state), second.moved.get(m, second.state)]).state
                          for m in (first.moved or second.moved)})


def both(first: Reading, second: Reading, where: tuple[str, str]) -> Reading:
    """One part that asserts two things ("log-n keeps what 1/sqrt(d_k) loses"), each read in its own setting
    (``where`` names them): it holds only where both do and fails where either fails (:func:`claims.all_of`), with
    each setting's reading, what an undecided one could still make it, the failing one's direction, and the
    states with the thresholds moved."""
    joined = Reading.all_of([first.state, second.state])
    failing = [f"{w}: {r.direction or r.measured}" for w, r in zip(where, (first, second)) if r.state == claims.FAILS]
    return Reading(joined.state, measured=f"{where[0]}: {first.measured}; {where[1]}: {second.measured}",
                   threshold=joined_threshold(first, second, where), could_be=joined.could_be, direction="; ".join(failing),
                   settings=[{"where": w, "state": r.state, "measured": r.measured} for w, r in zip(where, (first, second))],
                   moved={m: claims.all_of([first.moved.get(m, first.state), second.moved.get(m, second.state)])
                          for m in (first.moved or second.moved)})


def lose_weight(scale: float) -> str:
    return f"lose more than {(1 - FADES_BELOW) * scale:.0%} of the needle's weight"


def lose_accuracy(scale: float) -> str:
    return f"lose more than {DROPS_BY * scale:.2f} of their accuracy"


def numbers_of(result: dict) -> dict:
    out = {"train_length": result["lengths"][0], "test_length": result["lengths"][-1]}
    for name, key in (("sqrt", "sqrt"), (LOGN, "logn"), (SSMAX, "ssmax"), ("sqrt_log", "sqrt_log"), ("log", "log")):
        rows = [r for r in result["init"] if r["name"] == name]
        for r in rows:
            if r["n"] in (N_FROM, N_TO):
                out[f"{key}_weight_equal_{r['n']}"] = r["weight_equal"]
                out[f"{key}_weight_noisy_{r['n']}"] = r["weight_mc"]
                out[f"{key}_entropy_{r['n']}"] = r["entropy_mc"]
    for rule, key in (("sqrt", "sqrt"), (LOGN, "logn"), (SSMAX, "ssmax"), (LOGN_TRAINED, "logn_trained"),
                      (SQRT_LOG_TRAINED, "sqrt_log_trained")):
        runs = cell_runs(result, rule)
        if not runs:
            continue
        k, n, _ = rate(runs, fades)
        out[f"{key}_fading"], out[f"{key}_seeds"] = k, n
        out[f"{key}_fade_rate"] = k / n if n else None
        k, n, _ = rate(runs, drops)
        out[f"{key}_drop_rate"] = k / n if n else None
        out[f"{key}_dropping"], out[f"{key}_drop_seeds"] = k, n
        for i, length in enumerate(result["lengths"]):
            out[f"{key}_accuracy_{length}"] = statistics.median(r["accuracy"][i] for r in runs)
    if cell_runs(result, SQRT_LOG_TRAINED):  # L3's contrast, over the seeds it pairs (as its part reads them)
        paired, more, less = paired_kept(result, LOGN_TRAINED, SQRT_LOG_TRAINED)
        out["logn_trained_kept"] = statistics.fmean(more[s] for s in paired) if paired else None
        out["sqrt_log_trained_kept"] = statistics.fmean(less[s] for s in paired) if paired else None
        out["kept_difference"] = statistics.fmean(more[s] - less[s] for s in paired) if paired else None
    for rule, key in (("sqrt", "rope_sqrt"), (LOGN, "rope_logn")):
        runs = cell_runs(result, rule, "rope")
        if runs:
            k, n, _ = rate(runs, drops)
            out[f"{key}_drop_rate"] = k / n if n else None
    return out


def pick(numbers: dict, claim: str) -> dict:
    from ...claims import key_declared

    return {k: v for k, v in numbers.items() if key_declared(NUMBER_KEYS[claim], k)}


def judge_l1(result: dict, numbers: dict) -> Finding:
    equal, noisy = equal_keys_part(result, "sqrt", keeps=False), noisy_part(result, "sqrt", keeps=False)
    init = in_both(equal, noisy, ("equal keys (Fig. 1)", "noisy keys (iid logits, std 1)"))
    trained = rate_part(result, "sqrt", fades, lose_weight, happens=True)
    evidence = (f"At initialisation a needle's weight under 1/sqrt(d_k) alone goes from {equal.measured.split(': ', 1)[1]} "
                f"among equal keys, and among noisy keys from {noisy.measured.split(': ', 1)[1]}. Trained at "
                f"{result['lengths'][0]} tokens and run at {result['lengths'][-1]}: {trained.measured}.")
    return Finding("L1", "length", evidence, pick(numbers, "L1"), {"init": init, "trained": trained})


def judge_l2(result: dict, numbers: dict) -> Finding:
    equal_logn, equal_ssmax = equal_keys_part(result, LOGN, keeps=True), equal_keys_part(result, SSMAX, keeps=True)
    init_equal = in_both(equal_logn, equal_ssmax, ("log-n", "SSMax"))
    noisy = noisy_part(result, LOGN, keeps=True)
    trained_logn = logn_part(result, fades, lose_weight)
    trained_ssmax = rate_part(result, SSMAX, fades, lose_weight, happens=False)
    evidence = (f"Among equal keys (SSMax's Fig. 1 setting, margin 5) the needle's weight goes {equal_logn.measured} and "
                f"{equal_ssmax.measured}: s D > 1 and the weight tends to 1. Among keys of iid logits the same "
                f"multiplier also amplifies the noise: {noisy.measured}. Trained, log-n: {trained_logn.measured or trained_logn.note}; "
                f"SSMax: {trained_ssmax.measured or trained_ssmax.note}.")
    return Finding("L2", "length", evidence, pick(numbers, "L2"),
                   {"init_equal": init_equal, "init_noisy": noisy, "trained_logn": trained_logn,
                    "trained_ssmax": trained_ssmax})


def judge_l3(result: dict, numbers: dict) -> Finding:
    def weights(name):
        return init_row(result, name, N_FROM)["weight_equal"], init_row(result, name, N_TO)["weight_equal"]

    def needle(scale):
        log_kept, sqrt_log_kept = kept_exact(*weights("log"), scale), kept_exact(*weights("sqrt_log"), scale)
        return Reading(state_of(log_kept and not sqrt_log_kept),
                       measured=f"{weight_text('log n', *weights('log'))}; {weight_text('sqrt(log n)', *weights('sqrt_log'))}",
                       threshold=f"log n at least, sqrt(log n) below, {share_kept(scale):.2g} x the weight at n = {N_FROM}")
    start_log, end_log = init_row(result, "log", N_FROM), init_row(result, "log", N_TO)
    start_sq, end_sq = init_row(result, "sqrt_log", N_FROM), init_row(result, "sqrt_log", N_TO)

    def entropy(scale):
        move = ENTROPY_MOVE * scale
        sq_change = (end_sq["entropy_mc"] - start_sq["entropy_mc"])
        sq_half = intervals.z_of() * (end_sq["entropy_se"] ** 2 + start_sq["entropy_se"] ** 2) ** 0.5
        log_change = (end_log["entropy_mc"] - start_log["entropy_mc"])
        log_half = intervals.z_of() * (end_log["entropy_se"] ** 2 + start_log["entropy_se"] ** 2) ** 0.5
        sq_keeps = intervals.inside((sq_change - sq_half, sq_change + sq_half), -move, move)
        log_falls = intervals.at_most((log_change - log_half, log_change + log_half), -move)
        both = intervals.every([sq_keeps, log_falls])
        return Reading(state_of(both),
                       measured=(f"H / ln n under sqrt(log n): {start_sq['entropy_mc']:.3f} at n = {N_FROM}, "
                                 f"{end_sq['entropy_mc']:.3f} at n = {N_TO}; under log n: {start_log['entropy_mc']:.3f}, "
                                 f"{end_log['entropy_mc']:.3f}"),
                       threshold=f"sqrt(log n) within ±{move:.2g}, log n lower by more than {move:.2g}")
    needle_reading, entropy_reading = measured_at(needle), measured_at(entropy)
    log_keeps = rate_part(result, LOGN_TRAINED, fades, lose_weight, happens=False)
    if log_keeps.state == NOT_IN_PRESET or not cell_runs(result, SQRT_LOG_TRAINED):  # a report from before the two were trained
        trained = Reading(NOT_IN_PRESET, note="models trained with log n and sqrt(log n) acting within the training length are not in this report")
        context = ""
    else:
        less = keeps_less_part(result, LOGN_TRAINED, SQRT_LOG_TRAINED, ("log_16 n", "sqrt(log_16 n)"))
        trained = both(log_keeps, less, ("log_16 n keeps", "sqrt(log_16 n) keeps less"))
        k, n, interval = rate(cell_runs(result, SQRT_LOG_TRAINED), fades)
        context = (f" (Not a vote: under sqrt(log_16 n) {k} of {n} seeds {lose_weight(1.0)} "
                   f"{intervals.fmt_interval(interval)}; a seed's share sits near that line, so a count of seeds "
                   "below it moves with the base seed.)")
    evidence = (f"Trained on needles at {result['lengths'][0]} tokens and run at {result['lengths'][-1]}, with the term "
                f"acting from 16 keys on: {trained.measured or trained.note}.{context} At initialisation (derivations, not "
                f"votes): a needle of fixed margin among equal keys: {needle_reading.measured}. Over n iid logits "
                f"(std 1, no needle): {entropy_reading.measured}; with a constant factor it rises toward 1 "
                f"({init_row(result, 'constant', N_FROM)['entropy_mc']:.3f} to {init_row(result, 'constant', N_TO)['entropy_mc']:.3f}). "
                "The multiplier that keeps a needle (log n) freezes diffuse attention, and the one that keeps the "
                "entropy fraction (sqrt(log n), 1 - c^2 = 0.75 in the limit at c = 0.5) lets the needle fade.")
    return Finding("L3", "length", evidence, pick(numbers, "L3"),
                   {"needle_log": needle_reading, "entropy_sqrt_log": entropy_reading, "trained": trained})


def judge_l4(result: dict, numbers: dict) -> Finding:
    what = lose_accuracy
    readings = {"sqrt_drops": rate_part(result, "sqrt", drops, what, happens=True),
                "logn_keeps": logn_part(result, drops, what),
                "ssmax_keeps": rate_part(result, SSMAX, drops, what, happens=False)}
    rope_sqrt = rate_part(result, "sqrt", drops, what, happens=True, pos="rope")
    rope_logn = rate_part(result, LOGN, drops, what, happens=False, pos="rope")
    if rope_sqrt.state == NOT_IN_PRESET or rope_logn.state == NOT_IN_PRESET:
        readings["rope"] = Reading(NOT_IN_PRESET, note="RoPE models are trained in the full preset")
    else:
        readings["rope"] = both(rope_sqrt, rope_logn, ("1/sqrt(d_k)", "log-n"))
    lengths = result["lengths"]
    evidence = (f"Trained at {lengths[0]} tokens with no position embedding, run at {lengths[-1]}: 1/sqrt(d_k) alone: "
                f"{readings['sqrt_drops'].measured}; log-n: {readings['logn_keeps'].measured}; SSMax: "
                f"{readings['ssmax_keeps'].measured}. With RoPE: {readings['rope'].measured or readings['rope'].note}.")
    return Finding("L4", "length", evidence, pick(numbers, "L4"), readings)


def judge(result: dict) -> dict[str, Finding]:
    numbers = numbers_of(result)
    return {"L1": judge_l1(result, numbers), "L2": judge_l2(result, numbers), "L3": judge_l3(result, numbers),
            "L4": judge_l4(result, numbers)}
