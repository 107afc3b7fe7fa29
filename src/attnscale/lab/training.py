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

from .. import scaling, stats
from ..attention import capture
from ..claims import NOT_TESTABLE, PARTLY, REFUTED, SUPPORTED, Finding
from ..models import IGNORE_INDEX, ModelConfig, Transformer
from ..models.tasks import check_task, make_task

VERSION = 1
OPTIMISERS = ("adamw", "sgd", "adafactor")

# Thresholds of the verdict rules (quoted in the evidence texts).
STALL_BELOW = 0.2        # progress below this: the rule stalls (learns < 20% of what sqrt learns)
TRAINS_FROM = 0.8        # progress from this: the rule trains about as well as sqrt
MIN_REFERENCE_GAIN = {"recall": 0.2, "shakespeare": 0.5}  # sqrt must learn this much (accuracy over chance / nats)
NEAR_BEST = {"recall": 0.05, "shakespeare": 0.02}  # recall: accuracy within 0.05; LM: loss within 2%
TARGET_FRACTION = 0.9    # steps to target: steps to cover 90% of sqrt's loss drop
SLOWER_RANGE = (1.5, 4.0)  # C13: "2-3x slower", with slack
NOT_SLOWER_BELOW = 1.25
GRAD_DROP = 10.0         # C17: "drops by more than 10x"
DEEP_WORSE = 1.05        # C09: final loss 5% above the 1/16 run
DEEP_OSCILLATES = 2.0    # C09: mean |step-to-step change| of the val loss in the second half, vs 1/16
EQUAL_AT_INIT = 1e-3     # C10: relative difference of the step-0 logit std
EQUIVALENT_CURVE = 0.02  # C10: largest relative gap between the two validation curves
OVERSMOOTH_ENTROPY = 0.05  # C18: inv_d's final attention entropy above sqrt's by this much

VASWANI_2017 = (
    "Vaswani et al. (2017), section 3.2.1, report no ablation of the scale: they note that dot-product and "
    "additive attention do about equally well for small d_k while additive attention is ahead for larger d_k "
    "without scaling (a comparison taken from Britz et al. 2017), say they suspect that large dot products push "
    "the softmax into regions of tiny gradients, and scale by 1/sqrt(d_k) to counteract it; footnote 4 supports "
    "the suspicion with the variance argument (independent components of mean 0 and variance 1 give a dot "
    "product of variance d_k). Their Table 3 varies d_k, always with the scale; no run without it is shown."
)


@dataclass(frozen=True)
class RunSpec:
    """One training run."""

    task: str = "recall"
    rule: str = "sqrt"
    init: str = "unit"
    d_head: int = 16
    n_layers: int = 2
    lr: float = 3e-3
    optimiser: str = "adamw"
    steps: int = 300
    seed: int = 0
    d_model: int = 32
    n_heads: int = 1
    batch_size: int = 64
    log_every: int = 10
    warmup: int = 20
    weight_decay: float = 0.0
    n_pairs: int = 4      # recall
    n_queries: int = 4    # recall
    context: int = 32     # shakespeare
    device: str = "cpu"

    def __post_init__(self):
        check_task(self.task)
        scaling.parse(self.rule)
        scaling.check_init(self.init)
        if self.optimiser not in OPTIMISERS:
            raise ValueError(f"unknown optimiser {self.optimiser!r}; accepted: {', '.join(OPTIMISERS)}")
        for name in ("d_head", "n_layers", "steps", "d_model", "n_heads", "batch_size", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if self.warmup < 0 or self.weight_decay < 0:
            raise ValueError(f"warmup and weight_decay must be >= 0, got {self.warmup!r}, {self.weight_decay!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {self.device!r}; accepted: cpu, cuda")


# --------------------------------------------------------------------------- one run

def build_task(spec: RunSpec):
    if spec.task == "recall":
        return make_task("recall", n_pairs=spec.n_pairs, n_queries=spec.n_queries, val_size=256)
    return make_task("shakespeare", context=spec.context, val_size=128)


def build_model(spec: RunSpec, task) -> Transformer:
    config = ModelConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, d_model=spec.d_model,
                         n_layers=spec.n_layers, n_heads=spec.n_heads, d_head=spec.d_head, scale=spec.rule,
                         init=spec.init)
    return Transformer(config, seed=spec.seed).to(spec.device)


def build_optimiser(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if spec.optimiser == "adamw":
        return torch.optim.AdamW(params, lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    if spec.optimiser == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=0.9, weight_decay=spec.weight_decay)
    # Adafactor's lr caps its relative step size: updates scale with each parameter's RMS.
    return torch.optim.Adafactor(params, lr=spec.lr, weight_decay=spec.weight_decay)


def lr_factor(step: int, spec: RunSpec) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < spec.warmup:
        return (step + 1) / spec.warmup
    done = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))


@torch.no_grad()
def attention_stats(model: Transformer, x: torch.Tensor) -> list[dict]:
    """Per layer: normalised entropy, max probability, max |logit|, logit std (per row, over
    the keys a causal query sees; the first row, with one key, left out)."""
    with capture(model) as seen:
        model(x)
    rows = []
    for name in model.observation_points():
        seen_here = seen[name]
        logits, probs = seen_here.logits[..., 1:, :], seen_here.probs[..., 1:, :]
        valid = ~torch.isnan(logits)
        moments = stats.logit_moments(logits.nan_to_num(0.0), valid)
        rows.append({
            "entropy": float(stats.normalized_entropy(probs, valid).mean()),
            "max_prob": float(stats.max_prob(probs, valid).mean()),
            "max_abs_logit": float(moments["max_abs"].max()),
            "logit_std": float(moments["std"].mean()),
        })
    return rows


@torch.no_grad()
def evaluate(model: Transformer, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float | None]:
    logits, loss = model(x, y)
    scored = y != IGNORE_INDEX
    accuracy = float((logits.argmax(-1)[scored] == y[scored]).float().mean())
    return float(loss), accuracy


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def train(spec: RunSpec, return_model: bool = False):
    """Train one run; returns its result dict (and the model if ``return_model``).

    Logged at step 0, every ``log_every`` steps and at the end, before that step's update:
    the minibatch loss, validation loss and accuracy, per-layer gradient norms of W_q, W_k,
    W_v, W_o, and per-layer attention statistics on 64 validation sequences.
    """
    task = build_task(spec)
    model = build_model(spec, task)
    optimiser = build_optimiser(spec, model)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: lr_factor(step, spec))
    batches = torch.Generator().manual_seed(spec.seed + 1_000_003)
    x_val, y_val = (t.to(spec.device) for t in task.validation())
    log = {"step": [], "train_loss": [], "val_loss": [], "val_acc": [],
           "grad": {w: [] for w in ("W_q", "W_k", "W_v", "W_o")}, "attention": []}
    status, diverged_at = "finished", None
    for step in range(spec.steps + 1):
        x, y = (t.to(spec.device) for t in task.batch(spec.batch_size, batches))
        model.train()
        _, loss = model(x, y)
        if not torch.isfinite(loss):
            status, diverged_at = "diverged", step
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if step % spec.log_every == 0 or step == spec.steps:
            model.eval()
            val_loss, val_acc = evaluate(model, x_val, y_val)
            log["step"].append(step)
            log["train_loss"].append(float(loss.detach()))
            log["val_loss"].append(finite_or_none(val_loss))
            log["val_acc"].append(val_acc if task.has_accuracy else None)
            for w in log["grad"]:
                log["grad"][w].append([finite_or_none(float(layer[w].grad.norm())) for layer in model.attention_weights()])
            log["attention"].append(attention_stats(model, x_val[:64]))
        if step == spec.steps:
            break
        optimiser.step()
        schedule.step()
    finished_losses = [v for v in log["val_loss"] if v is not None]
    result = {
        "status": status,
        "diverged_at": diverged_at,
        "log": log,
        "initial_val_loss": log["val_loss"][0] if log["val_loss"] else None,
        "final_val_loss": None if status == "diverged" else log["val_loss"][-1],
        "best_val_loss": min(finished_losses) if finished_losses else None,
        "final_val_acc": None if (status == "diverged" or not task.has_accuracy) else log["val_acc"][-1],
        "chance_acc": task.chance_accuracy if task.has_accuracy else None,
    }
    return (result, model) if return_model else result


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
    d_model: int = 32
    n_layers: int = 2
    log_every: int = 10
    deep_layers: int = 8
    deep_d_head: int = 256
    deep_lrs: tuple[float, ...] = (3e-3,)
    deep_steps: int = 150
    t5_d_head: int = 64
    t5_optimisers: tuple[tuple[str, float], ...] = (("adamw", 3e-3), ("sgd", 0.1), ("adafactor", 1e-2))
    workers: int = 2


PRESETS = {
    "quick": Config(),
    "full": Config(seeds=2, recall_lrs=(1e-3, 3e-3, 1e-2, 3e-2), recall_steps=600, lm_lrs=(1e-3, 3e-3, 1e-2),
                   lm_steps=500, deep_lrs=(1e-3, 3e-3, 1e-2), deep_steps=400),
}

TASK_STEPS = {"recall": "recall_steps", "shakespeare": "lm_steps"}
TASK_LRS = {"recall": "recall_lrs", "shakespeare": "lm_lrs"}


def base_spec(config: Config, task: str, **fields) -> RunSpec:
    defaults = dict(task=task, steps=getattr(config, TASK_STEPS[task]), d_model=config.d_model,
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
                      lr=lr, steps=config.deep_steps, seed=config.seed)
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


def run(config: Config, progress=None) -> dict:
    from ..runs import execute

    groups = {"grid": grid_specs(config), "deep": deep_specs(config), "t5": t5_specs(config)}
    everything = [spec for specs in groups.values() for spec in specs]
    report = (lambda done, total, msg: progress(done / max(1, total), msg)) if progress else None
    results = execute(everything, workers=config.workers, progress=report)
    from ..runs import run_key

    out = {"config": dataclasses.asdict(config)}
    for name, specs in groups.items():
        out[name] = [summarise(spec, results[run_key(spec)]) for spec in specs]
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
