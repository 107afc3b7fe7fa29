"""The training lab's part readings, each with its thresholds, reading only the lab's result;
:func:`attnscale.claims.label` turns a claim's parts into its label.  Every reading function takes
``scale``, the factor its thresholds are moved by (1 as declared; 0.8 and 1.2 for the margin).

How a comparison is made (every rule below uses it):

* the reference is ``sqrt`` at its own best learning rate; a (task, d_head) cell is
  *conclusive* only where the reference works there: on recall it solves the task
  (validation accuracy >= 0.9) in most seeds; on Shakespeare its median final loss ends at
  least ``LM_MARGIN`` below the bigram entropy of the training text (below that, a model
  needs no attention at all);
* a run's *progress* is what it learned as a fraction of what the reference learned
  (median over the reference's seeds): recall accuracy above the copy baseline, or the
  drop of the validation loss;
* each seed is classed ``stalls`` (progress < 0.2), ``worse`` or ``trains`` (>= 0.8), and a
  cell is read as a rate: how many of its seeds stall, with the Wilson 95% interval.  The cell
  stalls where that interval lies above 1/2, does not where it lies below, and is undecided
  otherwise (it then leaves the part open); every cell a verdict reads has a fixed count of seeds,
  chosen before any result is seen.  A part read over cells holds where every cell stalls, fails where
  none does, and holds in part where some do and some do not (:func:`stall_part`);
* each rule is read at its own best learning rate (chosen on the base seeds by the mean score;
  sqrt's confirmed on the filled seeds of its candidate rates) and at sqrt's best learning rate; a
  claim declares which of the two is its setting (the other is context in its evidence).

Every number quoted is a median with its [min-max] over seeds, or a rate with its interval.
"""

from __future__ import annotations

import math
import statistics

from ... import claims, intervals, scaling
from ...claims import (FAILS, HOLDS, NOT_IN_PRESET, UNDECIDED, Finding, Reading, measured_at,
                       state_of, untested)
from ..saturation.verdicts import LOGITS_AROUND_100
from .experiment import (DECIDED_RATE, SOLVED_ACC, STALL_BELOW, accuracy, best_lrs, classify, deep_seeds_of, final_loss,
                         fold_cells, progress, solved, spread, task_d_heads, tasks_of)

LM_MARGIN = 0.1           # nats: the reference must end this far below the bigram entropy for an LM cell to vote
SLOWER_RANGE = (2.0, 3.0)  # C13: "2-3x slower", as the claim says it (noise is the ratio's interval, not a wider range)
GRAD_DROP = 10.0          # C17: "drops by more than 10x"
BEATS_COPY = 0.05         # C17: accuracy this far above the copy baseline counts as beating it
DEEP_OSCILLATES = 2.0     # C09: the val loss's total rise in the second half, vs 1/16's
RISE_FLOOR = 1e-3         # nats: a total rise below this is a flat (or steadily falling) curve, for either factor
EQUAL_AT_INIT = 1e-3      # C10: relative difference of the step-0 logit std
EQUIVALENT_CURVE = 0.02   # C10: largest relative gap between the two median validation curves
EQUIVALENT_LOGITS = 0.05  # C10: relative gap of the per-layer logit std after training
EQUIVALENT_ACC = 0.05     # C10 on recall: median final accuracies within this
OVERSMOOTH_ENTROPY = 0.05  # C18: inv_d's final attention entropy above sqrt's by this much
READINGS = ("own", "sqrt")  # each rule at its own best LR, and at sqrt's best LR

# The numbers each finding carries (checked against the judges by the tests, and against what the answer reads).
NUMBER_KEYS = {
    "C05": ("inv_d_progress_*", "inv_d_at_sqrt_lr_progress_*", "n_layers", "d_model"),
    "C06": ("none_progress_*", "none_stalled_*", "none_seeds_*", "init_max_abs_logit", "init_max_prob",
            "step100_max_abs_logit", "n_layers", "d_model"),
    "C09": ("acc_1_8_lr*", "acc_1_16_lr*", "oscillation_ratio", "best_lr_1_8", "best_lr_1_16"),
    "C10": ("curve_gap_*", "final_logit_std_gap_*", "variant_logit_std_ratio"),
    "C13": ("steps_ratio_*",),
    "C17": ("median_grad_ratio_sqrt_over_none", "none_beats_copy_cells"),
    "C18": ("sqrt_near_best_cells", "cells", "inv_d_oversmooth_cells", "const_fail_cells"),
}




def fmt(value, digits=3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def fmt_spread(s: dict, digits=3) -> str:
    if s["median"] is None:
        return "n/a"
    if s["n"] == 1 or s["min"] == s["max"]:
        return fmt(s["median"], digits)
    return f"{fmt(s['median'], digits)} [{fmt(s['min'], digits)}-{fmt(s['max'], digits)}]"


def majority_of(n: int) -> int:
    return n // 2 + 1


# --------------------------------------------------------------------------- reading the result

def best_lr(result: dict, task: str, rule: str, d_head: int) -> float | None:
    for row in result["best_lr"]:
        if (row["task"], row["rule"], row["d_head"]) == (task, rule, d_head):
            return row["lr"]
    return None


def runs_at(result: dict, task: str, rule: str, d_head: int, lr: float | None) -> list[dict]:
    return sorted((r for r in result["grid"] if (r["task"], r["rule"], r["d_head"], r["lr"]) == (task, rule, d_head, lr)),
                  key=lambda r: r["seed"])


def reference(result: dict, task: str, d_head: int) -> dict:
    """sqrt at its best LR in this cell, and whether it works well enough for the cell to vote."""
    lr = best_lr(result, task, "sqrt", d_head)
    runs = runs_at(result, task, "sqrt", d_head, lr)
    if not runs:
        return {"lr": lr, "runs": [], "works": False, "why": "no sqrt runs"}
    if task == "recall":
        count = sum(solved(r) for r in runs)
        works = count >= majority_of(len(runs))
        why = f"sqrt solved recall in {count} of {len(runs)} seeds"
    else:
        bigram = result["baselines"]["shakespeare"]["bigram"]
        median = statistics.median(final_loss(r) for r in runs)
        works = median <= bigram - LM_MARGIN
        why = f"sqrt's median final loss {median:.3g} vs bigram entropy {bigram:.3g}"
    return {"lr": lr, "runs": runs, "works": works, "why": why}


def stall_rate(classes: list[str]) -> dict:
    stalled = classes.count("stalls")
    low, high = intervals.wilson(stalled, len(classes))
    return {"stalled": stalled, "seeds": len(classes), "rate": stalled / len(classes) if classes else math.nan,
            "interval": (low, high)}


def cell(result: dict, task: str, rule: str, d_head: int, reading: str = "own") -> dict:
    """The rule in one (task, d_head) cell: its class over seeds, per-seed progress and the LR read."""
    ref = reference(result, task, d_head)
    lr = best_lr(result, task, rule if reading == "own" else "sqrt", d_head)
    runs = runs_at(result, task, rule, d_head, lr)
    out = {"task": task, "rule": rule, "d_head": d_head, "reading": reading, "lr": lr, "reference": ref["why"],
           "trained": bool(runs_at(result, task, rule, d_head, best_lr(result, task, rule, d_head)))}
    if not ref["works"] or not runs:
        return {**out, "class": "no reference", "progress": spread([]), "per_seed": [], "seeds": [],
                "stall_rate": stall_rate([])}
    per_seed = [progress(r, ref["runs"], result["baselines"]) for r in runs]
    classes = [classify(p) for p in per_seed]
    found = {**out, "progress": spread(per_seed), "per_seed": per_seed, "seeds": classes, "stall_rate": stall_rate(classes)}
    return {**found, "class": CELL_CLASS[stall_state(found)]}


CELL_CLASS = {HOLDS: "stalls", FAILS: "does not stall", UNDECIDED: "undecided"}  # a cell as tables name it


def cells_of(result: dict, rule: str, reading: str, min_d_head: int = 1) -> list[dict]:
    """The rule's cells at every (task, d_head) it was trained at."""
    found = [cell(result, task, rule, d, reading) for task in tasks_of(result) for d in task_d_heads(result, task)
             if d >= min_d_head]
    return [c for c in found if c["trained"]]


def rate_text(c: dict) -> str:
    rate = c["stall_rate"]
    return f"stalls in {rate['stalled']} of {rate['seeds']} seeds {intervals.fmt_interval(rate['interval'], percent=True)}"


def describe(cells: list[dict]) -> str:
    parts = []
    for c in cells:
        where = f"{c['task']} d_head {c['d_head']}"
        if c["class"] == "no reference":
            parts.append(f"{where}: does not vote ({c['reference']})")
        else:
            parts.append(f"{where}: {fmt_spread(c['progress'], 2)} at lr {fmt(c['lr'])}, {rate_text(c)}")
    return "; ".join(parts)


def seeds_to_decide(count: int, seeds: int, threshold: float, cap: int = 1000) -> int | None:
    """How many seeds would put the Wilson interval of a rate clear of ``threshold`` if it stayed at
    ``count / seeds``; None where no number would (the rate sits on the threshold)."""
    if not seeds:
        return None
    rate = count / seeds
    for n in range(seeds, cap + 1):
        if intervals.side(intervals.wilson(round(rate * n), n), threshold) != intervals.STRADDLES:
            return n
    return None


def stall_state(c: dict, scale: float = 1.0) -> str:
    """'Training stalls' in one cell, as a rate over its seeds: a seed stalls below STALL_BELOW of what
    sqrt learned; the cell holds where the stall rate's Wilson interval lies above DECIDED_RATE,
    fails where it lies below, is undecided otherwise (both thresholds moved by ``scale``)."""
    if c.get("class") == "no reference":
        return UNDECIDED
    stalled = sum(p < STALL_BELOW * scale for p in c["per_seed"])
    return state_of(intervals.at_least(intervals.wilson(stalled, len(c["per_seed"])), DECIDED_RATE * scale))


def stall_part(cells: list[dict], text: str) -> Reading:
    """'Training stalls' over the cells where sqrt works, with its thresholds movable; the pooled
    stall rate over their seeds is the measured number, and an undecided part says what would decide it.
    Cells combine as any part's settings do (:meth:`Reading.over`): an undecided cell leaves the part
    open, and a cell that fails beside one that holds makes it 'holds in part' whatever a third does."""
    voters = [c for c in cells if c["class"] != "no reference"]
    if not voters:
        return Reading(claims.NOT_TESTABLE, note="no cell where sqrt itself works at this size: "
                       + ("; ".join(f"{c['task']} d_head {c['d_head']}: {c['reference']}" for c in cells) or "none trained"))

    def read(scale: float) -> Reading:
        states = [stall_state(c, scale) for c in voters]
        stalled = sum(c["stall_rate"]["stalled"] for c in voters)
        seeds = sum(c["stall_rate"]["seeds"] for c in voters)
        decide = ""
        if claims.over_settings(states) == UNDECIDED:
            needs = [f"{c.get('where') or c['task'] + ' d_head ' + str(c['d_head'])}: " + (
                     f"about {n} seeds at its rate"
                     if (n := seeds_to_decide(c["stall_rate"]["stalled"], c["stall_rate"]["seeds"], DECIDED_RATE))
                     else "no number of seeds at its rate") for c, st in zip(voters, states) if st == UNDECIDED]
            decide = f"seeds enough for a cell's stall rate to clear {DECIDED_RATE:g}: " + "; ".join(needs)
        return Reading.over(states, measured=f"{text} in {stalled} of {seeds} seeds over {len(voters)} cells "
                       f"{intervals.fmt_interval(intervals.wilson(stalled, seeds), percent=True)}",
                       threshold=f"a seed stalls below {STALL_BELOW * scale:.2g} of sqrt's progress; a cell stalls where "
                                 f"its stall rate's interval lies above {DECIDED_RATE * scale:.2g}",
                       settings=[{"where": c.get("where") or f"{c['task']} d_head {c['d_head']}", "state": st,
                                  "measured": f"{c['stall_rate']['stalled']} of {c['stall_rate']['seeds']} seeds"}
                                 for c, st in zip(voters, states)], decide=decide)

    return measured_at(read)


# --------------------------------------------------------------------------- the claims

STALL_RULE = (f"a seed stalls when it learns less than {STALL_BELOW} of what sqrt learned; a cell stalls where "
              f"the Wilson 95% interval of its stall rate lies above {DECIDED_RATE:g} and does not where it lies "
              f"below (undecided otherwise, which leaves the part open); the part holds where every cell stalls, "
              f"fails where none does, and holds in part where some do and some do not")


def model_size(result: dict) -> dict:
    """The trained model's size, so that a sentence quoting its result can say how small it is."""
    return {"n_layers": result["config"]["n_layers"], "d_model": result["config"]["d_model"]}


def judge_c05(result: dict) -> Finding:
    """'Fundamentally unusable', read at 1/d_k's own best learning rate (the claim's setting: no
    retuning rescues it); the reading at sqrt's learning rate is context."""
    readings = {r: cells_of(result, "inv_d", r) for r in READINGS}
    unusable = stall_part(readings["own"], "1/d_k stalls")
    evidence = (
        f"Scaling by 1/d_k instead of 1/sqrt(d_k): what inv_d learned as a fraction of what sqrt learned (recall: "
        f"accuracy above the copy baseline; Shakespeare: validation-loss drop), median [min-max] over seeds. At its own "
        f"best learning rate (the claim's setting): {describe(readings['own'])}. Context, at sqrt's best learning rate "
        f"(no retuning): {describe(readings['sqrt'])}; 'unusable' there: {stall_part(readings['sqrt'], 'stalls').state}. "
        f"Part rule: 'unusable' = stalls; {STALL_RULE}.")
    numbers = {f"inv_d_progress_{c['task']}_{c['d_head']}": c["progress"]["median"] for c in readings["own"]}
    numbers |= {f"inv_d_at_sqrt_lr_progress_{c['task']}_{c['d_head']}": c["progress"]["median"]
                for c in readings["sqrt"]}
    numbers |= model_size(result)
    return Finding("C05", "training", evidence, numbers, {"unusable": unusable})


def init_extremes(result: dict, rule: str, d_head: int, when: str = "0") -> dict:
    """Largest |logit| and mean max probability over layers at step ``when``: medians over the seeds."""
    lr = best_lr(result, "recall", rule, d_head)
    found = [r["attention_at"][when] for r in runs_at(result, "recall", rule, d_head, lr) if when in r["attention_at"]]
    return {"max_abs_logit": spread([max(l["max_abs_logit"] for l in layers) for layers in found]),
            "max_prob": spread([statistics.fmean(l["max_prob"] for l in layers) for layers in found])}


def judge_c06(result: dict) -> Finding:
    """'Training stalls' without scaling, at its own best learning rate, d_head >= 64, every task."""
    readings = {r: cells_of(result, "none", r, min_d_head=64) for r in READINGS}
    stalls = stall_part(readings["own"], "no scaling stalls")
    d_max = max(c["d_head"] for c in readings["own"]) if readings["own"] else max(result["config"]["d_heads"])
    start, later = init_extremes(result, "none", d_max), init_extremes(result, "none", d_max, "100")
    evidence = (
        f"With no scaling and q, k components of variance 1, at d_head {d_max} on recall: largest |logit| at init "
        f"{fmt_spread(start['max_abs_logit'])}, mean max probability {fmt_spread(start['max_prob'], 2)}; after 100 "
        f"steps {fmt_spread(later['max_abs_logit'])} and {fmt_spread(later['max_prob'], 2)}. What the unscaled model "
        f"learned as a fraction of sqrt's, d_head >= 64, at its own best learning rate (the claim's setting): "
        f"{describe(readings['own'])}. Context, at sqrt's best learning rate: {describe(readings['sqrt'])}; stalls "
        f"there: {stall_part(readings['sqrt'], 'stalls').state}. Part rule: {STALL_RULE}.")
    numbers = {f"none_progress_{c['task']}_{c['d_head']}": c["progress"]["median"] for c in readings["own"]}
    numbers |= {"init_max_abs_logit": start["max_abs_logit"]["median"], "init_max_prob": start["max_prob"]["median"],
                "step100_max_abs_logit": later["max_abs_logit"]["median"]}
    for c in readings["own"]:  # the scale of the evidence: counts of seeds, and the model's size
        numbers[f"none_stalled_{c['task']}_{c['d_head']}"] = c["stall_rate"]["stalled"]
        numbers[f"none_seeds_{c['task']}_{c['d_head']}"] = c["stall_rate"]["seeds"]
    numbers |= model_size(result)
    trained_logits = later["max_abs_logit"]

    def read_logits(scale: float) -> Reading:
        # every seed past the saturation lab's "around +-100" line holds, none past it fails
        line = LOGITS_AROUND_100 * scale
        high = trained_logits["max"]
        return Reading(state_of(intervals.at_least((trained_logits["min"], high), line)), measured=f"largest |logit| after 100 steps {fmt_spread(trained_logits)} "
                                                     f"at d_head {d_max}, over {trained_logits['n']} seeds",
                       threshold=f">= {line:g} in every seed", direction=f"{fmt(high)} at most, below ±100")

    logits = (measured_at(read_logits) if trained_logits["median"] is not None else
              Reading(claims.NOT_TESTABLE, note=f"no attention statistics after 100 steps at d_head {d_max}"))
    return Finding("C06", "training", evidence, numbers, {"stalls": stalls, "logits_trained": logits})


# --------------------------------------------------------------------------- C09: 1/8 vs 1/16, 8 layers

def oscillation(curve: list) -> float:
    """How much the validation loss goes back up over the second half of the run: the sum of its rises between log
    points (a loss that oscillates rises again and again; one that falls steadily, however fast, rises by 0)."""
    tail = [v for v in curve[len(curve) // 2:] if v is not None]
    return sum(max(0.0, b - a) for a, b in zip(tail, tail[1:]))


FACTORS = {"const:0.125": "1/8", "const:0.0625": "1/16"}


def deep_rows(result: dict) -> list[dict]:
    """Per factor and learning rate over seeds: solved (with the Wilson interval), accuracy,
    oscillation, diverged."""
    rows = []
    for rule, name in FACTORS.items():
        for lr in sorted({r["lr"] for r in result["deep"] if r["rule"] == rule}):
            runs = sorted((r for r in result["deep"] if r["rule"] == rule and r["lr"] == lr), key=lambda r: r["seed"])
            count = sum(r["status"] == "finished" and solved(r) for r in runs)
            oscillations = [oscillation(r["curve"]["val_loss"]) for r in runs]
            rows.append({"factor": name, "rule": rule, "lr": lr, "seeds": len(runs), "solved": count,
                         "solved_interval": intervals.wilson(count, len(runs)),
                         "acc": spread([accuracy(r) for r in runs]),
                         "mean_acc": statistics.fmean(accuracy(r) for r in runs),
                         "oscillations": oscillations, "oscillation": spread(oscillations),
                         "diverged": sum(r["status"] == "diverged" for r in runs)})
    return rows


def deep_best(result: dict, rows: list[dict], rule: str) -> dict | None:
    """A factor at its own best learning rate: the highest mean accuracy over the deep cells' base seeds, the
    statistic every grid cell is ranked by (and the one the experiment chose the rate by)."""
    base = deep_seeds_of(result["config"]["seed"], result["config"]["deep_seeds"])
    best = best_lrs(fold_cells([r for r in result["deep"] if r["rule"] == rule and r["seed"] in base]))
    chosen = next((info["lr"] for info in best.values()), None)
    return next((r for r in rows if r["rule"] == rule and r["lr"] == chosen), None)


def seeds_for_ratio(interval: tuple[float, float], ratio: float, threshold: float, seeds: int) -> int | None:
    """About how many seeds would put a bootstrap ratio interval clear of ``threshold`` at the same
    ratio, if its width shrank as 1/sqrt(seeds) (on a log scale); None where the ratio sits on it."""
    if ratio <= 0 or interval[0] <= 0 or math.isclose(ratio, threshold):
        return None
    half_width = (math.log(interval[1]) - math.log(interval[0])) / 2
    distance = abs(math.log(ratio) - math.log(threshold))
    return max(seeds, math.ceil(seeds * (half_width / distance) ** 2))


def rate_decide(row: dict, threshold: float) -> str:
    needed = seeds_to_decide(row["solved"], row["seeds"], threshold)
    return (f"about {needed} seeds at the observed {row['solved']} of {row['seeds']}" if needed
            else f"no number of seeds at the observed {row['solved']} of {row['seeds']} (it sits at {threshold:g})")


def judge_c09(result: dict) -> Finding:
    """Each factor at its own best learning rate.  Three parts: with 1/8 the loss does not converge
    (its solve rate's Wilson interval below DECIDED_RATE; above fails); with 1/8 the loss oscillates
    (the bootstrap interval of the ratio of 1/8's median rise to 1/16's above DEEP_OSCILLATES: a loss that
    oscillates goes back up, one that falls steadily does not;
    below fails); 1/16 restores stable training (its solve rate above DECIDED_RATE; below fails)."""
    rows = deep_rows(result)
    cfg = result["config"]
    if not rows:
        return untested("C09", "training", f"This preset trains no {cfg['deep_layers']}-layer model (it costs more "
                        f"than the quick preset's budget); `attnscale report --preset full` trains it, with "
                        f"{cfg['deep_d_head']}-dimensional heads, factor 1/8 against 1/16.", NOT_IN_PRESET)
    text = "; ".join(
        f"{r['factor']} at lr {r['lr']:g}: solved in {r['solved']} of {r['seeds']} seeds "
        f"{intervals.fmt_interval(r['solved_interval'], percent=True)}, accuracy {fmt_spread(r['acc'], 2)}, "
        f"oscillation {fmt_spread(r['oscillation'], 2)}, diverged {r['diverged']}" for r in rows)
    old, new = deep_best(result, rows, "const:0.125"), deep_best(result, rows, "const:0.0625")
    rises_1_8, rises_1_16 = ([max(v, RISE_FLOOR) for v in row["oscillations"]] for row in (old, new))
    ratio = statistics.median(rises_1_8) / statistics.median(rises_1_16)
    ratio_ci = intervals.bootstrap_ratio(rises_1_8, rises_1_16)

    def read_rate(row: dict, name: str, holds_below: bool, scale: float) -> Reading:
        """A factor's solve rate against DECIDED_RATE: 'does not converge' holds below it, 'restores' above."""
        state = state_of(intervals.at_least(row["solved_interval"], DECIDED_RATE * scale), negate=holds_below)
        return Reading(state, measured=f"{name} solves in {row['solved']} of {row['seeds']} seeds "
                       f"{intervals.fmt_interval(row['solved_interval'], percent=True)}",
                       threshold=f"solve rate {'below' if holds_below else 'above'} {DECIDED_RATE * scale:.2g}",
                       decide=rate_decide(row, DECIDED_RATE) if state == UNDECIDED else "")

    def read_no_converge(scale: float) -> Reading:
        return read_rate(old, "1/8", True, scale)

    def read_oscillates(scale: float) -> Reading:
        state = state_of(intervals.at_least(ratio_ci, DEEP_OSCILLATES * scale))
        # the interval's width shrinks with the seeds of both factors: scaled from the fewer (a report from before
        # the fixed count may hold 1/8 and 1/16 with different counts)
        needed = seeds_for_ratio(ratio_ci, ratio, DEEP_OSCILLATES, min(len(old["oscillations"]), len(new["oscillations"])))
        return Reading(state, measured=f"1/8's loss rises {ratio:.2f}x {intervals.fmt_interval(ratio_ci)} as much as 1/16's "
                       f"(median total rise {statistics.median(old['oscillations']):.3g} against "
                       f"{statistics.median(new['oscillations']):.3g} nats)",
                       threshold=f"ratio above {DEEP_OSCILLATES * scale:.2g}",
                       decide=(f"about {needed} seeds a factor at the observed ratio" if needed else
                               "no number of seeds at the observed ratio") if state == UNDECIDED else "")

    def read_restores(scale: float) -> Reading:
        return read_rate(new, "1/16", False, scale)

    readings = {"no_converge": measured_at(read_no_converge), "oscillates": measured_at(read_oscillates),
                "restores": measured_at(read_restores)}
    evidence = (
        f"{cfg['deep_layers']}-layer model (d_model {cfg['d_model']}), d_head {cfg['deep_d_head']}, recall, "
        f"{cfg['deep_steps']} steps, median [min-max] and solve rates with Wilson 95% intervals: {text}. At each "
        f"factor's own best learning rate (the highest mean accuracy over the base seeds): 1/8 at {old['lr']:g} solves "
        f"in {old['solved']} of {old['seeds']} seeds {intervals.fmt_interval(old['solved_interval'], percent=True)}, "
        f"1/16 at {new['lr']:g} in {new['solved']} of {new['seeds']} "
        f"{intervals.fmt_interval(new['solved_interval'], percent=True)}; over the second half, 1/8's validation loss "
        f"goes back up {ratio:.2f}x {intervals.fmt_interval(ratio_ci)} as much as 1/16's (the sum of its rises between "
        f"log points; a steady descent rises by 0; either below {RISE_FLOOR:g} nats counts as {RISE_FLOOR:g}). \"Does not "
        f"converge\" {readings['no_converge'].state}, \"oscillates\" {readings['oscillates'].state}, \"1/16 restores "
        f"stable training\" {readings['restores'].state}. Part rules: \"does not converge\" holds where 1/8's solve "
        f"rate interval lies below {DECIDED_RATE:g} and fails where it lies above; \"oscillates\" holds where the "
        f"bootstrap 95% interval of the ratio of median rises lies above {DEEP_OSCILLATES:g} and fails where it "
        f"lies below; \"1/16 restores\" holds where 1/16's solve rate interval lies above {DECIDED_RATE:g} and fails "
        f"where it lies below; an undecided part names the seeds that would decide it at the observed rate.")
    numbers = {f"acc_1_8_lr{r['lr']:g}": r["acc"]["median"] for r in rows if r["rule"] == "const:0.125"}
    numbers |= {f"acc_1_16_lr{r['lr']:g}": r["acc"]["median"] for r in rows if r["rule"] == "const:0.0625"}
    numbers |= {"oscillation_ratio": ratio, "best_lr_1_8": old["lr"], "best_lr_1_16": new["lr"]}
    return Finding("C09", "training", evidence, numbers, readings)


# --------------------------------------------------------------------------- C10: T5's folding

def median_curve(runs: list[dict]) -> list[float | None]:
    curves = [r["curve"]["val_loss"] for r in runs]
    length = min(len(c) for c in curves)
    out = []
    for i in range(length):
        found = [c[i] for c in curves if c[i] is not None]
        out.append(statistics.median(found) if found else None)
    return out


def relative_gap(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else math.inf


def t5_rows(result: dict) -> list[dict]:
    rows = []
    for task in result["config"]["t5_tasks"]:
        for opt, _lr in result["config"]["t5_optimisers"]:
            pair = {init: sorted((r for r in result["t5"] if r["task"] == task and r["optimiser"] == opt
                                  and r["init"] == init), key=lambda r: r["seed"]) for init in ("unit", "t5")}
            ref, t5 = pair["unit"], pair["t5"]
            if not ref or not t5:
                continue
            step0 = max(relative_gap(a["logit_std"], b["logit_std"])
                        for x, y in zip(t5, ref) for a, b in zip(x["attention_at"]["0"], y["attention_at"]["0"]))
            curve_t5, curve_ref = median_curve(t5), median_curve(ref)
            gaps = [relative_gap(a, b) for a, b in zip(curve_t5, curve_ref) if a is not None and b is not None]
            gap = max(gaps) if gaps and len(curve_t5) == len(curve_ref) else math.inf
            trained = statistics.median(
                max(relative_gap(a["logit_std"], b["logit_std"]) for a, b in zip(x["attention_at"]["final"],
                                                                                 y["attention_at"]["final"]))
                if x["attention_at"]["final"] and y["attention_at"]["final"] else math.inf for x, y in zip(t5, ref))
            row = {"task": task, "optimiser": opt, "step0_logit_std_gap": step0, "max_curve_gap": gap,
                   "final_logit_std_gap": trained,
                   "final_sqrt_unit": spread([final_loss(r) for r in ref]),
                   "final_none_t5": spread([final_loss(r) for r in t5])}
            if task == "recall":
                row["acc_sqrt_unit"] = spread([accuracy(r) for r in ref])
                row["acc_none_t5"] = spread([accuracy(r) for r in t5])
                row["none_t5_solved"] = sum(solved(r) for r in t5)
                row["seeds"] = len(t5)
            row["equivalent"] = t5_equivalent(row)
            rows.append(row)
    return rows


def t5_equivalent(row: dict, scale: float = 1.0) -> bool:
    """One (task, optimiser) pair: the same logits at init and training alike, thresholds moved by ``scale``."""
    if row["step0_logit_std_gap"] >= EQUAL_AT_INIT * scale:
        return False
    if row["task"] == "recall":
        return (abs(row["acc_sqrt_unit"]["median"] - row["acc_none_t5"]["median"]) <= EQUIVALENT_ACC * scale
                and row["final_logit_std_gap"] < EQUIVALENT_LOGITS * scale)
    return row["max_curve_gap"] < EQUIVALENT_CURVE * scale and row["final_logit_std_gap"] < EQUIVALENT_LOGITS * scale


def judge_c10(result: dict) -> Finding:
    """'Mathematically equivalent', read per (task, optimiser): the same logits at init (gap below
    EQUAL_AT_INIT) and training alike (recall: median accuracy within EQUIVALENT_ACC; Shakespeare:
    median curves within EQUIVALENT_CURVE; trained logit std within EQUIVALENT_LOGITS)."""
    rows = t5_rows(result)
    if not rows:
        return untested("C10", "training", "No T5-folding runs in this configuration.")
    variant = result["t5_variant_step0"]
    ratio = statistics.fmean(v / s for v, s in zip(variant["none_wq_var_inv_sqrt_dk"], variant["sqrt_unit"]))

    def read(scale: float) -> Reading:
        states = [state_of(t5_equivalent(r, scale)) for r in rows]
        return Reading.over(states, measured=f"equivalent under {sum(st == HOLDS for st in states)} of "
                       f"{len(rows)} optimisers", threshold=f"init gap < {EQUAL_AT_INIT * scale:.2g}; accuracy within "
                       f"{EQUIVALENT_ACC * scale:.2g}, curves within {EQUIVALENT_CURVE * scale:.1%}, trained logit std "
                       f"within {EQUIVALENT_LOGITS * scale:.1%}",
                       settings=[{"where": f"{r['task']}, {OPTIMISER_TEXT.get(r['optimiser'], r['optimiser'])}",
                                  "state": st} for r, st in zip(rows, states)])

    parts = []
    for r in rows:
        text = (f"{r['task']} {r['optimiser']}: step-0 logit std gap {r['step0_logit_std_gap']:.1e}, trained logit std "
                f"gap {r['final_logit_std_gap']:.0%}")
        if r["task"] == "recall":
            text += (f", accuracy {fmt_spread(r['acc_sqrt_unit'], 2)} (sqrt + unit) vs {fmt_spread(r['acc_none_t5'], 2)} "
                     f"(none + t5; solved in {r['none_t5_solved']} of {r['seeds']} seeds)")
        else:
            text += (f", largest gap between the median validation curves {r['max_curve_gap']:.1%}, final loss "
                     f"{fmt_spread(r['final_sqrt_unit'])} vs {fmt_spread(r['final_none_t5'])}")
        parts.append(text + (" (equivalent)" if r["equivalent"] else " (not equivalent)"))
    evidence = (
        f"Folding the factor into W_q's init (W_q std (d_model d_k)^-1/2, no scale) against sqrt with the unit init, "
        f"same seeds, medians [min-max]: {'; '.join(parts)}. The interview answer's other reading (W_q variance "
        f"1/(d_model sqrt(d_k)), no scale) gives a step-0 logit std {ratio:.2f}x the sqrt model's at d_k "
        f"{variant['d_head']} (d_k^(1/4) = {variant['d_head'] ** 0.25:.2f}), so only the 1/d_k-variance reading is "
        f"equivalent at init. Part rule, per task and optimiser: equivalent where the logits are the same at init "
        f"(gap below {EQUAL_AT_INIT:g}) and the models train alike (Shakespeare: curves within {EQUIVALENT_CURVE:.0%}; "
        f"recall: median accuracy within {EQUIVALENT_ACC}; trained logit std within {EQUIVALENT_LOGITS:.0%}); "
        f"equivalent under some optimisers and not others is holding in part (optimisers that do not scale updates "
        f"with the weights see the two parametrisations differently).")
    numbers = {f"curve_gap_{r['task']}_{r['optimiser']}": r["max_curve_gap"] for r in rows}
    numbers |= {f"final_logit_std_gap_{r['task']}_{r['optimiser']}": r["final_logit_std_gap"] for r in rows}
    numbers["variant_logit_std_ratio"] = ratio
    return Finding("C10", "training", evidence, numbers, {"equivalent": measured_at(read)})


OPTIMISER_TEXT = {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}


# --------------------------------------------------------------------------- C13: 2-3x slower

def steps_of(runs: list[dict], budget: float) -> list[float]:
    """Steps to solve per seed; an unsolved run counts at ``budget``: the run's length for a median
    (a lower bound), inf for an interval (its true steps lie anywhere above the run's length)."""
    return [r["steps_to_solve"] if r["steps_to_solve"] is not None else budget for r in runs]


def speed_rows(result: dict, reading: str) -> list[dict]:
    """Per d_head where sqrt solves recall: the median steps to solve of inv_d over sqrt's, with a
    bootstrap 95% interval of that ratio (the two cells' seeds resampled independently; an unsolved
    seed's steps lie anywhere above the run's length, so the interval holds for any of them: its high
    end is open where its resamples reach such a seed, see :func:`attnscale.intervals.bootstrap_ratio`;
    so always where 1/d_k solved in fewer than half of its seeds, the median then a ``lower_bound``)."""
    rows = []
    for d in result["config"]["d_heads"]:
        ref = reference(result, "recall", d)
        if not ref["works"]:
            continue
        budget = ref["runs"][0]["steps"]
        lr = best_lr(result, "recall", "inv_d" if reading == "own" else "sqrt", d)
        mine = runs_at(result, "recall", "inv_d", d, lr)
        if not mine:
            continue
        sqrt_steps, inv_steps = steps_of(ref["runs"], budget), steps_of(mine, budget)
        solved = sum(r["steps_to_solve"] is not None for r in mine)
        rows.append({"d_head": d, "reading": reading, "sqrt_lr": ref["lr"], "inv_d_lr": lr,
                     "sqrt_steps": statistics.median(sqrt_steps), "inv_d_steps": statistics.median(inv_steps),
                     "inv_d_solved": solved, "seeds": len(mine), "sqrt_seeds": len(sqrt_steps),
                     "ratio": statistics.median(inv_steps) / statistics.median(sqrt_steps),
                     "interval": intervals.bootstrap_ratio(inv_steps, sqrt_steps, numerator_high=steps_of(mine, math.inf),
                                                           denominator_high=steps_of(ref["runs"], math.inf)),
                     "lower_bound": solved < majority_of(len(mine))})
    return rows


def slowdown_state(interval: tuple[float, float], scale: float = 1.0) -> str:
    """One cell's '2-3x slower': holds where the ratio's interval lies inside SLOWER_RANGE, fails where
    it lies wholly outside it (not 2x slower, or more than 3x), undecided otherwise."""
    low, high = SLOWER_RANGE[0] * scale, SLOWER_RANGE[1] * scale
    if interval[0] >= low and interval[1] <= high:
        return HOLDS
    if interval[1] < low or interval[0] > high:
        return FAILS
    return UNDECIDED


def slowdown_direction(rows: list[dict], scale: float = 1.0) -> str:
    """Which way the failing cells lie from 2-3x: "1.2x, less than 2x slower", "more than 3x"."""
    low, high = SLOWER_RANGE[0] * scale, SLOWER_RANGE[1] * scale
    below = [r for r in rows if r["interval"][1] < low]
    above = [r for r in rows if r["interval"][0] > high]
    words = []
    if below:
        words.append(", ".join(f"{r['ratio']:.2f}x" for r in below) + f": less than {low:.3g}x slower")
    if above:
        words.append(", ".join(f"{r['ratio']:.2f}+x" if r["lower_bound"] else f"{r['ratio']:.2f}x" for r in above)
                     + f": more than {high:.3g}x slower")
    return "; ".join(words)


def speed_line(rows: list[dict]) -> str:
    return "; ".join(f"d_head {r['d_head']}: sqrt {r['sqrt_steps']:g} steps ({r['sqrt_seeds']} seeds), inv_d "
                     f"{r['inv_d_steps']:g}{' or more' if r['lower_bound'] else ''} (x{r['ratio']:.2f}"
                     f"{'+' if r['lower_bound'] else ''} {intervals.fmt_interval(r['interval'])}, solved in "
                     f"{r['inv_d_solved']} of {r['seeds']} seeds)" for r in rows) or "no cell where sqrt solves recall"


def judge_c13(result: dict) -> Finding:
    """'2-3x slower', read at sqrt's learning rate (the claim's setting: an implementation that swaps
    the factor keeps the learning rate tuned for 1/sqrt(d_k)), per cell where sqrt solves recall; the
    reading at 1/d_k's own best learning rate is context.  Whether the old BERT used 1/d_k is the
    history lab's part (read and run on the released code)."""
    readings = {r: speed_rows(result, r) for r in READINGS}
    rows = readings["sqrt"]

    def read(scale: float) -> Reading:
        states = [slowdown_state(r["interval"], scale) for r in rows]
        return Reading.over(states, measured=speed_line(rows),
                       threshold=f"the ratio's interval inside {SLOWER_RANGE[0] * scale:.3g}-{SLOWER_RANGE[1] * scale:.3g}x "
                                 "(open above where 1/d_k solved in under half of its seeds)",
                       settings=[{"where": f"recall d_head {r['d_head']}", "state": st} for r, st in zip(rows, states)],
                       direction=slowdown_direction(rows, scale))

    own_states = [slowdown_state(r["interval"]) for r in readings["own"]]
    low, high = SLOWER_RANGE
    evidence = (
        f"Median steps to solve recall (accuracy >= {SOLVED_ACC}) over seeds, in cells where sqrt solves it, with the "
        f"bootstrap 95% interval of the ratio; a run that never solves counts at the run's length (a lower bound). "
        f"inv_d at sqrt's best learning rate (the claim's setting): {speed_line(rows)}. Context, inv_d at its own best "
        f"learning rate: {speed_line(readings['own'])} ('2-3x slower' there: {claims.over_settings(own_states)}). Part rule, per "
        f"cell: the ratio's interval inside {low:g}-{high:g}x holds, wholly outside it fails (less than {low:g}x, or "
        f"more than {high:g}x slower), otherwise undecided (an undecided cell leaves the part open); where 1/d_k solved in "
        f"under half of its seeds the ratio is a lower bound set by the run's length, and its interval is open above.")
    numbers = {f"steps_ratio_{r['reading']}_{r['d_head']}": r["ratio"] for rs in readings.values() for r in rs}
    if not rows:
        return untested("C13", "training", evidence, numbers=numbers)
    return Finding("C13", "training", evidence, numbers, {"slower": measured_at(read)})


# --------------------------------------------------------------------------- C17: gradients without scaling

def grad_ratios(result: dict) -> list[float]:
    """First-layer W_q/W_k gradient norm (mean over the first half of training), sqrt over none, per
    matched seed at sqrt's best learning rate, d_head >= 64."""
    ratios = []
    for task in tasks_of(result):
        for d in task_d_heads(result, task):
            if d < 64:
                continue
            lr = best_lr(result, task, "sqrt", d)
            none = {r["seed"]: r for r in runs_at(result, task, "none", d, lr)}
            for ref in runs_at(result, task, "sqrt", d, lr):
                mine = none.get(ref["seed"])
                if mine and mine["grad_qk_layer0_early"] and ref["grad_qk_layer0_early"]:
                    ratios.append(ref["grad_qk_layer0_early"] / mine["grad_qk_layer0_early"])
    return ratios


LOSS_NOISE = 2.0  # C17: a loss "goes down" past this many std of the initial loss across seeds (one reading's noise)


def loss_drops(result: dict) -> list[dict]:
    """Per cell (every task, d_head >= 64, no scaling at its own best learning rate): each seed's drop of
    the validation loss from step 0, and the noise it is compared with: the spread of the initial
    loss over the cell's seeds (models that differ only in their random draw, before any step)."""
    cells = []
    for task in tasks_of(result):
        for d in task_d_heads(result, task):
            if d < 64:
                continue
            runs = runs_at(result, task, "none", d, best_lr(result, task, "none", d))
            if len(runs) < 2:
                continue
            initial = [r["initial_val_loss"] for r in runs]
            drops = [start - final_loss(r) for start, r in zip(initial, runs)]
            cells.append({"task": task, "d_head": d, "noise": statistics.stdev(initial), "drop": drops,
                          "relative": [drop / start for drop, start in zip(drops, initial)]})
    return cells


def read_loss_down(cells: list[dict], scale: float = 1.0) -> Reading:
    """'The loss does not go down', read as written: a seed's loss goes down where it falls by more
    than LOSS_NOISE std of the initial loss; the part holds where the rate of seeds whose loss goes down
    lies below 1/2 on its Wilson interval, fails where it lies above."""
    down = sum(drop > LOSS_NOISE * scale * c["noise"] for c in cells for drop in c["drop"])
    seeds = sum(len(c["drop"]) for c in cells)
    interval = intervals.wilson(down, seeds)
    falls = [f for c in cells for f in c["relative"]]
    return Reading(state_of(intervals.at_least(interval, DECIDED_RATE), negate=True),
                   measured=f"the loss goes down in {down} of {seeds} seeds over {len(cells)} cells "
                            f"{intervals.fmt_interval(interval, percent=True)}",
                   threshold=f"a seed's loss goes down where it falls by more than {LOSS_NOISE * scale:g} std of the "
                             f"initial loss over seeds; the part holds where that rate's interval lies below {DECIDED_RATE:g}",
                   direction=f"it falls by {min(falls):.0%}-{max(falls):.0%} of its initial value" if falls else "")


def judge_c17(result: dict) -> Finding:
    """Two parts.  The gradient drop: the bootstrap interval of the median first-layer W_q/W_k gradient
    ratio (sqrt over none, matched seeds at sqrt's learning rate, d_head >= 64) above GRAD_DROP holds,
    below fails.  'The loss does not go down': no scaling stalls (learns under STALL_BELOW of what
    sqrt learned), read on every task trained, at its own best learning rate, d_head >= 64."""
    ratios = grad_ratios(result)
    cells = cells_of(result, "none", "own", min_d_head=64)
    copy = result["baselines"]["recall"]["copy"]
    beats = []
    for d in task_d_heads(result, "recall"):
        if d < 64:
            continue
        runs = runs_at(result, "recall", "none", d, best_lr(result, "recall", "none", d))
        if runs:
            above = sum(accuracy(r) > copy + BEATS_COPY for r in runs)
            beats.append({"d_head": d, "above": above, "seeds": len(runs), "interval": intervals.wilson(above, len(runs)),
                          "acc": spread([accuracy(r) for r in runs])})
    if not ratios or not cells:
        return untested("C17", "training", "No matched sqrt / none runs at d_head >= 64 in this configuration.")
    median = statistics.median(ratios)
    ratio_interval = intervals.bootstrap(ratios)

    def read_gradient(scale: float) -> Reading:
        return Reading(state_of(intervals.at_least(ratio_interval, GRAD_DROP * scale)),
                       measured=f"sqrt's gradient over the unscaled one: median {fmt(median)} "
                                f"{intervals.fmt_interval(ratio_interval, 3)} over {len(ratios)} matched seeds",
                       threshold=f"above {GRAD_DROP * scale:.3g}",
                       direction=(f"the unscaled gradient is {1 / median:.3g}x the scaled one: larger, not "
                                  f"{GRAD_DROP:g}x smaller" if median < 1 else
                                  f"{median:.3g}x smaller, not more than {GRAD_DROP * scale:.3g}x"))

    drops = loss_drops(result)
    readings = {"gradient": measured_at(read_gradient)}
    readings["loss"] = (measured_at(lambda scale: read_loss_down(drops, scale)) if drops else
                        Reading(claims.NOT_TESTABLE, note="no cell with two seeds or more to read the loss's noise from"))
    stalls = stall_part(cells, "the loss stalls")
    evidence = (
        f"Gradient norm of the first layer's W_q and W_k (mean over the first half of training), sqrt over none, "
        f"matched seeds at sqrt's best learning rate, d_head >= 64: median {fmt(median)} "
        f"{intervals.fmt_interval(ratio_interval, 3)} (bootstrap 95%; range {fmt(min(ratios))}-{fmt(max(ratios))}, "
        f"{len(ratios)} pairs; below 1 means the unscaled gradient is larger). Whether the loss goes down, every "
        f"task trained, no scaling at its own best learning rate, d_head >= 64: "
        + "; ".join(f"{c['task']} d_head {c['d_head']}: the validation loss falls by "
                    f"{fmt_spread(spread(c['relative']), 2)} of its initial value (initial loss std over seeds "
                    f"{c['noise']:.2g})" for c in drops)
        + f". Context, what it learned next to sqrt: {describe(cells)} ('stalls': {stalls.state}). On recall against the "
        f"copy baseline {copy:.3f}: "
        + "; ".join(f"d_head {b['d_head']}: accuracy {fmt_spread(b['acc'], 2)}, above the baseline by more than "
                    f"{BEATS_COPY} in {b['above']} of {b['seeds']} seeds {intervals.fmt_interval(b['interval'], percent=True)}"
                    for b in beats)
        + f". Part rules: the gradient drop holds if the ratio's interval lies above {GRAD_DROP:g} and fails if it lies "
          f"below; 'the loss does not go down', read as written: a seed's loss goes down where it falls by more than "
          f"{LOSS_NOISE:g} std of the initial loss over the cell's seeds (the noise of one loss reading before any "
          f"step), and the part holds where the Wilson 95% interval of the rate of such seeds lies below "
          f"{DECIDED_RATE:g}, fails where it lies above.")
    return Finding("C17", "training", evidence, {"median_grad_ratio_sqrt_over_none": median,
                                                 "none_beats_copy_cells": sum(b["above"] >= majority_of(b["seeds"])
                                                                              for b in beats)}, readings)


# --------------------------------------------------------------------------- C18: the balance point

NEAR_BEST = {"recall": 0.05, "shakespeare": 0.02}  # recall: median accuracy within 0.05; LM: loss within 2%


def median_score(result: dict, task: str, rule: str, d: int) -> float | None:
    runs = runs_at(result, task, rule, d, best_lr(result, task, rule, d))
    if not runs:
        return None
    return statistics.median(accuracy(r) if task == "recall" else final_loss(r) for r in runs)


def near(task: str, mine: float, best: float, scale: float = 1.0) -> bool:
    if task == "recall":
        return mine >= best - NEAR_BEST["recall"] * scale
    return mine <= best * (1 + NEAR_BEST["shakespeare"] * scale)


def final_entropy(result: dict, task: str, rule: str, d: int) -> float | None:
    runs = runs_at(result, task, rule, d, best_lr(result, task, rule, d))
    found = [statistics.fmean(l["entropy"] for l in r["attention_at"]["final"]) for r in runs if r["attention_at"]["final"]]
    return statistics.median(found) if found else None


def constant_cells(result: dict) -> list[dict]:
    """Every trained cell of a rule whose factor is a constant by its spec (``const:c``, and no scaling:
    the constant 1; a plain factor with exponent 0), where that constant is off sqrt's value, each named
    with how far off it is, and "does not vote" where sqrt itself does not work.  No scaling counts: a
    constant of 1 is the one that is right at d_k = 1."""
    found = []
    for task in tasks_of(result):
        heads = task_d_heads(result, task)
        for rule in result["config"]["rules"]:
            parsed = scaling.parse(rule)
            if not (scaling.is_plain_fixed(parsed) and parsed.exponent == 0):
                continue
            for d in heads:
                off = scaling.factor(rule, d) / scaling.factor("sqrt", d)
                if math.isclose(off, 1.0) or not runs_at(result, task, rule, d, best_lr(result, task, rule, d)):
                    continue
                found.append({**cell(result, task, rule, d),
                              "where": f"{task} d_head {d}, factor {scaling.factor(rule, d):g} "
                                       f"({max(off, 1 / off):.3g}x {'above' if off > 1 else 'below'} sqrt's)"})
    return found


def judge_c18(result: dict) -> Finding:
    """Three parts in training, each read per cell where sqrt works (each rule at its own best
    learning rate, medians over seeds): sqrt near the best rule (recall accuracy within
    NEAR_BEST["recall"], Shakespeare loss within NEAR_BEST["shakespeare"]); inv_d over-smooths (its
    final normalised attention entropy OVERSMOOTH_ENTROPY or more above sqrt's); a constant fails
    (stalls) where its factor is off sqrt's value."""
    rules = result["config"]["rules"]
    main_grid = {"recall": result["config"]["d_heads"], "shakespeare": result["config"]["lm_d_heads"]}
    voting_cells = [(t, d) for t in tasks_of(result) for d in main_grid[t] if reference(result, t, d)["works"]]
    if not voting_cells:
        return untested("C18", "training", "sqrt itself did not work in any cell at this size; nothing to compare with.")
    scores = {}
    for t, d in voting_cells:
        found = {r: median_score(result, t, r, d) for r in rules}
        scores[(t, d)] = {r: v for r, v in found.items() if v is not None}
    entropy_gap = {(t, d): (final_entropy(result, t, "inv_d", d) or 0) - (final_entropy(result, t, "sqrt", d) or 0)
                   for t, d in voting_cells}
    const_cells = constant_cells(result)

    def near_best(t: str, d: int, scale: float) -> bool:
        cell_scores = scores[(t, d)]
        best = max(cell_scores.values()) if t == "recall" else min(cell_scores.values())
        return near(t, cell_scores["sqrt"], best, scale)

    def read_balance(scale: float) -> Reading:
        states = [state_of(near_best(t, d, scale)) for t, d in voting_cells]
        return Reading.over(states, measured=f"sqrt near the best rule in {states.count(HOLDS)} of "
                       f"{len(states)} cells", threshold=f"recall accuracy within {NEAR_BEST['recall'] * scale:.2g}, "
                       f"Shakespeare loss within {NEAR_BEST['shakespeare'] * scale:.1%}",
                       settings=[{"where": f"{t} d_head {d}", "state": st} for (t, d), st in zip(voting_cells, states)])

    def read_oversmooth(scale: float) -> Reading:
        states = [state_of(entropy_gap[c] >= OVERSMOOTH_ENTROPY * scale) for c in voting_cells]
        return Reading.over(states, measured="inv_d's final entropy minus sqrt's: " + ", ".join(
                       f"{t} {d}: {entropy_gap[(t, d)]:+.3f}" for t, d in voting_cells),
                       threshold=f">= {OVERSMOOTH_ENTROPY * scale:.2g}",
                       settings=[{"where": f"{t} d_head {d}", "state": st} for (t, d), st in zip(voting_cells, states)])

    constant = stall_part(const_cells, "a constant factor stalls") if const_cells else Reading(
        claims.NOT_TESTABLE, note="no constant factor trained off sqrt's value")
    readings = {"balance_trained": measured_at(read_balance), "oversmooth_trained": measured_at(read_oversmooth),
                "constant_trained": constant}
    sqrt_ok = sum(near_best(t, d, 1.0) for t, d in voting_cells)
    oversmooth = sum(entropy_gap[c] >= OVERSMOOTH_ENTROPY for c in voting_cells)
    const_fails = sum(stall_state(c) == HOLDS for c in const_cells)
    evidence = (
        f"Each rule at its best learning rate, medians over seeds, in the {len(voting_cells)} cells of the main grid "
        f"where sqrt works ({', '.join(f'{t} d_head {d}' for t, d in voting_cells)}; sqrt's rate confirmed on all the "
        f"seeds it is read on, the others' chosen on their base seeds, which favours sqrt a little). sqrt near the best rule (recall accuracy within "
        f"{NEAR_BEST['recall']}, Shakespeare loss within {NEAR_BEST['shakespeare']:.0%}) in {sqrt_ok} of "
        f"{len(voting_cells)}. inv_d's final normalised attention entropy {OVERSMOOTH_ENTROPY} or more above sqrt's "
        f"(over-smoothing) in {oversmooth} of {len(voting_cells)}. A constant factor where it is off sqrt's value (no "
        f"scaling counts: the constant 1), in every cell trained, the decisive d_heads included, with how far off: "
        + ("; ".join(f"{c['where']}: " + (f"does not vote ({c['reference']})" if c["class"] == "no reference"
                                           else rate_text(c)) for c in const_cells) or "none run")
        + ". Part rules, per cell: "
        f"sqrt near the best; inv_d over-smooths; the constant stalls ({STALL_RULE}); a part holding in some cells "
        f"and failing in others holds in part.")
    return Finding("C18", "training", evidence, {"sqrt_near_best_cells": sqrt_ok, "cells": len(voting_cells),
                                                 "inv_d_oversmooth_cells": oversmooth, "const_fail_cells": const_fails},
                   readings)


def judge(result: dict) -> dict[str, Finding]:
    return {"C05": judge_c05(result), "C06": judge_c06(result), "C09": judge_c09(result),
            "C10": judge_c10(result), "C13": judge_c13(result), "C17": judge_c17(result), "C18": judge_c18(result)}
