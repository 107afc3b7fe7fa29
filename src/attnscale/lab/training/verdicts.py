"""The training lab's verdict rules, each with its thresholds, reading only the lab's result.

How a comparison is made (every rule below uses it):

* the reference is ``sqrt`` at its own best learning rate; a (task, d_head) cell is
  *conclusive* only where the reference works there: on recall it solves the task
  (validation accuracy >= 0.9) in most seeds; on Shakespeare its median final loss ends at
  least ``LM_MARGIN`` below the bigram entropy of the training text (below that, a model
  needs no attention at all);
* a run's *progress* is what it learned as a fraction of what the reference learned
  (median over the reference's seeds): recall accuracy above the copy baseline, or the
  drop of the validation loss;
* each seed is classed ``stalls`` (progress < 0.2), ``worse`` or ``trains`` (>= 0.8); the
  cell takes the class of most of its seeds, and a cell with no majority is *inconclusive*
  (seeds disagree) and named as such;
* each rule is read at its own best learning rate and at sqrt's best learning rate.

Every number quoted is a median with its [min-max] over seeds.
"""

from __future__ import annotations

import math
import statistics

from ... import scaling
from ...claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED, Finding
from .experiment import SOLVED_ACC, spread, task_d_heads, tasks_of

STALL_BELOW = 0.2         # progress below this: the rule stalls (unusable)
TRAINS_FROM = 0.8         # progress from this: the rule trains about as well as sqrt
LM_MARGIN = 0.1           # nats: the reference must end this far below the bigram entropy for an LM cell to vote
SLOWER_RANGE = (1.5, 4.0)  # C13: "2-3x slower", with slack
NOT_SLOWER_BELOW = 1.25
GRAD_DROP = 10.0          # C17: "drops by more than 10x"
BEATS_COPY = 0.05         # C17: accuracy this far above the copy baseline counts as beating it
DEEP_OSCILLATES = 2.0     # C09: mean |change| of the val loss in the second half, vs 1/16's
EQUAL_AT_INIT = 1e-3      # C10: relative difference of the step-0 logit std
EQUIVALENT_CURVE = 0.02   # C10: largest relative gap between the two median validation curves
EQUIVALENT_LOGITS = 0.05  # C10: relative gap of the per-layer logit std after training
EQUIVALENT_ACC = 0.05     # C10 on recall: median final accuracies within this
OVERSMOOTH_ENTROPY = 0.05  # C18: inv_d's final attention entropy above sqrt's by this much
READINGS = ("own", "sqrt")  # each rule at its own best LR, and at sqrt's best LR

# The numbers each finding carries (checked against the judges by the tests, and against what the answer reads).
NUMBER_KEYS = {
    "C05": ("inv_d_progress_*", "inv_d_at_sqrt_lr_progress_*"),
    "C06": ("none_progress_*", "init_max_abs_logit", "init_max_prob", "step100_max_abs_logit"),
    "C07": ("paper_has_no_scale_ablation", "unscaled_stalls_here"),
    "C09": ("acc_1_8_lr*", "acc_1_16_lr*"),
    "C10": ("curve_gap_*", "final_logit_std_gap_*", "variant_logit_std_ratio"),
    "C13": ("steps_ratio_*", "hf_bert_used_inv_d"),
    "C17": ("median_grad_ratio_sqrt_over_none", "none_beats_copy_cells"),
    "C18": ("sqrt_near_best_cells", "cells", "inv_d_oversmooth_cells", "const_fail_cells"),
}

VASWANI_2017 = (
    "Vaswani et al. (2017), section 3.2.1, report no ablation of the scale: they note that dot-product and "
    "additive attention do about equally well for small d_k while additive attention is ahead for larger d_k "
    "without scaling (a comparison taken from Britz et al. 2017), say they suspect that large dot products push "
    "the softmax into regions of tiny gradients, and scale by 1/sqrt(d_k) to counteract it; footnote 4 supports "
    "the suspicion with the variance argument (independent components of mean 0 and variance 1 give a dot "
    "product of variance d_k). Their Table 3 varies d_k, always with the scale; no run without it is shown."
)
VASWANI_RAN_ABLATION = False  # from VASWANI_2017

HF_BERT_2018 = (
    "Hugging Face's BERT port (pytorch-pretrained-bert, 2018, modeling.py, BertSelfAttention) divided the "
    "scores by math.sqrt(self.attention_head_size) from its first commit, as Google's TensorFlow BERT "
    "(modeling.py, attention_layer: 1.0 / math.sqrt(float(size_per_head))) did; no 1/d_k version of it is known."
)
HF_BERT_USED_INV_D = False  # from HF_BERT_2018


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


def final_loss(run: dict) -> float:
    return run["final_val_loss"] if run["final_val_loss"] is not None else run["initial_val_loss"]


def accuracy(run: dict) -> float:
    return run["final_val_acc"] if run["final_val_acc"] is not None else 0.0


def reference(result: dict, task: str, d_head: int) -> dict:
    """sqrt at its best LR in this cell, and whether it works well enough for the cell to vote."""
    lr = best_lr(result, task, "sqrt", d_head)
    runs = runs_at(result, task, "sqrt", d_head, lr)
    if not runs:
        return {"lr": lr, "runs": [], "works": False, "why": "no sqrt runs"}
    if task == "recall":
        solved = sum(accuracy(r) >= SOLVED_ACC for r in runs)
        works = solved >= majority_of(len(runs))
        why = f"sqrt solved recall in {solved} of {len(runs)} seeds"
    else:
        bigram = result["baselines"]["shakespeare"]["bigram"]
        median = statistics.median(final_loss(r) for r in runs)
        works = median <= bigram - LM_MARGIN
        why = f"sqrt's median final loss {median:.3g} vs bigram entropy {bigram:.3g}"
    return {"lr": lr, "runs": runs, "works": works, "why": why}


def gain(run: dict, baselines: dict) -> float:
    if run["task"] == "recall":
        return accuracy(run) - baselines["recall"]["copy"]
    return run["initial_val_loss"] - final_loss(run)


def progress(run: dict, ref_runs: list[dict], baselines: dict) -> float:
    ref_gain = statistics.median(gain(r, baselines) for r in ref_runs)
    return gain(run, baselines) / ref_gain if ref_gain > 0 else math.nan


def classify(p: float) -> str:
    return "stalls" if p < STALL_BELOW else ("trains" if p >= TRAINS_FROM else "worse")


def cell(result: dict, task: str, rule: str, d_head: int, reading: str = "own") -> dict:
    """The rule in one (task, d_head) cell: its class over seeds, per-seed progress and the LR read."""
    ref = reference(result, task, d_head)
    lr = best_lr(result, task, rule if reading == "own" else "sqrt", d_head)
    runs = runs_at(result, task, rule, d_head, lr)
    out = {"task": task, "rule": rule, "d_head": d_head, "reading": reading, "lr": lr, "reference": ref["why"]}
    if not ref["works"] or not runs:
        return {**out, "class": "no reference", "progress": spread([]), "seeds": []}
    per_seed = [progress(r, ref["runs"], result["baselines"]) for r in runs]
    classes = [classify(p) for p in per_seed]
    top = max(set(classes), key=classes.count)
    agreed = classes.count(top) >= majority_of(len(classes))
    return {**out, "class": top if agreed else "inconclusive", "progress": spread(per_seed), "seeds": classes,
            "agree": f"{classes.count(top)} of {len(classes)}"}


def cells_of(result: dict, rule: str, reading: str, min_d_head: int = 1) -> list[dict]:
    return [cell(result, task, rule, d, reading) for task in tasks_of(result) for d in task_d_heads(result, task)
            if d >= min_d_head]


def describe(cells: list[dict]) -> str:
    parts = []
    for c in cells:
        if c["class"] == "no reference":
            parts.append(f"{c['task']} d_head {c['d_head']}: inconclusive ({c['reference']})")
        elif c["class"] == "inconclusive":
            parts.append(f"{c['task']} d_head {c['d_head']}: {fmt_spread(c['progress'], 2)}, inconclusive "
                         f"(seeds disagree: {', '.join(c['seeds'])})")
        else:
            parts.append(f"{c['task']} d_head {c['d_head']}: {fmt_spread(c['progress'], 2)} at lr {fmt(c['lr'])}, "
                         f"{c['class']} ({c['agree']} seeds)")
    return "; ".join(parts)


def voting(cells: list[dict]) -> list[dict]:
    return [c for c in cells if c["class"] not in ("no reference", "inconclusive")]


def vote_note(cells: list[dict]) -> str:
    return f" {len(voting(cells))} of {len(cells)} cells voted."


def all_some_none(classes: list[str], bad: str) -> str | None:
    """supported if every voting cell is ``bad``, partly if some are, refuted if none is."""
    if not classes:
        return None
    hits = sum(c == bad for c in classes)
    return SUPPORTED if hits == len(classes) else (PARTLY if hits else REFUTED)


def combine_readings(verdicts: dict[str, str | None]) -> str | None:
    found = [v for v in verdicts.values() if v is not None]
    if not found:
        return None
    return found[0] if len(set(found)) == 1 else PARTLY


def readings_line(verdicts: dict[str, str | None]) -> str:
    names = {"own": "each rule at its own best learning rate", "sqrt": "each rule at sqrt's best learning rate"}
    return "; ".join(f"{names[r]}: {v or NOT_TESTABLE}" for r, v in verdicts.items())


# --------------------------------------------------------------------------- the claims

def judge_c05(result: dict) -> Finding:
    readings = {r: cells_of(result, "inv_d", r) for r in READINGS}
    verdicts = {r: all_some_none([c["class"] for c in voting(cs)], "stalls") for r, cs in readings.items()}
    verdict = combine_readings(verdicts)
    evidence = (
        f"Scaling by 1/d_k instead of 1/sqrt(d_k): what inv_d learned as a fraction of what sqrt learned (recall: "
        f"accuracy above the copy baseline; Shakespeare: validation-loss drop), median [min-max] over seeds. At its own "
        f"best learning rate: {describe(readings['own'])}. At sqrt's best learning rate: {describe(readings['sqrt'])}."
        f" Rule: below {STALL_BELOW} is 'unusable'; unusable in every voting cell supports the claim, in some partly "
        f"supports it, in none refutes it (at most 'a bit worse', which the claim denies). Readings: "
        f"{readings_line(verdicts)}." + vote_note(readings["own"]))
    numbers = {f"inv_d_progress_{c['task']}_{c['d_head']}": c["progress"]["median"] for c in readings["own"]}
    numbers |= {f"inv_d_at_sqrt_lr_progress_{c['task']}_{c['d_head']}": c["progress"]["median"]
                for c in readings["sqrt"]}
    return Finding(verdict or NOT_TESTABLE, evidence, numbers)


def init_extremes(result: dict, rule: str, d_head: int, when: str = "0") -> dict:
    """Largest |logit| and mean max probability over layers at step ``when``: medians over the seeds."""
    lr = best_lr(result, "recall", rule, d_head)
    found = [r["attention_at"][when] for r in runs_at(result, "recall", rule, d_head, lr) if when in r["attention_at"]]
    return {"max_abs_logit": spread([max(l["max_abs_logit"] for l in layers) for layers in found]),
            "max_prob": spread([statistics.fmean(l["max_prob"] for l in layers) for layers in found])}


def judge_c06(result: dict) -> Finding:
    readings = {r: cells_of(result, "none", r, min_d_head=64) for r in READINGS}
    verdicts = {r: all_some_none([c["class"] for c in voting(cs)], "stalls") for r, cs in readings.items()}
    verdict = combine_readings(verdicts)
    d_max = max(result["config"]["d_heads"])
    start, later = init_extremes(result, "none", d_max), init_extremes(result, "none", d_max, "100")
    evidence = (
        f"With no scaling and q, k components of variance 1, at d_head {d_max} on recall: largest |logit| at init "
        f"{fmt_spread(start['max_abs_logit'])}, mean max probability {fmt_spread(start['max_prob'], 2)}; after 100 "
        f"steps {fmt_spread(later['max_abs_logit'])} and {fmt_spread(later['max_prob'], 2)}. What the unscaled model "
        f"learned as a fraction of sqrt's, d_head >= 64, at its own best learning rate: {describe(readings['own'])}; "
        f"at sqrt's: {describe(readings['sqrt'])}. Rule: stalling (below {STALL_BELOW}) in every voting cell supports "
        f"'training stalls', in some partly, in none refutes it. Readings: {readings_line(verdicts)}."
        + vote_note(readings["own"]))
    numbers = {f"none_progress_{c['task']}_{c['d_head']}": c["progress"]["median"] for c in readings["own"]}
    numbers |= {"init_max_abs_logit": start["max_abs_logit"]["median"], "init_max_prob": start["max_prob"]["median"],
                "step100_max_abs_logit": later["max_abs_logit"]["median"]}
    return Finding(verdict or NOT_TESTABLE, evidence, numbers)


def judge_c07(result: dict, paper_ran_ablation: bool = VASWANI_RAN_ABLATION) -> Finding:
    cells = voting(cells_of(result, "none", "own", min_d_head=64))
    stalls = bool(cells) and all(c["class"] == "stalls" for c in cells)
    if paper_ran_ablation:
        verdict = SUPPORTED if stalls else PARTLY
    else:
        verdict = PARTLY if stalls else REFUTED
    evidence = (
        f"{VASWANI_2017} So the paper did not verify by experiment that training fails without the scale. This lab's "
        f"own unscaled runs, d_head >= 64: {describe(cells_of(result, 'none', 'own', min_d_head=64))}. Rule: no ablation "
        f"in the paper and unscaled training that does not stall in every voting cell here -> refuted; no ablation but a "
        f"stall everywhere here -> partly supported (the effect is real, the citation is not); an ablation in the paper "
        f"-> supported if the stall is reproduced here, partly otherwise.")
    return Finding(verdict, evidence, {"paper_has_no_scale_ablation": int(not paper_ran_ablation),
                                       "unscaled_stalls_here": int(stalls)})


# --------------------------------------------------------------------------- C09: 1/8 vs 1/16, 8 layers

def oscillation(curve: list) -> float:
    """Mean |change| of the validation loss between log points, over the second half of the run."""
    tail = [v for v in curve[len(curve) // 2:] if v is not None]
    return statistics.fmean(abs(b - a) for a, b in zip(tail, tail[1:])) if len(tail) > 1 else 0.0


def deep_rows(result: dict) -> list[dict]:
    """Per learning rate: 1/8 and 1/16 over seeds (solved, oscillation, diverged)."""
    rows = []
    for lr in sorted({r["lr"] for r in result["deep"]}):
        pair = {rule: [r for r in result["deep"] if r["rule"] == rule and r["lr"] == lr]
                for rule in ("const:0.125", "const:0.0625")}
        calm = statistics.median(oscillation(r["curve"]["val_loss"]) for r in pair["const:0.0625"])

        def works(runs, other_calm):
            good = [r["status"] == "finished" and accuracy(r) >= SOLVED_ACC
                    and oscillation(r["curve"]["val_loss"]) <= DEEP_OSCILLATES * max(other_calm, 1e-3) for r in runs]
            return sum(good) >= majority_of(len(runs))

        old, new = pair["const:0.125"], pair["const:0.0625"]
        rows.append({"lr": lr, "acc_1_8": spread([accuracy(r) for r in old]), "acc_1_16": spread([accuracy(r) for r in new]),
                     "oscillation_1_8": spread([oscillation(r["curve"]["val_loss"]) for r in old]),
                     "oscillation_1_16": spread([oscillation(r["curve"]["val_loss"]) for r in new]),
                     "diverged_1_8": sum(r["status"] == "diverged" for r in old),
                     "diverged_1_16": sum(r["status"] == "diverged" for r in new),
                     "works_1_8": works(old, calm), "works_1_16": works(new, math.inf)})
    return rows


def judge_c09(result: dict) -> Finding:
    rows = deep_rows(result)
    cfg = result["config"]
    if not rows:
        return Finding(NOT_TESTABLE, f"This preset trains no {cfg['deep_layers']}-layer model (it costs more than the "
                                     f"quick preset's budget); `attnscale report --preset full` trains it, with "
                                     f"{cfg['deep_d_head']}-dimensional heads, factor 1/8 against 1/16.")
    text = "; ".join(
        f"lr {r['lr']:g}: accuracy {fmt_spread(r['acc_1_8'], 2)} (1/8) vs {fmt_spread(r['acc_1_16'], 2)} (1/16), "
        f"oscillation {fmt_spread(r['oscillation_1_8'], 2)} vs {fmt_spread(r['oscillation_1_16'], 2)}, diverged "
        f"{r['diverged_1_8']} vs {r['diverged_1_16']} of {cfg['seeds']}" for r in rows)
    new_works = [r for r in rows if r["works_1_16"]]
    old_fails_where_new_works = [r for r in new_works if not r["works_1_8"]]
    old_works_somewhere = any(r["works_1_8"] for r in rows)
    if not new_works and not old_works_somewhere:
        verdict = NOT_TESTABLE
    elif not new_works or not old_fails_where_new_works:
        verdict = REFUTED
    else:
        verdict = PARTLY if old_works_somewhere else SUPPORTED
    evidence = (
        f"{cfg['deep_layers']}-layer model (d_model {cfg['d_model']}), d_head {cfg['deep_d_head']}, recall, "
        f"{cfg['deep_steps']} steps, {cfg['seeds']} seeds, median [min-max]: {text}. Rule: a factor 'works' at a "
        f"learning rate when most seeds solve recall (accuracy >= {SOLVED_ACC}) without diverging and, for 1/8, "
        f"without moving more than {DEEP_OSCILLATES:g}x as much as 1/16 between log points in the second half. "
        f"Supported if 1/16 works somewhere and 1/8 works nowhere; partly if 1/8 fails where 1/16 works but works at "
        f"another rate; refuted if 1/8 works wherever 1/16 does (or 1/16 works nowhere while 1/8 does); not testable "
        f"if neither works at any rate tried.")
    numbers = {f"acc_1_8_lr{r['lr']:g}": r["acc_1_8"]["median"] for r in rows}
    numbers |= {f"acc_1_16_lr{r['lr']:g}": r["acc_1_16"]["median"] for r in rows}
    return Finding(verdict, evidence, numbers)


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
                row["none_t5_solved"] = sum(accuracy(r) >= SOLVED_ACC for r in t5)
                row["seeds"] = len(t5)
                row["equivalent"] = (abs(row["acc_sqrt_unit"]["median"] - row["acc_none_t5"]["median"]) <= EQUIVALENT_ACC
                                     and trained < EQUIVALENT_LOGITS)
            else:
                row["equivalent"] = gap < EQUIVALENT_CURVE and trained < EQUIVALENT_LOGITS
            rows.append(row)
    return rows


def judge_c10(result: dict) -> Finding:
    rows = t5_rows(result)
    if not rows:
        return Finding(NOT_TESTABLE, "No T5-folding runs in this configuration.")
    equal_at_init = all(r["step0_logit_std_gap"] < EQUAL_AT_INIT for r in rows)
    verdict = REFUTED if not equal_at_init else (SUPPORTED if all(r["equivalent"] for r in rows) else PARTLY)
    variant = result["t5_variant_step0"]
    ratio = statistics.fmean(v / s for v, s in zip(variant["none_wq_var_inv_sqrt_dk"], variant["sqrt_unit"]))
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
        f"same seeds, medians [min-max]: {'; '.join(parts)}. The seed's other reading (W_q variance "
        f"1/(d_model sqrt(d_k)), no scale) gives a step-0 logit std {ratio:.2f}x the sqrt model's at d_k "
        f"{variant['d_head']} (d_k^(1/4) = {variant['d_head'] ** 0.25:.2f}), so only the 1/d_k-variance reading is "
        f"equivalent at init. Rule: the same logits at init (gap below {EQUAL_AT_INIT:g}) and, under every optimiser, "
        f"training alike (Shakespeare: curves within {EQUIVALENT_CURVE:.0%}; recall: median accuracy within "
        f"{EQUIVALENT_ACC}; trained logit std within {EQUIVALENT_LOGITS:.0%}) supports 'equivalent'; equal at init "
        f"but diverging under some optimiser is partly supported (equivalent at init, not in training under "
        f"optimisers that do not scale updates with the weights); different at init refutes it.")
    numbers = {f"curve_gap_{r['task']}_{r['optimiser']}": r["max_curve_gap"] for r in rows}
    numbers |= {f"final_logit_std_gap_{r['task']}_{r['optimiser']}": r["final_logit_std_gap"] for r in rows}
    numbers["variant_logit_std_ratio"] = ratio
    return Finding(verdict, evidence, numbers)


# --------------------------------------------------------------------------- C13: 2-3x slower

def median_steps(runs: list[dict], budget: int) -> tuple[float | None, int]:
    """Median steps to solve (an unsolved run counts at the budget: a lower bound) and how many solved."""
    if not runs:
        return None, 0
    steps = [r["steps_to_solve"] if r["steps_to_solve"] is not None else budget for r in runs]
    return statistics.median(steps), sum(r["steps_to_solve"] is not None for r in runs)


def speed_rows(result: dict, reading: str) -> list[dict]:
    rows = []
    for d in result["config"]["d_heads"]:
        ref = reference(result, "recall", d)
        if not ref["works"]:
            continue
        budget = ref["runs"][0]["steps"]
        lr = best_lr(result, "recall", "inv_d" if reading == "own" else "sqrt", d)
        mine = runs_at(result, "recall", "inv_d", d, lr)
        sqrt_steps, _ = median_steps(ref["runs"], budget)
        inv_steps, solved = median_steps(mine, budget)
        if not sqrt_steps or inv_steps is None:
            continue
        rows.append({"d_head": d, "reading": reading, "sqrt_lr": ref["lr"], "inv_d_lr": lr, "sqrt_steps": sqrt_steps,
                     "inv_d_steps": inv_steps, "inv_d_solved": solved, "seeds": len(mine),
                     "ratio": inv_steps / sqrt_steps, "lower_bound": solved < majority_of(len(mine))})
    return rows


def slowdown_verdict(rows: list[dict]) -> str | None:
    if not rows:
        return None
    median = statistics.median(r["ratio"] for r in rows)
    low, high = SLOWER_RANGE
    return SUPPORTED if low <= median <= high else (REFUTED if median < NOT_SLOWER_BELOW else PARTLY)


def judge_c13(result: dict, implementation_used_inv_d: bool = HF_BERT_USED_INV_D) -> Finding:
    readings = {r: speed_rows(result, r) for r in READINGS}
    verdicts = {r: slowdown_verdict(rows) for r, rows in readings.items()}
    slowdown = combine_readings(verdicts)

    def line(rows):
        return "; ".join(f"d_head {r['d_head']}: sqrt {r['sqrt_steps']:g} steps, inv_d {r['inv_d_steps']:g}"
                         f"{' or more' if r['lower_bound'] else ''} (x{r['ratio']:.2f}{'+' if r['lower_bound'] else ''}, "
                         f"solved in {r['inv_d_solved']} of {r['seeds']} seeds)" for r in rows) or "no voting cell"

    if slowdown is None:
        verdict = NOT_TESTABLE
    elif implementation_used_inv_d:
        verdict = slowdown
    else:
        verdict = REFUTED if slowdown == REFUTED else PARTLY
    low, high = SLOWER_RANGE
    evidence = (
        f"Median steps to solve recall (accuracy >= {SOLVED_ACC}) over seeds, in cells where sqrt solves it; a run "
        f"that never solves counts at the run's length (a lower bound). inv_d at its own best learning rate: "
        f"{line(readings['own'])}. inv_d at sqrt's best learning rate: {line(readings['sqrt'])}. Rule for the "
        f"slowdown: a median ratio of {low:g}-{high:g}x supports '2-3x slower', below {NOT_SLOWER_BELOW:g}x refutes it, "
        f"otherwise partly; readings: {readings_line(verdicts)}. The factual half: {HF_BERT_2018} With the "
        f"implementation's 1/d_k {'confirmed' if implementation_used_inv_d else 'not confirmed'}, the claim as a whole "
        f"is at most partly supported.")
    numbers = {f"steps_ratio_{r['reading']}_{r['d_head']}": r["ratio"] for rows in readings.values() for r in rows}
    numbers["hf_bert_used_inv_d"] = int(implementation_used_inv_d)
    return Finding(verdict, evidence, numbers)


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


def judge_c17(result: dict) -> Finding:
    ratios = grad_ratios(result)
    copy = result["baselines"]["recall"]["copy"]
    beats = []
    for d in result["config"]["d_heads"]:
        if d < 64:
            continue
        runs = runs_at(result, "recall", "none", d, best_lr(result, "recall", "none", d))
        if runs:
            above = sum(accuracy(r) > copy + BEATS_COPY for r in runs)
            beats.append({"d_head": d, "beats": above >= majority_of(len(runs)), "above": above, "seeds": len(runs),
                          "acc": spread([accuracy(r) for r in runs])})
    if not ratios or not beats:
        return Finding(NOT_TESTABLE, "No matched sqrt / none recall runs at d_head >= 64 in this configuration.")
    median = statistics.median(ratios)
    drops = median > GRAD_DROP
    never = not any(b["beats"] for b in beats)
    always = all(b["beats"] for b in beats)
    verdict = SUPPORTED if drops and never else (REFUTED if not drops and always else PARTLY)
    evidence = (
        f"Gradient norm of the first layer's W_q and W_k (mean over the first half of training), sqrt over none, "
        f"matched seeds at sqrt's best learning rate, d_head >= 64: median {fmt(median)} (range {fmt(min(ratios))}-"
        f"{fmt(max(ratios))}, {len(ratios)} pairs; below 1 means the unscaled gradient is larger). Unscaled recall at its "
        f"best learning rate against the copy baseline {copy:.3f}: "
        + "; ".join(f"d_head {b['d_head']}: accuracy {fmt_spread(b['acc'], 2)}, above the baseline by more than "
                    f"{BEATS_COPY} in {b['above']} of {b['seeds']} seeds" for b in beats)
        + f". Rule: supported if the gradient is more than {GRAD_DROP:g}x smaller and the unscaled model never beats "
          f"the copy baseline (it learns nothing attention is needed for); refuted if neither holds anywhere; partly "
          f"otherwise.")
    return Finding(verdict, evidence, {"median_grad_ratio_sqrt_over_none": median,
                                       "none_beats_copy_cells": sum(b["beats"] for b in beats)})


# --------------------------------------------------------------------------- C18: the balance point

NEAR_BEST = {"recall": 0.05, "shakespeare": 0.02}  # recall: median accuracy within 0.05; LM: loss within 2%


def median_score(result: dict, task: str, rule: str, d: int) -> float | None:
    runs = runs_at(result, task, rule, d, best_lr(result, task, rule, d))
    if not runs:
        return None
    return statistics.median(accuracy(r) if task == "recall" else final_loss(r) for r in runs)


def near(task: str, mine: float, best: float) -> bool:
    return mine >= best - NEAR_BEST["recall"] if task == "recall" else mine <= best * (1 + NEAR_BEST["shakespeare"])


def final_entropy(result: dict, task: str, rule: str, d: int) -> float | None:
    runs = runs_at(result, task, rule, d, best_lr(result, task, rule, d))
    found = [statistics.fmean(l["entropy"] for l in r["attention_at"]["final"]) for r in runs if r["attention_at"]["final"]]
    return statistics.median(found) if found else None


def judge_c18(result: dict) -> Finding:
    rules = result["config"]["rules"]
    voting_cells = [(t, d) for t in tasks_of(result) for d in task_d_heads(result, t) if reference(result, t, d)["works"]]
    if not voting_cells:
        return Finding(NOT_TESTABLE, "sqrt itself did not work in any cell at this size; inconclusive.")
    sqrt_ok = []
    for t, d in voting_cells:
        scores = {r: median_score(result, t, r, d) for r in rules}
        scores = {r: s for r, s in scores.items() if s is not None}
        best = max(scores.values()) if t == "recall" else min(scores.values())
        if near(t, scores["sqrt"], best):
            sqrt_ok.append((t, d))
    oversmooth = [(t, d) for t, d in voting_cells
                  if (final_entropy(result, t, "inv_d", d) or 0) - (final_entropy(result, t, "sqrt", d) or 0)
                  >= OVERSMOOTH_ENTROPY]
    const_cells = [cell(result, t, r, d) for r in rules if r.startswith("const:") for t, d in voting_cells
                   if not math.isclose(scaling.factor(r, d), scaling.factor("sqrt", d))]
    const_fails = [c for c in const_cells if c["class"] == "stalls"]
    parts = [len(sqrt_ok) == len(voting_cells), 2 * len(oversmooth) >= len(voting_cells), bool(const_fails)]
    verdict = SUPPORTED if all(parts) else (REFUTED if not any(parts) else PARTLY)
    evidence = (
        f"Each rule at its best learning rate, medians over seeds, in the {len(voting_cells)} cells where sqrt works "
        f"({', '.join(f'{t} d_head {d}' for t, d in voting_cells)}). sqrt near the best rule (recall accuracy within "
        f"{NEAR_BEST['recall']}, Shakespeare loss within {NEAR_BEST['shakespeare']:.0%}) in {len(sqrt_ok)} of "
        f"{len(voting_cells)}. inv_d's final normalised attention entropy {OVERSMOOTH_ENTROPY} or more above sqrt's "
        f"(over-smoothing) in {len(oversmooth)} of {len(voting_cells)}. A constant factor where it is off sqrt's value: "
        f"{describe(const_cells) or 'none run'}. Rule: supported if all three hold (sqrt always near the best; inv_d "
        f"over-smooths in at least half the cells; the constant stalls, below {STALL_BELOW}, somewhere), refuted if "
        f"none does, partly otherwise.")
    return Finding(verdict, evidence, {"sqrt_near_best_cells": len(sqrt_ok), "cells": len(voting_cells),
                                       "inv_d_oversmooth_cells": len(oversmooth), "const_fail_cells": len(const_fails)})


def judge(result: dict) -> dict[str, Finding]:
    return {"C05": judge_c05(result), "C06": judge_c06(result), "C07": judge_c07(result), "C09": judge_c09(result),
            "C10": judge_c10(result), "C13": judge_c13(result), "C17": judge_c17(result), "C18": judge_c18(result)}
