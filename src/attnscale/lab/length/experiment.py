"""The length lab's experiment: how attention fades as the context grows, and what a length term does.

Two halves (see :class:`Config`):

* at initialisation, no training: one relevant key (the needle) at logit margin ``margin`` above
  n - 1 keys whose logits are iid N(0, ``logit_std``^2) (the unit-variance premise gives std 1 under
  1/sqrt(d_k)).  Under a factor m(n) on every logit its weight is, for large n,

      w(n) = e^(m delta) / (e^(m delta) + (n - 1) e^(m^2 sigma^2 / 2))

  (the sum of n - 1 lognormals by its mean), checked against a Monte Carlo of ``draws`` rows per
  n.  The same rows give the normalised entropy H / ln n of attention with no needle under three
  laws for m: constant, c sqrt(2 ln n) and ln n / ln L.
* trained: a one-layer Transformer with no position embedding (``positions``: "none", and "rope" in
  the full preset) trained on needles in a haystack (:class:`attnscale.models.tasks.NeedleTask`) at
  ``base_length`` tokens, then run at 1x..16x that length.  Every rule at its own best learning rate
  (the median accuracy at the training length over the base seeds; the grid widens by one step past
  an edge, up to ``lr_widen`` times); then each rule's best cell is filled to ``best_seeds`` seeds,
  a count fixed before any result is seen (adding seeds while a rate is undecided and reading a
  fixed-count Wilson interval would overstate its confidence).  A rule whose length term
  is exactly 1 at every length up to ``base_length`` (log-n with L >= the base length) trains
  exactly as the rule without it, so it is evaluated on that rule's trained weights
  (:func:`trained_as`; the row says so), not trained again.  So that log-n is also read on a model
  that learned with it, the presets train a second log-n rule, ln n / ln 16, acting from 16 keys on
  (1.27 at the training length), and beside it the slower law sqrt(ln n / ln 16) (L3).

Nothing here writes a file or prints.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import torch

from ... import checks, intervals, scaling
from ...errors import UserError
from ...models import IGNORE_INDEX, ModelConfig, Transformer
from ...models.tasks import NeedleTask
from ...threads import torch_threads
from ...train.batched import BatchedTransformer
from ...train.optim import BatchedOptimiser
from ...train.group import Batches
from ...train.single import ADAMW_BETAS, batch_stream
from ...train.spec import split_evenly

# 4: the Monte Carlo at initialisation drawn a block of rows at a time (the same draws; the needle's mean weight
# moves in its last bit, summed over its rows in another order); 5: each best cell filled to a fixed count
# of seeds (was: seeds added while its rate was undecided); 6: trained on the loss of the query rows computed alone
# (Transformer.loss_at: the forward pass's loss and gradients up to float rounding; the quick lab 84 -> 55-73 CPU-s; a model's
# accuracies move by up to 0.05 from rounding carried through 300 steps); 7: the models of a phase trained together,
# a batch at a time (attnscale.train.batched: the same training up to float rounding, which 300 steps carry into
# the accuracies)
VERSION = 7
DECIDED_RATE = 0.5    # a cell's fade rate decides once its Wilson interval lies clear of this
FADES_BELOW = 0.9     # a seed's needle fades at a length when its weight there is below this share of its weight at 1x
DROPS_BY = 0.05       # a seed's accuracy drops at a length when it falls this much below its accuracy at 1x
LEARNED_ACC = 0.5     # a seed counts only if it learned the task at 1x (chance is 1 / n_values)
LR_STEP = 2.0
LAWS = ("constant", "sqrt_log", "log")
FIG1_LOGITS = (3.0, -2.0)  # Nakanishi 2025, Fig. 1: one logit +3 among logits -2 (margin 5)
BATCH_RUNS = 12      # models trained together at most: one layer of 32 x 34 tokens a model; on 2 cores, one thread,
# 8 of them took 1.97 ms a model-step, 16 took 1.75, one alone 5.2 (the plain model)


@dataclass(frozen=True)
class Config:
    seed: int = 0
    device: str = "cpu"
    # at initialisation
    ns: tuple[int, ...] = (16, 64, 256, 1024, 4096, 16384, 65536)
    margin: float = 3.0          # the needle's logit margin over the mean of the others, at m = 1
    logit_std: float = 1.0       # the others' logit std at m = 1 (unit-variance premise under 1/sqrt(d_k))
    draws: int = 200             # Monte Carlo rows per n
    law_coef: float = 0.5        # c of the sqrt-log law m = c sqrt(2 ln n)
    # trained
    # log-n twice: log_34 n is 1 up to the training length (Qwen-1's form), so it runs on the weights sqrt
    # learned; log_16 n acts from 16 keys on (1.27 at 34 keys, the same growth beyond), so a model is trained
    # with it, beside one trained with the slower sqrt(log_16 n) (L3: which law a needle needs).  Base 2 was
    # tried first: 5.1 times the logits from the first step, and most seeds never learned the task
    rules: tuple[str, ...] = ("sqrt", "sqrt+logn:34", "sqrt+ssmax", "sqrt+logn:16", "sqrt+sqrtlogn:16")
    positions: tuple[str, ...] = ("none",)
    # the rules also trained with each position scheme beyond "none" (the others are read without one): those
    # L4's RoPE part reads
    rules_with_positions: tuple[str, ...] = ("sqrt", "sqrt+logn:34")
    base_length: int = 34
    multiples: tuple[int, ...] = (1, 2, 4, 8, 16)
    n_needles: int = 4
    n_keys: int = 8
    n_values: int = 4
    d_model: int = 32
    d_head: int = 32
    batch: int = 32
    val_size: int = 256
    steps: int = 300
    lrs: tuple[float, ...] = (3e-3, 6e-3)   # each rule at the better of two rates
    lr_widen: int = 0
    seeds: int = 3
    best_seeds: int = 8          # seeds in each rule's best cell, fixed before looking (the base seeds among them)

    def __post_init__(self):
        checks.fields(self, ints=("draws", "base_length", "n_needles", "n_keys", "n_values", "d_model", "d_head",
                                  "steps", "batch", "val_size", "seeds", "best_seeds"),
                      non_negative=("lr_widen",), int_tuples=("ns", "multiples"), float_tuples=("lrs",),
                      floats=("margin", "logit_std", "law_coef"))
        for rule in self.rules:
            scaling.parse(rule)
        outside = [rule for rule in self.rules_with_positions if rule not in self.rules]
        if outside and any(pos != "none" for pos in self.positions):
            raise UserError(f"rules_with_positions must name rules of rules {self.rules!r}; not among them: {outside!r}")
        if "sqrt" not in self.rules:
            raise UserError(f"rules must include the reference 'sqrt', got {self.rules!r}")
        for pos in self.positions:
            checks.one_of("position", pos, ("none", "rope"))
        if self.multiples[0] != 1 or list(self.multiples) != sorted(set(self.multiples)):
            raise UserError(f"multiples must start at 1 and rise, got {self.multiples!r}")
        if self.base_length <= self.n_needles:
            raise UserError(f"base_length must exceed n_needles={self.n_needles}, got {self.base_length}")
        if self.best_seeds < self.seeds:
            raise UserError(f"best_seeds must be >= seeds ({self.seeds}), got {self.best_seeds}")
        if min(self.ns) < 2:
            raise UserError(f"ns must be >= 2, got {self.ns!r}")


PRESETS = {
    "quick": Config(),
    # the quick preset's trainings (the same runs at a base seed), RoPE models of sqrt and log_34 n beside them
    # (L4's RoPE part), and more Monte Carlo rows
    "full": Config(positions=("none", "rope"), draws=2000),
}


# --------------------------------------------------------------------------- at initialisation

def law_multiplier(law: str, n: int, coef: float, base: int) -> float:
    """m(n) under a law: ``constant`` 1, ``sqrt_log`` c sqrt(2 ln n), ``log`` ln n / ln base."""
    if law == "constant":
        return 1.0
    if law == "sqrt_log":
        return coef * math.sqrt(2 * math.log(n))
    return math.log(n) / math.log(base)


def needle_weight_closed(n: int, multiplier: float, margin: float, logit_std: float) -> float:
    """The needle's weight for large n: e^(m delta) / (e^(m delta) + (n - 1) e^(m^2 sigma^2 / 2))."""
    log_needle = multiplier * margin
    log_rest = math.log(n - 1) + (multiplier * logit_std) ** 2 / 2
    return 1.0 / (1.0 + math.exp(log_rest - log_needle))


def equal_keys_weight(n: int, multiplier: float) -> float:
    """The needle's weight among n - 1 equal keys, exactly: 1 / (1 + (n - 1) e^(-m D)), D = 5 (Fig. 1)."""
    margin = FIG1_LOGITS[0] - FIG1_LOGITS[1]
    return 1.0 / (1.0 + math.exp(math.log(n - 1) - multiplier * margin))


def rule_multiplier(rule: str, n: int) -> float:
    """m(n) of a rule's length term at its initial value (1 without one)."""
    term = scaling.parse(rule).length
    return 1.0 if term is None else float(term.multiplier(torch.tensor(float(n), dtype=torch.float64)))


CHUNK_VALUES = 2**23  # logits drawn and softmaxed at a time (64 MB in float64): 2000 rows at n = 65,536 took 8 GB whole


def per_row(config: Config, width: int, generator: torch.Generator, multipliers: list[float], statistic) -> list:
    """``statistic(logits, m)`` of each of ``config.draws`` rows of ``width`` iid logits (std ``logit_std``), for each
    multiplier m, drawn a block of rows at a time: blocks of a multiple of 16 rows draw the very numbers one draw of
    all the rows would (torch fills normals 16 at a time), so the rows are the same however many fit in memory."""
    block = max(16, CHUNK_VALUES // width // 16 * 16)
    found = [[] for _ in multipliers]
    for start in range(0, config.draws, block):
        logits = torch.randn(min(block, config.draws - start), width, generator=generator,
                             dtype=torch.float64) * config.logit_std
        for values, m in zip(found, multipliers):
            values.append(statistic(logits, m))
    return [torch.cat(values) for values in found]


def needle_weight(others: torch.Tensor, margin: float, m: float) -> torch.Tensor:
    """Per row, the attention weight of a needle of logit ``margin`` beside the row's other logits, all times m."""
    needle = torch.full((len(others), 1), margin, dtype=torch.float64)
    return torch.softmax(torch.cat([needle, others], dim=1) * m, dim=1)[:, 0].clone()  # not a view holding every weight


def normalised_entropy(logits: torch.Tensor, n: int) -> torch.Tensor:
    probs = torch.softmax(logits, dim=1)
    return -(probs * torch.log(probs.clamp_min(1e-300))).sum(dim=1) / math.log(n)


def fading_at_init(config: Config) -> list[dict]:
    """One row per (rule or law, n): the needle's weight among equal keys (Fig. 1, exact), among keys of
    iid logits (closed form and Monte Carlo mean with its SE), and the normalised entropy of attention
    over n iid logits with no needle (Monte Carlo mean, SE)."""
    generator = torch.Generator().manual_seed(config.seed)
    subjects = [("rule", rule, lambda n, r=rule: rule_multiplier(r, n)) for rule in config.rules]
    subjects += [("law", law, lambda n, w=law: law_multiplier(w, n, config.law_coef, config.base_length)) for law in LAWS]
    rows = []
    for n in config.ns:
        multipliers = [multiplier_of(n) for _, _, multiplier_of in subjects]
        weights = per_row(config, n - 1, generator, multipliers,
                          lambda others, m: needle_weight(others, config.margin, m))
        entropies = per_row(config, n, generator, multipliers, lambda plain, m: normalised_entropy(plain * m, n))
        for (kind, name, _), m, weight, entropy in zip(subjects, multipliers, weights, entropies):
            rows.append({"kind": kind, "name": name, "n": n, "multiplier": m,
                         "weight_closed": needle_weight_closed(n, m, config.margin, config.logit_std),
                         "weight_equal": equal_keys_weight(n, m),
                         "weight_mc": float(weight.mean()), "weight_se": float(weight.std() / math.sqrt(config.draws)),
                         "entropy_mc": float(entropy.mean()), "entropy_se": float(entropy.std() / math.sqrt(config.draws))})
    return rows


# --------------------------------------------------------------------------- trained

def task_at(config: Config, length: int) -> NeedleTask:
    return NeedleTask(haystack=length - config.n_needles, n_needles=config.n_needles, n_keys=config.n_keys,
                      n_values=config.n_values, val_size=config.val_size)


def build(config: Config, rule: str, pos: str, seed: int) -> Transformer:
    task = task_at(config, config.base_length)
    model_config = ModelConfig(vocab_size=task.vocab_size, seq_len=config.base_length, d_model=config.d_model,
                               n_layers=1, n_heads=1, d_head=config.d_head, scale=rule, pos=pos)
    return Transformer(model_config, seed=seed).to(config.device)


def trained_as(rule: str, length: int) -> str:
    """The rule whose training at ``length`` tokens is this rule's: the rule without its length term
    when that term has no parameter and is exactly 1 for every key count up to ``length`` (so every
    logit, gradient and step is the same), else ``rule`` itself."""
    term = scaling.parse(rule).length
    if term is None or term.learnable or not bool((term.multiplier(torch.arange(1, length + 1)) == 1.0).all()):
        return rule
    return rule.partition("+")[0]


def warmup(step: int) -> float:
    """The rate's share at ``step``: a 20-step linear warmup, then constant."""
    return min(1.0, (step + 1) / 20)


def train_one(config: Config, rule: str, pos: str, lr: float, seed: int) -> Transformer:
    """AdamW at a constant rate after a 20-step warmup, ``steps`` batches at the base length.  Only the
    query rows carry a loss, so the loss is computed on them alone (:meth:`Transformer.loss_at`: keys
    and values at every position, queries, MLP and head at the rows).  The plain way, one model;
    the lab trains its models together (:func:`train_together`), which this is the reference for."""
    task = task_at(config, config.base_length)
    model = build(config, rule, pos, seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, betas=ADAMW_BETAS, weight_decay=0.0)
    batches = batch_stream(seed)
    query_rows = task.loss_rows
    for step in range(config.steps):
        for group in optimiser.param_groups:
            group["lr"] = lr * warmup(step)
        x, y = (t.to(config.device) for t in task.batch(config.batch, batches))
        loss = model.loss_at(x, y, query_rows)  # the forward pass's loss, computed on the scored rows alone
        if not torch.isfinite(loss):
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    return model


def train_together(config: Config, jobs: list[tuple[str, str, float, int]]) -> list[Transformer]:
    """Train the models ``jobs`` [(rule, pos, lr, seed)] of one position scheme as :func:`train_one` trains
    each, all in one batch (:class:`attnscale.train.batched.BatchedTransformer`: one forward and backward a
    step for all, each model with its own weights, batches, rate and AdamW state; a model whose loss
    turns NaN/inf stops where :func:`train_one` stops).  Returns the trained models, in ``jobs``' order."""
    task = task_at(config, config.base_length)
    models = [build(config, rule, pos, seed) for rule, pos, _, seed in jobs]
    engine = BatchedTransformer(models)
    optimiser = BatchedOptimiser(list(engine.parameters()), [("adamw", 0, len(jobs))], weight_decay=0.0)
    rates = torch.tensor([lr for _, _, lr, _ in jobs], dtype=torch.float64)
    batches = Batches(task, [seed for _, _, _, seed in jobs], config.batch, config.device)  # as train_one draws
    active = torch.ones(len(jobs), dtype=torch.bool, device=config.device)
    for step in range(config.steps):
        x, y = batches.next()
        _, losses = engine(x, y, rows=task.loss_rows)
        active &= torch.isfinite(losses.detach())
        if not bool(active.any()):
            break
        for param in engine.parameters():
            param.grad = None
        torch.where(active, losses, torch.zeros_like(losses)).sum().backward()
        optimiser.step((rates * warmup(step)).to(device=config.device, dtype=losses.dtype), active)
    return [engine.unstack(k, model) for k, model in enumerate(models)]


def train_all(config: Config, keys: list[tuple[str, str, float, int]], trained: dict, progress=None) -> None:
    """Train each (rule, pos, lr, seed) of ``keys`` not yet in ``trained`` and put its weights there, the
    models of a position scheme :data:`BATCH_RUNS` at a time (:func:`train_together`)."""
    todo = list(dict.fromkeys(key for key in keys if key not in trained))
    with torch_threads(1):
        for pos in dict.fromkeys(key[1] for key in todo):
            for batch in split_evenly([key for key in todo if key[1] == pos], BATCH_RUNS):
                if progress:
                    progress(f"training {len(batch)} models together ({pos} positions)")
                for key, model in zip(batch, train_together(config, batch)):
                    trained[key] = model.state_dict()


def needle_mask(x: torch.Tensor, config: Config) -> torch.Tensor:
    """(B, Q, T) True at the needle each query asks for."""
    haystack = x.shape[1] - config.n_needles
    hay_keys = torch.div(x[:, :haystack], config.n_values, rounding_mode="floor")
    asked = x[:, haystack:] - config.n_keys * config.n_values
    found = hay_keys.unsqueeze(1) == asked.unsqueeze(2)
    return torch.cat([found, torch.zeros(*found.shape[:2], config.n_needles, dtype=torch.bool, device=x.device)], dim=2)


@torch.no_grad()
def evaluate_at(model: Transformer, config: Config, length: int, chunk: int = 64) -> dict:
    """Accuracy over the validation queries at ``length`` tokens, and the mean attention weight the
    queries give their needle (the layer's single head, from its input as the forward pass saw it)."""
    x_all, y_all = task_at(config, length).validation()
    query_rows = slice(-config.n_needles, None)  # the only scored positions
    correct, weights = 0, []
    for start in range(0, x_all.shape[0], chunk):
        x, y = x_all[start:start + chunk].to(config.device), y_all[start:start + chunk, query_rows].to(config.device)
        logits, probs = model.logits_at(x, query_rows)  # the layer's single head
        scored = y != IGNORE_INDEX
        correct += int((logits.argmax(-1)[scored] == y[scored]).sum())
        weights.append((probs[:, 0] * needle_mask(x, config)).sum(dim=-1).flatten())
    queries = x_all.shape[0] * config.n_needles
    return {"accuracy": correct / queries, "needle_weight": float(torch.cat(weights).mean()), "queries": queries}


def one_run(config: Config, rule: str, pos: str, lr: float, seed: int, trained: dict | None = None) -> dict:
    """Train (or take from ``trained``, {(rule, pos, lr, seed): state_dict}, the weights of the rule
    it trains as) and evaluate at every multiple of the base length."""
    trained = {} if trained is None else trained
    source = trained_as(rule, config.base_length)
    with torch_threads(1):
        key = (source, pos, lr, seed)
        if key not in trained:
            trained[key] = train_one(config, source, pos, lr, seed).state_dict()
        model = build(config, rule, pos, seed)
        model.load_state_dict(trained[key])
        model.eval()
        at = {m: evaluate_at(model, config, m * config.base_length) for m in config.multiples}
    row = {"rule": rule, "pos": pos, "lr": lr, "seed": seed, "trained_as": source,
           "accuracy": [at[m]["accuracy"] for m in config.multiples],
           "needle_weight": [at[m]["needle_weight"] for m in config.multiples], "queries": at[1]["queries"]}
    attn = model.blocks[0].attn
    if hasattr(attn, "ssmax_s"):
        row["ssmax_s"] = float(attn.ssmax_s.detach().mean())
    return row


def learned(run: dict) -> bool:
    return run["accuracy"][0] >= LEARNED_ACC


def fades(run: dict, index: int = -1, scale: float = 1.0) -> bool:
    """The needle's weight at ``multiples[index]`` has lost more than 1 - FADES_BELOW (times ``scale``,
    the threshold moved) of its weight at 1x."""
    return run["needle_weight"][index] < (1 - (1 - FADES_BELOW) * scale) * run["needle_weight"][0]


def drops(run: dict, index: int = -1, scale: float = 1.0) -> bool:
    """The accuracy at ``multiples[index]`` is more than DROPS_BY (times ``scale``) below the accuracy at 1x."""
    return run["accuracy"][index] < run["accuracy"][0] - DROPS_BY * scale


def rate(runs: list[dict], event) -> tuple[int, int, tuple[float, float]]:
    """Among seeds that learned the task: how many show ``event`` (a run -> bool), of how many, and the
    Wilson interval of the rate."""
    counted = [r for r in runs if learned(r)]
    k = sum(bool(event(r)) for r in counted)
    return k, len(counted), intervals.wilson(k, len(counted))


def best_lr(runs: list[dict], rule: str, pos: str, seeds: range) -> tuple[float, str | None]:
    """The rate with the highest median accuracy at 1x over the base seeds, and which edge it sits at."""
    grid = sorted({r["lr"] for r in runs if r["rule"] == rule and r["pos"] == pos})
    medians = {lr: statistics.median(r["accuracy"][0] for r in runs
                                     if r["rule"] == rule and r["pos"] == pos and r["lr"] == lr and r["seed"] in seeds)
               for lr in grid}
    best = max(grid, key=lambda lr: (medians[lr], -lr))
    if len(grid) == 1:
        return best, "both"
    return best, "low" if best == grid[0] else "high" if best == grid[-1] else None


def run(config: Config, progress=None) -> dict:
    base = range(config.seed, config.seed + config.seeds)
    cells = [(pos, rule) for pos in config.positions for rule in config.rules
             if pos == "none" or rule in config.rules_with_positions]
    runs: list[dict] = []
    done = set()
    trained: dict = {}

    def train(jobs):
        train_all(config, [(trained_as(rule, config.base_length), pos, lr, seed) for pos, rule, lr, seed in jobs
                           if (pos, rule, lr, seed) not in done], trained,
                  progress and (lambda message: progress(min(0.99, len(runs) / planned), message)))
        for pos, rule, lr, seed in jobs:
            if (pos, rule, lr, seed) not in done:
                done.add((pos, rule, lr, seed))
                runs.append(one_run(config, rule, pos, lr, seed, trained))
            if progress:
                progress(min(0.99, len(runs) / planned), f"{pos} {rule} lr {lr:g} seed {seed}")

    init_rows = fading_at_init(config)
    planned = len(cells) * len(config.lrs) * config.seeds
    train([(pos, rule, lr, s) for pos, rule in cells for lr in config.lrs for s in base])
    best = {}
    for pos, rule in cells:
        widened = 0
        while True:
            lr, edge = best_lr(runs, rule, pos, base)
            if edge is None or widened >= config.lr_widen:
                break
            grid = sorted({r["lr"] for r in runs if r["rule"] == rule and r["pos"] == pos})
            steps = {"low": [grid[0] / LR_STEP], "high": [grid[-1] * LR_STEP], "both": [grid[0] / LR_STEP, grid[-1] * LR_STEP]}
            new = [float(f"{v:.3g}") for v in steps[edge]]
            planned += len(new) * config.seeds
            train([(pos, rule, v, s) for v in new for s in base])
            widened += 1
        best[(pos, rule)] = {"lr": lr, "at_edge": edge}
    added = [(pos, rule, info["lr"], s) for (pos, rule), info in best.items()
             for s in range(config.seed + config.seeds, config.seed + config.best_seeds)]
    planned += len(added)
    train(added)
    if progress:
        progress(1.0, "done")
    return {"config": dataclasses.asdict(config), "init": init_rows, "models": runs, "runs": len(runs), "runs_reused": 0,
            "trainings": len(trained),
            "best": [{"pos": pos, "rule": rule, **info} for (pos, rule), info in best.items()],
            "lengths": [m * config.base_length for m in config.multiples]}
