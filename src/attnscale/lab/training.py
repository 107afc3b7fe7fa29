"""The training lab: small Transformers trained under sqrt(d_k), d_k and no scaling.

The seed (section 6) proposes the experiment: train the same model dividing QK^T by
sqrt(d_k), by d_k, and not at all, and compare.  This module runs it, and the claims that
need training to be tested:

* the grid: rules ``sqrt``, ``inv_d``, ``none`` and ``const:0.125`` (the seed's "divide by
  8", right for d_k = 64 only) x d_head 16, 64, 256 x a learning-rate grid x seeds, on two
  tasks: multi-query associative recall (sharp attention needed) and character-level
  Shakespeare (see :mod:`attnscale.models.tasks`).  Each rule is compared at its own best
  learning rate.  Q/K/V use the ``unit`` init (q and k components of variance 1, the seed's
  assumption), so the logit std at init is about d_k^(1/2 - A) for factor d_k^-A.
  -> C05 (does 1/d_k make the model unusable?), C06 (does no scaling stall training?), C13
  (steps to a target, 1/d_k over 1/sqrt(d_k): the seed's "2-3x slower"), C17 (gradient
  norm of the first layer's W_q, W_k, none vs sqrt), C18 (is sqrt the balance point?).
* deep: an 8-layer model at d_head 256 with factor 1/8 vs 1/16, as in the seed's story -> C09.
* t5: rule ``none`` + ``t5`` init (W_q std (d_model d_k)^-1/2: the factor folded into W_q)
  vs ``sqrt`` + ``unit`` init, with the same seed, under AdamW, SGD and Adafactor -> C10.
* C07 asks what Vaswani et al. (2017) ran; it is answered from this lab's no-scale runs
  and from what the paper states (see :data:`VASWANI_2017`).
* a coord check (after microsoft/mup): logit std and max |logit| per layer against d_head
  for each rule, at init and after 100 steps.

A run whose loss turns NaN/inf is a result: "diverged at step k".  The runs go through
:func:`attnscale.runs.execute` (a pool of ``workers`` processes), in memory: nothing here
writes a file except :func:`figures`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import scaling
from ..claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED, Finding
from ..plotting import pyplot, save
from ..runs import execute, run_key
from ..threads import torch_threads
from ..train import RunSpec, attention_stats, build_model, build_task

VERSION = 2

# Thresholds of the verdict rules (quoted in the evidence texts).
STALL_BELOW = 0.2        # progress below this: the rule stalls (learns < 20% of what sqrt learns)
TRAINS_FROM = 0.8        # progress from this: the rule trains about as well as sqrt
MIN_REFERENCE_GAIN = {"recall": 0.2, "shakespeare": 0.5}  # sqrt must learn this much (accuracy over chance / nats)
NEAR_BEST = {"recall": 0.05, "shakespeare": 0.02}  # recall: accuracy within 0.05; LM: loss within 2%
TARGET_FRACTION = 0.9    # steps to target: steps to cover 90% of sqrt's loss drop
SLOWER_RANGE = (1.5, 4.0)  # C13: "2-3x slower", with slack
NOT_SLOWER_BELOW = 1.25
GRAD_DROP = 10.0         # C17: "drops by more than 10x"
LOSS_DOWN = 0.1          # C17: "the loss does not go down" = falls by less than 10% of its initial value
DEEP_CONVERGED = 0.8     # C09: a run converges if it ends below 80% of its initial loss
DEEP_OSCILLATES = 2.0    # C09: mean |step-to-step change| of the val loss in the second half, vs 1/16
EQUAL_AT_INIT = 1e-3     # C10: relative difference of the step-0 logit std
EQUIVALENT_CURVE = 0.02  # C10: largest relative gap between the two validation curves
EQUIVALENT_LOGITS = 0.05  # C10: relative gap of the per-layer logit std after training
OVERSMOOTH_ENTROPY = 0.05  # C18: inv_d's final attention entropy above sqrt's by this much

VASWANI_2017 = (
    "Vaswani et al. (2017), section 3.2.1, report no ablation of the scale: they note that dot-product and "
    "additive attention do about equally well for small d_k while additive attention is ahead for larger d_k "
    "without scaling (a comparison taken from Britz et al. 2017), say they suspect that large dot products push "
    "the softmax into regions of tiny gradients, and scale by 1/sqrt(d_k) to counteract it; footnote 4 supports "
    "the suspicion with the variance argument (independent components of mean 0 and variance 1 give a dot "
    "product of variance d_k). Their Table 3 varies d_k, always with the scale; no run without it is shown."
)


# --------------------------------------------------------------------------- the experiments

@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"
    rules: tuple[str, ...] = ("sqrt", "inv_d", "none", "const:0.125")
    d_heads: tuple[int, ...] = (16, 64, 256)
    seeds: int = 1
    recall_lrs: tuple[float, ...] = (3e-3, 1e-2)
    recall_steps: int = 250
    lm_lrs: tuple[float, ...] = (3e-3,)
    lm_steps: int = 150
    recall_batch: int = 64
    lm_batch: int = 32
    d_model: int = 32
    n_layers: int = 2
    log_every: int = 20
    deep_layers: int = 8
    deep_d_head: int = 256
    deep_lrs: tuple[float, ...] = (3e-3, 1e-2)
    deep_steps: int = 120
    deep_batch: int = 16
    t5_d_head: int = 64
    t5_optimisers: tuple[tuple[str, float], ...] = (("adamw", 3e-3), ("sgd", 0.1), ("adafactor", 1e-2))


PRESETS = {
    "quick": Config(),
    "full": Config(seeds=2, recall_lrs=(1e-3, 3e-3, 1e-2, 3e-2), recall_steps=600, lm_lrs=(1e-3, 3e-3, 1e-2),
                   lm_steps=500, deep_lrs=(1e-3, 3e-3, 1e-2), deep_steps=400),
}

TASK_STEPS = {"recall": "recall_steps", "shakespeare": "lm_steps"}
TASK_LRS = {"recall": "recall_lrs", "shakespeare": "lm_lrs"}
TASK_BATCH = {"recall": "recall_batch", "shakespeare": "lm_batch"}


def base_spec(config: Config, task: str, **fields) -> RunSpec:
    defaults = dict(task=task, steps=getattr(config, TASK_STEPS[task]), batch_size=getattr(config, TASK_BATCH[task]),
                    d_model=config.d_model,
                    n_layers=config.n_layers, log_every=config.log_every, device=config.device)
    defaults.update(fields)
    return RunSpec(**defaults)


def grid_specs(config: Config) -> list[RunSpec]:
    return [base_spec(config, task, rule=rule, d_head=d_head, lr=lr, seed=config.seed + s)
            for task in TASK_STEPS for rule in config.rules for d_head in config.d_heads
            for lr in getattr(config, TASK_LRS[task]) for s in range(config.seeds)]


def deep_specs(config: Config) -> list[RunSpec]:
    """C09: factor 1/8 (right for d_k = 64) vs 1/16 (= 1/sqrt(256)) at d_head 256, 8 layers."""
    return [base_spec(config, "shakespeare", rule=rule, d_head=config.deep_d_head, n_layers=config.deep_layers,
                      lr=lr, steps=config.deep_steps, batch_size=config.deep_batch, seed=config.seed)
            for rule in ("const:0.125", "const:0.0625") for lr in config.deep_lrs]


def t5_specs(config: Config) -> list[RunSpec]:
    """C10: none + t5 init vs sqrt + unit init, same seed, per optimiser."""
    return [base_spec(config, "shakespeare", rule=rule, init=init, d_head=config.t5_d_head, optimiser=opt, lr=lr,
                      seed=config.seed)
            for opt, lr in config.t5_optimisers for rule, init in (("sqrt", "unit"), ("none", "t5"))]


def curve_mean(curves: list[list], length: int, fill: float) -> list[float]:
    """Mean over seeds of validation curves; a diverged run counts as stuck at ``fill`` after it stops."""
    padded = [[(v if v is not None else fill) for v in c] + [fill] * (length - len(c)) for c in curves]
    return [sum(col) / len(col) for col in zip(*padded)]


def summarise(spec: RunSpec, result: dict) -> dict:
    """A run reduced to what the verdicts, tables and figures read."""
    log = result["log"]
    steps = log["step"]
    half = max(1, len(steps) // 2)
    qk = [math.hypot(q[0] or 0.0, k[0] or 0.0) for q, k in zip(log["grad"]["W_q"], log["grad"]["W_k"])]
    vo = [math.hypot(v[0] or 0.0, o[0] or 0.0) for v, o in zip(log["grad"]["W_v"], log["grad"]["W_o"])]
    at = {str(s): layers for s, layers in zip(steps, log["attention"]) if s in (0, 100)}
    at["final"] = log["attention"][-1] if log["attention"] else []
    return {
        **{k: getattr(spec, k) for k in ("task", "rule", "init", "d_head", "n_layers", "lr", "optimiser", "steps",
                                         "seed")},
        "status": result["status"], "diverged_at": result["diverged_at"],
        "initial_val_loss": result["initial_val_loss"], "final_val_loss": result["final_val_loss"],
        "best_val_loss": result["best_val_loss"], "final_val_acc": result["final_val_acc"],
        "chance_acc": result["chance_acc"],
        "curve": {"step": steps, "val_loss": log["val_loss"], "val_acc": log["val_acc"],
                  "train_loss": log["train_loss"]},
        "grad_qk_layer0": qk, "grad_vo_layer0": vo,
        "grad_qk_layer0_early": sum(qk[:half]) / half if qk else None,
        "grad_vo_layer0_early": sum(vo[:half]) / half if vo else None,
        "attention_at": at,
    }


def run(config: Config, progress=None, *, store=None, workers: int | None = None, batch_runs: int = 24) -> dict:
    """The lab's runs, trained in groups of at most ``batch_runs`` by ``workers`` processes.

    ``store``: a :class:`attnscale.runs.RunStore` that keeps every finished group (so a killed
    run resumes where it stopped), or None to keep runs in memory.  Execution options do not
    change the numbers, so they are arguments here, not fields of the config.
    """
    groups = {"grid": grid_specs(config), "deep": deep_specs(config), "t5": t5_specs(config)}
    everything = [spec for specs in groups.values() for spec in specs]
    report = (lambda done, total, msg: progress(done / max(1, total), msg)) if progress else None
    results = execute(everything, store, workers=workers, batch_runs=batch_runs, progress=report)

    out = {"config": dataclasses.asdict(config)}
    for name, specs in groups.items():
        out[name] = [summarise(spec, results[run_key(spec)]) for spec in specs]
    with torch_threads(1):
        out["t5_variant_step0"] = seed_variant_logit_std(config)
    out["cells"] = cells(out["grid"])
    return out


@torch.no_grad()
def seed_variant_logit_std(config: Config) -> dict:
    """Step-0 logit std of the seed's other reading of T5 (W_q variance 1/(d_model sqrt(d_k)), no scale)
    next to sqrt + unit init: same seed, so the only difference is W_q's scale."""
    spec = base_spec(config, "shakespeare", rule="sqrt", init="unit", d_head=config.t5_d_head, seed=config.seed)
    task = build_task(spec)
    model = build_model(spec, task)
    x = task.validation()[0][:64]
    sqrt_std = [layer["logit_std"] for layer in attention_stats(model, x)]
    variant = build_model(dataclasses.replace(spec, rule="none"), task)
    for block in variant.blocks:
        block.attn.w_q.weight.mul_(config.t5_d_head ** -0.25)
    variant_std = [layer["logit_std"] for layer in attention_stats(variant, x)]
    return {"d_head": config.t5_d_head, "sqrt_unit": sqrt_std, "none_wq_var_inv_sqrt_dk": variant_std}


# --------------------------------------------------------------------------- cells: seeds averaged, best LR

def cells(grid: list[dict]) -> list[dict]:
    """One row per (task, rule, d_head, lr): seed means; plus ``best_lr`` marks per (task, rule, d_head)."""
    groups: dict[tuple, list[dict]] = {}
    for r in grid:
        groups.setdefault((r["task"], r["rule"], r["d_head"], r["lr"]), []).append(r)
    rows = []
    for (task, rule, d_head, lr), runs in groups.items():
        initial = sum(r["initial_val_loss"] for r in runs) / len(runs)
        length = max(len(r["curve"]["step"]) for r in runs)
        steps = max((r["curve"]["step"] for r in runs), key=len)
        curve = curve_mean([r["curve"]["val_loss"] for r in runs], length, initial)
        finals = [r["final_val_loss"] if r["final_val_loss"] is not None else initial for r in runs]
        accs = [r["final_val_acc"] for r in runs if r["final_val_acc"] is not None]
        diverged = sum(r["status"] == "diverged" for r in runs)
        rows.append({
            "task": task, "rule": rule, "d_head": d_head, "lr": lr, "seeds": len(runs), "diverged": diverged,
            "initial_val_loss": initial, "final_val_loss": sum(finals) / len(finals),
            "final_val_acc": (sum(accs) / len(runs)) if task == "recall" else None,  # a diverged seed scores 0
            "chance_acc": runs[0]["chance_acc"], "steps": steps, "curve": curve,
            "grad_qk_layer0_early": statistics.fmean(r["grad_qk_layer0_early"] for r in runs),
            "final_entropy": statistics.fmean(
                statistics.fmean(layer["entropy"] for layer in r["attention_at"]["final"]) for r in runs
                if r["attention_at"]["final"]) if any(r["attention_at"]["final"] for r in runs) else None,
        })
    for key in {(c["task"], c["rule"], c["d_head"]) for c in rows}:
        mine = [c for c in rows if (c["task"], c["rule"], c["d_head"]) == key]
        best = min(mine, key=lambda c: (-(c["final_val_acc"] or 0.0), c["final_val_loss"]) if c["task"] == "recall"
                   else (c["final_val_loss"], 0.0))
        for c in mine:
            c["best_lr"] = c is best
    rows.sort(key=lambda c: (c["task"], c["d_head"], c["rule"], c["lr"]))
    return rows


def best_cell(result: dict, task: str, rule: str, d_head: int) -> dict | None:
    for c in result["cells"]:
        if (c["task"], c["rule"], c["d_head"]) == (task, rule, d_head) and c["best_lr"]:
            return c
    return None


def gain(cell: dict) -> float:
    """What a cell learned: recall accuracy above chance; LM loss drop in nats."""
    if cell["task"] == "recall":
        return (cell["final_val_acc"] or 0.0) - cell["chance_acc"]
    return cell["initial_val_loss"] - cell["final_val_loss"]


def progress_vs_sqrt(result: dict, task: str, rule: str, d_head: int) -> float | None:
    """gain(rule) / gain(sqrt), both at their best LR; None when sqrt itself learned too little to compare."""
    ref, mine = best_cell(result, task, "sqrt", d_head), best_cell(result, task, rule, d_head)
    if ref is None or mine is None or gain(ref) < MIN_REFERENCE_GAIN[task]:
        return None
    return gain(mine) / gain(ref)


def steps_to_target(cell: dict, target: float) -> int | None:
    for step, loss in zip(cell["steps"], cell["curve"]):
        if loss <= target:
            return step
    return None


def speed_ratio(result: dict, task: str, d_head: int, rule: str = "inv_d") -> dict | None:
    """Steps for ``rule`` to cover 90% of sqrt's loss drop, over sqrt's steps (each at its fastest LR)."""
    ref = best_cell(result, task, "sqrt", d_head)
    if ref is None or gain(ref) < MIN_REFERENCE_GAIN[task]:
        return None
    target = ref["initial_val_loss"] - TARGET_FRACTION * (ref["initial_val_loss"] - min(ref["curve"]))

    def fastest(r):
        found = [steps_to_target(c, target) for c in result["cells"]
                 if (c["task"], c["rule"], c["d_head"]) == (task, r, d_head)]
        reached = [s for s in found if s is not None]
        return min(reached) if reached else None

    sqrt_steps, rule_steps = fastest("sqrt"), fastest(rule)
    budget = ref["steps"][-1]
    if not sqrt_steps:
        return None
    return {"task": task, "d_head": d_head, "target_loss": target, "sqrt_steps": sqrt_steps,
            "rule_steps": rule_steps, "ratio": (rule_steps / sqrt_steps) if rule_steps else None,
            "ratio_at_least": (rule_steps if rule_steps else budget) / sqrt_steps, "reached": rule_steps is not None}


def lr_sensitivity(cells_of_rule: list[dict]) -> float | None:
    """Wortsman et al. 2023: mean over the LR grid of min(final loss, initial loss), minus the best final loss."""
    if len(cells_of_rule) < 2:
        return None
    capped = [min(c["final_val_loss"], c["initial_val_loss"]) for c in cells_of_rule]
    return statistics.fmean(capped) - min(c["final_val_loss"] for c in cells_of_rule)


# --------------------------------------------------------------------------- verdicts

def fmt(value, digits=3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def progress_table(result: dict, rule: str, d_heads=None) -> dict[tuple[str, int], float | None]:
    d_heads = d_heads or result["config"]["d_heads"]
    return {(task, d): progress_vs_sqrt(result, task, rule, d) for task in TASK_STEPS for d in d_heads}


def describe(progress: dict) -> str:
    return "; ".join(f"{task} d_head {d}: {fmt(p, 2)}" for (task, d), p in progress.items())


def classify(p: float) -> str:
    return "stalls" if p < STALL_BELOW else ("trains" if p >= TRAINS_FROM else "worse")


def inconclusive_note(progress: dict) -> str:
    missing = [f"{task} d_head {d}" for (task, d), p in progress.items() if p is None]
    return (f" Inconclusive at this size for {', '.join(missing)}: sqrt itself learned too little there "
            f"(less than {MIN_REFERENCE_GAIN['recall']} accuracy over chance on recall, "
            f"{MIN_REFERENCE_GAIN['shakespeare']} nats on Shakespeare), so those cells were left out.") if missing else ""


def verdict_from_classes(classes: list[str], bad: str, good: str = "trains") -> str | None:
    if not classes:
        return None
    if all(c == bad for c in classes):
        return SUPPORTED
    if all(c == good for c in classes):
        return REFUTED
    return PARTLY


def entropy_of(result, task, rule, d):
    cell = best_cell(result, task, rule, d)
    return None if cell is None else cell["final_entropy"]


def judge_c05(result: dict) -> Finding:
    progress = progress_table(result, "inv_d")
    classes = [classify(p) for p in progress.values() if p is not None]
    verdict = None if not classes else (SUPPORTED if all(c == "stalls" for c in classes) else
                                        PARTLY if "stalls" in classes else REFUTED)
    ent = "; ".join(f"d_head {d}: {fmt(entropy_of(result, 'recall', 'inv_d', d), 2)} vs {fmt(entropy_of(result, 'recall', 'sqrt', d), 2)}"
                    for d in result["config"]["d_heads"])
    evidence = (
        f"Scaling by 1/d_k instead of 1/sqrt(d_k), each rule at its best learning rate: what inv_d learned as a "
        f"fraction of what sqrt learned (recall: accuracy over chance; Shakespeare: validation-loss drop) was "
        f"{describe(progress)}. Rule: below {STALL_BELOW} is 'unusable'; unusable everywhere supports the claim, "
        f"unusable somewhere partly supports it, and unusable nowhere refutes it (at most 'a bit worse', which is "
        f"what the claim denies). Final normalised attention entropy on recall, inv_d vs sqrt: {ent}.")
    if verdict is None:
        return Finding(NOT_TESTABLE, evidence + inconclusive_note(progress))
    return Finding(verdict, evidence + inconclusive_note(progress),
                   {f"inv_d_progress_{t}_{d}": p for (t, d), p in progress.items()})


def init_extremes(result: dict, rule: str, d_head: int, when: str = "0") -> dict:
    """Largest |logit| and mean max probability over layers, at step ``when`` ("0", "100"), first run found."""
    for r in result["grid"]:
        if r["rule"] == rule and r["d_head"] == d_head and when in r["attention_at"]:
            layers = r["attention_at"][when]
            return {"max_abs_logit": max(l["max_abs_logit"] for l in layers),
                    "max_prob": statistics.fmean(l["max_prob"] for l in layers)}
    return {"max_abs_logit": None, "max_prob": None}


def grad_ratios(result: dict, min_d_head: int = 64) -> list[float]:
    """Layer-0 W_q/W_k gradient norm (mean over the first half of training), sqrt over none, per matched run."""
    by_key = {(r["task"], r["rule"], r["d_head"], r["lr"], r["seed"]): r for r in result["grid"]}
    ratios = []
    for (task, rule, d, lr, seed), r in by_key.items():
        if rule != "none" or d < min_d_head:
            continue
        ref = by_key.get((task, "sqrt", d, lr, seed))
        if ref and r["grad_qk_layer0_early"]:
            ratios.append(ref["grad_qk_layer0_early"] / r["grad_qk_layer0_early"])
    return ratios


def big_d_heads(result: dict) -> list[int]:
    return [d for d in result["config"]["d_heads"] if d >= 64]


def judge_c06(result: dict) -> Finding:
    progress = progress_table(result, "none", big_d_heads(result))
    classes = [classify(p) for p in progress.values() if p is not None]
    verdict = verdict_from_classes(classes, "stalls")
    d_max = max(result["config"]["d_heads"])
    extremes = init_extremes(result, "none", d_max)
    later = init_extremes(result, "none", d_max, "100")
    small = progress_table(result, "none", [d for d in result["config"]["d_heads"] if d < 64])
    evidence = (
        f"With no scaling and q, k components of variance 1, the largest |logit| at init at d_head {d_max} was "
        f"{fmt(extremes['max_abs_logit'])} and the mean max probability {fmt(extremes['max_prob'], 2)}; after 100 "
        f"steps: {fmt(later['max_abs_logit'])} and {fmt(later['max_prob'], 2)}. What the "
        f"unscaled model learned as a fraction of sqrt's (each at its best learning rate), at d_head >= 64: "
        f"{describe(progress)}" + (f" (and at smaller d_head: {describe(small)})" if small else "") +
        f". Rule: below {STALL_BELOW} at every d_head >= 64 means training stalls (supported); at least "
        f"{TRAINS_FROM} everywhere refutes it; otherwise partly supported.")
    if verdict is None:
        return Finding(NOT_TESTABLE, evidence + inconclusive_note(progress))
    numbers = {f"none_progress_{t}_{d}": p for (t, d), p in progress.items()}
    numbers.update({"init_max_abs_logit": extremes["max_abs_logit"], "init_max_prob": extremes["max_prob"],
                    "step100_max_abs_logit": later["max_abs_logit"]})
    return Finding(verdict, evidence + inconclusive_note(progress), numbers)


def judge_c07(result: dict) -> Finding:
    progress = progress_table(result, "none", big_d_heads(result))
    classes = [classify(p) for p in progress.values() if p is not None]
    paper_ran_ablation = False  # see VASWANI_2017: a suspicion and a variance argument, no run without the scale
    here = ("stalls" if classes and all(c == "stalls" for c in classes) else
            "trains" if classes and all(c == "trains" for c in classes) else "mixed")
    if not classes:
        verdict = REFUTED if not paper_ran_ablation else NOT_TESTABLE
    elif paper_ran_ablation:
        verdict = SUPPORTED if here == "stalls" else PARTLY
    else:
        verdict = PARTLY if here == "stalls" else REFUTED
    evidence = (
        f"{VASWANI_2017} So the paper did not verify by experiment that training fails without the scale. This "
        f"lab's own unscaled runs (fraction of sqrt's learning, at the best learning rate, d_head >= 64): "
        f"{describe(progress)}; classified as '{here}' (stall below {STALL_BELOW}, train from {TRAINS_FROM}). "
        f"Rule: no ablation in the paper and unscaled training that does not stall here -> refuted; no ablation but "
        f"a stall here -> partly supported (the effect is real, the citation is not).")
    return Finding(verdict, evidence + inconclusive_note(progress), {"paper_has_no_scale_ablation": 1})


def oscillation(curve: list) -> float:
    """Mean |change| of the validation loss between log points, over the second half of the run."""
    tail = [v for v in curve[len(curve) // 2:] if v is not None]
    return statistics.fmean(abs(b - a) for a, b in zip(tail, tail[1:])) if len(tail) > 1 else 0.0


def deep_pairs(result: dict) -> list[dict]:
    rows = []
    for lr in result["config"]["deep_lrs"]:
        pair = {r["rule"]: r for r in result["deep"] if r["lr"] == lr}
        old, new = pair["const:0.125"], pair["const:0.0625"]
        fail_old = (old["status"] == "diverged"
                    or old["final_val_loss"] >= DEEP_CONVERGED * old["initial_val_loss"]
                    or oscillation(old["curve"]["val_loss"]) > DEEP_OSCILLATES * max(oscillation(new["curve"]["val_loss"]), 1e-3))
        stable_new = new["status"] == "finished" and new["final_val_loss"] < DEEP_CONVERGED * new["initial_val_loss"]
        rows.append({"lr": lr, "final_1_8": old["final_val_loss"], "final_1_16": new["final_val_loss"],
                     "initial": new["initial_val_loss"],
                     "diverged_1_8": old["diverged_at"], "diverged_1_16": new["diverged_at"],
                     "oscillation_1_8": oscillation(old["curve"]["val_loss"]),
                     "oscillation_1_16": oscillation(new["curve"]["val_loss"]),
                     "1_8_fails": fail_old, "1_16_stable": stable_new})
    return rows


def judge_c09(result: dict) -> Finding:
    rows = deep_pairs(result)
    backed = [r["1_8_fails"] and r["1_16_stable"] for r in rows]
    verdict = SUPPORTED if all(backed) else (REFUTED if not any(r["1_8_fails"] for r in rows) else PARTLY)
    cfg = result["config"]
    text = "; ".join(
        f"lr {r['lr']:g}: final val loss {fmt(r['final_1_8'])} (1/8) vs {fmt(r['final_1_16'])} (1/16), "
        f"oscillation {fmt(r['oscillation_1_8'], 2)} vs {fmt(r['oscillation_1_16'], 2)}"
        + (f", 1/8 diverged at step {r['diverged_1_8']}" if r["diverged_1_8"] is not None else "")
        + (f", 1/16 diverged at step {r['diverged_1_16']}" if r["diverged_1_16"] is not None else "")
        for r in rows)
    evidence = (
        f"{cfg['deep_layers']}-layer model (d_model {cfg['d_model']}), d_head {cfg['deep_d_head']}, Shakespeare, "
        f"{cfg['deep_steps']} steps, initial loss {fmt(rows[0]['initial'] if rows else None)}: {text}. Rule: 1/8 fails "
        f"(oscillates or does not converge) if it diverges, does not end below {DEEP_CONVERGED:.0%} of its initial "
        f"loss, or its validation loss moves more than {DEEP_OSCILLATES:g}x as much as 1/16's between log points in "
        f"the second half; 1/16 is stable if it ends below {DEEP_CONVERGED:.0%} of its initial loss. Supported if 1/8 "
        f"fails and 1/16 is stable at every learning rate; refuted if 1/8 fails at none; partly otherwise. A "
        f"somewhat higher final loss for 1/8 is reported, not counted as failing to converge.")
    return Finding(verdict, evidence, {f"final_1_8_lr{r['lr']:g}": r["final_1_8"] for r in rows}
                   | {f"final_1_16_lr{r['lr']:g}": r["final_1_16"] for r in rows})


def t5_pairs(result: dict) -> list[dict]:
    rows = []
    for opt, _lr in result["config"]["t5_optimisers"]:
        pair = {r["init"]: r for r in result["t5"] if r["optimiser"] == opt}
        ref, t5 = pair["unit"], pair["t5"]
        step0 = max(abs(a["logit_std"] - b["logit_std"]) / b["logit_std"]
                    for a, b in zip(t5["attention_at"]["0"], ref["attention_at"]["0"]))
        gaps = [abs(a - b) / b for a, b in zip(t5["curve"]["val_loss"], ref["curve"]["val_loss"])
                if a is not None and b is not None]
        length_differs = len(t5["curve"]["val_loss"]) != len(ref["curve"]["val_loss"])
        gap = float("inf") if length_differs or not gaps else max(gaps)
        trained = max(abs(a["logit_std"] - b["logit_std"]) / b["logit_std"]
                      for a, b in zip(t5["attention_at"]["final"], ref["attention_at"]["final"]))
        rows.append({"optimiser": opt, "step0_logit_std_gap": step0, "max_curve_gap": gap,
                     "final_logit_std_gap": trained,
                     "final_sqrt_unit": ref["final_val_loss"], "final_none_t5": t5["final_val_loss"],
                     "equivalent": gap < EQUIVALENT_CURVE and trained < EQUIVALENT_LOGITS})
    return rows


def judge_c10(result: dict) -> Finding:
    rows = t5_pairs(result)
    equal_at_init = all(r["step0_logit_std_gap"] < EQUAL_AT_INIT for r in rows)
    if not equal_at_init:
        verdict = REFUTED
    else:
        verdict = SUPPORTED if all(r["equivalent"] for r in rows) else PARTLY
    variant = result["t5_variant_step0"]
    ratio = statistics.fmean(v / s for v, s in zip(variant["none_wq_var_inv_sqrt_dk"], variant["sqrt_unit"]))
    text = "; ".join(f"{r['optimiser']}: largest relative loss gap {fmt(r['max_curve_gap'], 2)} (final "
                     f"{fmt(r['final_none_t5'])} vs {fmt(r['final_sqrt_unit'])}), per-layer logit std after training "
                     f"up to {r['final_logit_std_gap']:.0%} apart" for r in rows)
    evidence = (
        f"Rule none + T5 init (W_q std (d_model d_k)^-1/2) against sqrt + unit init, d_head {result['config']['t5_d_head']}, "
        f"same seed: step-0 logit std differs by at most {fmt(max(r['step0_logit_std_gap'] for r in rows), 2)} "
        f"(relative; equal below {EQUAL_AT_INIT:g}). After training (equivalent if the validation curves never "
        f"differ by {EQUIVALENT_CURVE:.0%} or more and the final per-layer logit std by less than "
        f"{EQUIVALENT_LOGITS:.0%}): {text}. Folding 1/sqrt(d_k) into W_q is a reparametrisation: the forward "
        f"pass is the same, but a gradient step on the folded W_q is d_k times larger in effect under SGD and "
        f"sqrt(d_k) times under Adam, while Adafactor's step is relative to each weight's scale. The seed's other "
        f"reading (W_q variance 1/sqrt(d_k) per unit input, no scale) gives a step-0 logit std {fmt(ratio, 3)}x "
        f"that of sqrt (d_k^(1/4) = {variant['d_head'] ** 0.25:.3g}): not equivalent. Whether it is cheaper on TPUs is "
        f"not testable here. Supported if equal at step 0 and equivalent under every optimiser; partly if only at "
        f"step 0; refuted if not equal at step 0.")
    return Finding(verdict, evidence, {f"final_logit_std_gap_{r['optimiser']}": r["final_logit_std_gap"] for r in rows}
                   | {"step0_gap": max(r["step0_logit_std_gap"] for r in rows), "seed_variant_std_ratio": ratio})


def judge_c13(result: dict) -> Finding:
    ratios = [speed_ratio(result, task, d) for task in TASK_STEPS for d in result["config"]["d_heads"]]
    found = [r for r in ratios if r is not None]
    evidence_cells = "; ".join(
        f"{r['task']} d_head {r['d_head']}: sqrt {r['sqrt_steps']} steps, inv_d "
        + (f"{r['rule_steps']} steps (x{r['ratio']:.2f})" if r["reached"] else f"not within {r['ratio_at_least'] * r['sqrt_steps']:.0f} (x>={r['ratio_at_least']:.2f})")
        for r in found)
    if not found:
        return Finding(NOT_TESTABLE, "sqrt learned too little at this size to set a target; inconclusive.")
    median = statistics.median(r["ratio_at_least"] for r in found)
    low, high = SLOWER_RANGE
    verdict = SUPPORTED if low <= median <= high else (REFUTED if median < NOT_SLOWER_BELOW else PARTLY)
    evidence = (
        f"Steps to cover {TARGET_FRACTION:.0%} of sqrt's validation-loss drop, each rule at its fastest learning "
        f"rate: {evidence_cells}. Median ratio inv_d / sqrt {median:.2f} (a run that never reaches the target counts "
        f"at the run's length, a lower bound). Rule: {low:g}-{high:g}x supports '2-3x slower'; below "
        f"{NOT_SLOWER_BELOW:g}x refutes it; otherwise partly supported. This tests the size of the slowdown only; "
        f"which implementations used 1/d_k is checked by the doctor lab.")
    return Finding(verdict, evidence, {"median_steps_ratio_inv_d_over_sqrt": median})


def judge_c17(result: dict) -> Finding:
    ratios = grad_ratios(result)
    median = statistics.median(ratios) if ratios else None
    drops = median is not None and median > GRAD_DROP
    unscaled = [r for r in result["grid"] if r["rule"] == "none" and r["d_head"] >= 64]
    falls = [(r["initial_val_loss"] - (r["final_val_loss"] if r["final_val_loss"] is not None else r["initial_val_loss"]))
             / r["initial_val_loss"] for r in unscaled]
    flat = sum(f < LOSS_DOWN for f in falls)
    if median is None or not falls:
        return Finding(NOT_TESTABLE, "No matched sqrt / none runs at d_head >= 64 in this configuration.")
    verdict = SUPPORTED if drops and flat == len(falls) else (REFUTED if not drops and flat == 0 else PARTLY)
    evidence = (
        f"Gradient norm of the first layer's W_q and W_k (mean over the first half of training), sqrt over none, "
        f"matched runs at d_head >= 64: median {fmt(median)} (range {fmt(min(ratios) if ratios else None)}-"
        f"{fmt(max(ratios) if ratios else None)}, {len(ratios)} pairs; below 1 means the unscaled gradient is larger). "
        f"The unscaled runs' validation loss fell by {fmt(min(falls), 2)}-{fmt(max(falls), 2)} of its initial value "
        f"({flat} of {len(falls)} runs fell by less than {LOSS_DOWN:.0%}). Rule: supported if the gradient is more "
        f"than {GRAD_DROP:g}x smaller and no unscaled run's loss falls by {LOSS_DOWN:.0%}; refuted if neither holds; "
        f"partly otherwise.")
    return Finding(verdict, evidence, {"median_grad_ratio_sqrt_over_none": median, "min_loss_fall_none": min(falls)})


def quality_cells(result: dict, task: str, d: int) -> dict[str, dict]:
    return {c["rule"]: c for c in result["cells"] if (c["task"], c["d_head"]) == (task, d) and c["best_lr"]}


def near(mine: dict, ref: dict) -> bool:
    """Is ``mine`` at least about as good as ``ref`` (recall accuracy within 0.05, LM loss within 2%)?"""
    if mine["task"] == "recall":
        return (mine["final_val_acc"] or 0.0) >= (ref["final_val_acc"] or 0.0) - NEAR_BEST["recall"]
    return mine["final_val_loss"] <= ref["final_val_loss"] * (1 + NEAR_BEST["shakespeare"])


def near_best(result: dict, task: str, d: int, rule: str) -> bool | None:
    here = quality_cells(result, task, d)
    if rule not in here:
        return None
    return all(near(here[rule], other) for other in here.values())


def worse_than_sqrt(result: dict, task: str, d: int, rule: str) -> bool | None:
    here = quality_cells(result, task, d)
    if rule not in here or "sqrt" not in here:
        return None
    return not near(here[rule], here["sqrt"])


def judge_c18(result: dict) -> Finding:
    d_heads = result["config"]["d_heads"]
    conclusive = [(t, d) for t in TASK_STEPS for d in d_heads if progress_vs_sqrt(result, t, "sqrt", d) is not None]
    if not conclusive:
        return Finding(NOT_TESTABLE, "sqrt learned too little at this size; inconclusive.")
    sqrt_ok = [(t, d) for t, d in conclusive if near_best(result, t, d, "sqrt")]
    oversmooth = [(t, d) for t, d in conclusive
                  if (entropy_of(result, t, "inv_d", d) or 0) - (entropy_of(result, t, "sqrt", d) or 0) >= OVERSMOOTH_ENTROPY]
    const_rules = [r for r in result["config"]["rules"] if r.startswith("const:")]
    off_sqrt = [(r, t, d) for r in const_rules for t, d in conclusive
                if not math.isclose(scaling.factor(r, d), scaling.factor("sqrt", d))]
    const_progress = {(r, t, d): progress_vs_sqrt(result, t, r, d) for r, t, d in off_sqrt}
    const_fails = [key for key, p in const_progress.items() if p is not None and p < STALL_BELOW]
    parts = [len(sqrt_ok) == len(conclusive), 2 * len(oversmooth) >= len(conclusive), bool(const_fails)]
    verdict = SUPPORTED if all(parts) else (REFUTED if not any(parts) else PARTLY)
    evidence = (
        f"Each rule at its best learning rate; 'near the best' means recall accuracy within {NEAR_BEST['recall']} "
        f"of the best rule, Shakespeare loss within {NEAR_BEST['shakespeare']:.0%}. sqrt near the best in "
        f"{len(sqrt_ok)} of {len(conclusive)} (task, d_head) cells. inv_d's final normalised attention entropy is "
        f"{OVERSMOOTH_ENTROPY} or more above sqrt's (over-smoothing) in {len(oversmooth)} of {len(conclusive)} cells. "
        f"A constant factor where it is off sqrt's value, learning as a fraction of sqrt's: "
        f"{'; '.join(f'{r} on {t} d_head {d}: {fmt(p, 2)}' for (r, t, d), p in const_progress.items()) or 'none run'}. "
        f"Rule: supported if all three hold (sqrt always near the best; inv_d over-smooths in at least half the "
        f"cells; the constant stalls, below {STALL_BELOW}, somewhere), refuted if none does, partly otherwise."
        + inconclusive_note(
            {(t, d): progress_vs_sqrt(result, t, "sqrt", d) for t in TASK_STEPS for d in d_heads}))
    return Finding(verdict, evidence, {"sqrt_near_best_cells": len(sqrt_ok), "cells": len(conclusive),
                                       "inv_d_oversmooth_cells": len(oversmooth), "const_fail_cells": len(const_fails)})


def judge(result: dict) -> dict[str, Finding]:
    return {"C05": judge_c05(result), "C06": judge_c06(result), "C07": judge_c07(result), "C09": judge_c09(result),
            "C10": judge_c10(result), "C13": judge_c13(result), "C17": judge_c17(result), "C18": judge_c18(result)}


# --------------------------------------------------------------------------- tables and figures

def coord_rows(result: dict) -> list[dict]:
    """Logit std and max |logit| per layer, at init and after 100 steps (recall, first LR, first seed)."""
    cfg = result["config"]
    rows = []
    for r in result["grid"]:
        if r["task"] != "recall" or r["lr"] != cfg["recall_lrs"][0] or r["seed"] != cfg["seed"]:
            continue
        for when in ("0", "100"):
            for layer, s in enumerate(r["attention_at"].get(when, [])):
                rows.append({"rule": r["rule"], "d_head": r["d_head"], "step": int(when), "layer": layer,
                             "logit_std": s["logit_std"], "max_abs_logit": s["max_abs_logit"],
                             "entropy": s["entropy"]})
    return rows


def lr_sensitivity_rows(result: dict) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for c in result["cells"]:
        groups.setdefault((c["task"], c["rule"], c["d_head"]), []).append(c)
    return [{"task": t, "rule": r, "d_head": d, "lrs": len(cs), "best_final_loss": min(c["final_val_loss"] for c in cs),
             "lr_sensitivity": lr_sensitivity(cs)} for (t, r, d), cs in sorted(groups.items())]


def tables(result: dict) -> dict[str, list[dict]]:
    best = [{"task": c["task"], "d_head": c["d_head"], "rule": c["rule"], "best_lr": c["lr"],
             "final_val_loss": c["final_val_loss"], "final_val_acc": c["final_val_acc"],
             "vs_sqrt": progress_vs_sqrt(result, c["task"], c["rule"], c["d_head"]),
             "final_entropy": c["final_entropy"], "diverged": c["diverged"]}
            for c in result["cells"] if c["best_lr"]]
    speed = [r for r in (speed_ratio(result, t, d) for t in TASK_STEPS for d in result["config"]["d_heads"]) if r]
    return {
        "rules at their best learning rate (vs_sqrt: fraction of sqrt's learning)": best,
        "learning-rate sensitivity (Wortsman et al. 2023)": lr_sensitivity_rows(result),
        "steps to 90% of sqrt's loss drop, inv_d vs sqrt (C13)": speed,
        "8 layers, d_head 256: factor 1/8 vs 1/16 (C09)": deep_pairs(result),
        "T5 folding: none + t5 init vs sqrt + unit init (C10)": t5_pairs(result),
        "coord check: attention logits per layer vs d_head": coord_rows(result),
    }


RULE_COLORS = {"sqrt": "tab:blue", "inv_d": "tab:orange", "none": "tab:red", "const:0.125": "tab:green"}


def _save(fig, outdir: Path, name: str) -> str:
    """Add a small legend to every axis that has labelled lines, then save."""
    for ax in fig.axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    return save(fig, outdir, name)


def figure_curves(result: dict, outdir: Path) -> str:
    plt = pyplot()
    d_heads = result["config"]["d_heads"]
    fig, axes = plt.subplots(2, len(d_heads), figsize=(3.2 * len(d_heads), 5.2), squeeze=False)
    for row, task in enumerate(TASK_STEPS):
        for col, d in enumerate(d_heads):
            ax = axes[row][col]
            for rule in result["config"]["rules"]:
                cell = best_cell(result, task, rule, d)
                if cell:
                    ax.plot(cell["steps"], cell["curve"], label=f"{rule} (lr {cell['lr']:g})",
                            color=RULE_COLORS.get(rule))
            ax.set_title(f"{task}, d_head {d}", fontsize=9)
            ax.set_xlabel("step", fontsize=8)
            ax.set_ylabel("validation loss", fontsize=8)
    return _save(fig, outdir, "training_curves.png")


def figure_grads(result: dict, outdir: Path) -> str:
    plt = pyplot()
    d_heads = result["config"]["d_heads"]
    lr = result["config"]["recall_lrs"][0]
    fig, axes = plt.subplots(1, len(d_heads), figsize=(3.2 * len(d_heads), 2.8), squeeze=False)
    for col, d in enumerate(d_heads):
        ax = axes[0][col]
        for r in result["grid"]:
            if r["task"] == "recall" and r["d_head"] == d and r["lr"] == lr and r["seed"] == result["config"]["seed"] \
                    and r["rule"] in ("sqrt", "none"):
                ax.semilogy(r["curve"]["step"], [max(g, 1e-12) for g in r["grad_qk_layer0"]], label=r["rule"],
                            color=RULE_COLORS[r["rule"]])
        ax.set_title(f"recall, d_head {d}, lr {lr:g}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("layer-0 |grad W_q, W_k|", fontsize=8)
    return _save(fig, outdir, "training_c17_grads.png")


def figure_deep(result: dict, outdir: Path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for r in result["deep"]:
        ax.plot(r["curve"]["step"], r["curve"]["val_loss"], label=f"{r['rule']} lr {r['lr']:g}")
    ax.set_title(f"{result['config']['deep_layers']} layers, d_head {result['config']['deep_d_head']}", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss")
    return _save(fig, outdir, "training_c09_deep.png")


def figure_t5(result: dict, outdir: Path) -> str:
    plt = pyplot()
    opts = [o for o, _ in result["config"]["t5_optimisers"]]
    fig, axes = plt.subplots(1, len(opts), figsize=(3.2 * len(opts), 2.8), squeeze=False)
    for col, opt in enumerate(opts):
        ax = axes[0][col]
        for r in result["t5"]:
            if r["optimiser"] == opt:
                ax.plot(r["curve"]["step"], r["curve"]["val_loss"], label=f"{r['rule']} + {r['init']} init",
                        linestyle="-" if r["init"] == "unit" else "--")
        ax.set_title(f"{opt}, lr {r['lr']:g}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("validation loss", fontsize=8)
    return _save(fig, outdir, "training_c10_t5.png")


def figure_coord(result: dict, outdir: Path) -> str:
    plt = pyplot()
    rows = coord_rows(result)
    fig, axes = plt.subplots(2, 2, figsize=(7, 5.5), squeeze=False)
    for col, step in enumerate((0, 100)):
        for row, metric in enumerate(("logit_std", "max_abs_logit")):
            ax = axes[row][col]
            for rule in result["config"]["rules"]:
                layers = sorted({r["layer"] for r in rows if r["rule"] == rule})
                for layer in layers:
                    pts = sorted((r["d_head"], r[metric]) for r in rows
                                 if r["rule"] == rule and r["layer"] == layer and r["step"] == step)
                    if pts:
                        ax.loglog(*zip(*pts), marker="o", color=RULE_COLORS.get(rule),
                                  linestyle="-" if layer == 0 else ":", label=f"{rule} L{layer}")
            ax.set_title(f"{metric} at step {step}", fontsize=9)
            ax.set_xlabel("d_head", fontsize=8)
            ax.minorticks_off()
            ax.set_xticks(result["config"]["d_heads"], [str(d) for d in result["config"]["d_heads"]])
    return _save(fig, outdir, "training_coord_check.png")


def figure_lr(result: dict, outdir: Path) -> str:
    plt = pyplot()
    d_heads = result["config"]["d_heads"]
    fig, axes = plt.subplots(2, len(d_heads), figsize=(3.2 * len(d_heads), 5.2), squeeze=False)
    for row, task in enumerate(TASK_STEPS):
        for col, d in enumerate(d_heads):
            ax = axes[row][col]
            for rule in result["config"]["rules"]:
                pts = sorted((c["lr"], c["final_val_loss"]) for c in result["cells"]
                             if (c["task"], c["rule"], c["d_head"]) == (task, rule, d))
                if pts:
                    ax.semilogx(*zip(*pts), marker="o", label=rule, color=RULE_COLORS.get(rule))
            ax.set_title(f"{task}, d_head {d}", fontsize=9)
            ax.set_xlabel("learning rate", fontsize=8)
            ax.set_ylabel("final validation loss", fontsize=8)
    return _save(fig, outdir, "training_lr_sweep.png")


def figures(result: dict, outdir) -> dict[str, list[str]]:
    outdir = Path(outdir)
    curves, grads, lrs = figure_curves(result, outdir), figure_grads(result, outdir), figure_lr(result, outdir)
    return {"C05": [curves], "C06": [curves, grads], "C07": [curves], "C13": [curves], "C17": [grads],
            "C18": [curves, lrs], "C09": [figure_deep(result, outdir)], "C10": [figure_t5(result, outdir)],
            "training": [figure_coord(result, outdir)]}
