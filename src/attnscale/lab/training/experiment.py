"""The training lab's experiment: small Transformers trained under sqrt(d_k), d_k, no scaling
and a constant, with seeds, real baselines and learning-rate grids that widen until every
rule's best rate on its base seeds is inside what was tried.

The seed (section 6) proposes it: train the same model dividing QK^T by sqrt(d_k), by d_k
and not at all, and compare.  What runs (see :class:`Config`):

* the grid: rules ``sqrt``, ``inv_d``, ``none``, ``const:0.125`` (the source's "divide by 8",
  right for d_k = 64 only) x d_head x a learning-rate grid x seeds, on two tasks:
  multi-query associative recall (attention must find one position among many) and
  character-level Shakespeare.  Q/K/V use the ``unit`` init (q and k components of variance
  1, the source's assumption).  On recall each rule starts from sqrt's learning-rate grid
  moved by whole x3 steps toward where its factor suggests (:func:`start_shift`); on
  Shakespeare every rule starts from one grid (see :func:`initial_lrs`).  While a rule's best
  rate (by the median over seeds) sits at an edge of its grid, the grid grows by one x3 step
  on that side, up to ``lr_widen`` times.
* deep (full preset): an 8-layer model at d_head 256 on recall, factor 1/8 vs 1/16 -> C09.  Each
  factor's grid (on ``deep_seeds`` base seeds) widens like the others', and each factor's best
  cell is then filled to ``deep_best_seeds`` seeds, a count fixed before any result is seen (a
  seed escapes the copy plateau or not: the solve rate is what is read, and its Wilson interval
  is that of a fixed count only if the count was not chosen by looking at it).
* t5: rule ``none`` + ``t5`` init (the factor folded into W_q) vs ``sqrt`` + ``unit`` init,
  same seeds, under AdamW, SGD and Adafactor, on recall -> C10.
* sqrt's reference rate in each cell is chosen on the base seeds and then again, among that rate
  and the rates its base seeds cannot tell from it, on as many seeds for each as the cell's fixed
  count (:func:`confirm_reference`): every comparison divides by it.
* a fixed rule whose factor equals sqrt's at a d_head (``const:0.125`` at d_head 64) is the
  same model: its cell reuses sqrt's runs instead of training them twice.
* baselines: recall's copy baseline (a model that copies a random value token of its
  context), computed exactly; the unigram and bigram entropies of the training text.

Every run goes through :func:`attnscale.runs.execute` in groups trained as one program.
Nothing here writes a file or prints.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from dataclasses import dataclass

import torch

from ... import checks, intervals, scaling, train as engine
from ...errors import UserError
from ...models.tasks import RecallTask, load_corpus
from ...runs import KeptPool, execute, run_key
from ...threads import torch_threads
from ...train import RunSpec, attention_stats, build_model, build_task

VERSION = 11
TASKS = ("recall", "shakespeare")
SOLVED_ACC = 0.9          # recall: validation accuracy that counts as solved
STALL_BELOW = 0.2         # progress below this: the seed stalls (learned under a fifth of what sqrt learned)
TRAINS_FROM = 0.8         # progress from this: the seed trains about as well as sqrt
DECIDED_RATE = 0.5        # a cell's stall rate decides once its Wilson interval lies clear of this
LR_STEP = 3.0             # the grid widens by this factor per step
COORD_STEP = 100          # the coord check's "after training" step


def stored_key() -> str:
    """What besides the config a stored result depends on: the training engine's VERSION (a result
    trained by another engine is not reused, as its runs are not)."""
    return f"engine-{engine.VERSION}"


# (base seeds, seeds of a deciding cell) of each kind of cell: recall, recall at d_head >= large_d_head, Shakespeare,
# C09's 8-layer cells; each count is fixed before any result is seen
SEED_SCHEDULES = (("seeds", "seed_cap"), ("seeds_large", "seed_cap_large"), ("lm_seeds", "lm_seed_cap"),
                  ("deep_seeds", "deep_best_seeds"))


@dataclass(frozen=True)
class Config:
    """The quick preset's values are the defaults: recall sized so that sqrt solves it (validation
    accuracy >= 0.9) in most seeds at every d_head within ``recall_steps``."""

    seed: int = 0
    device: str = "cpu"
    tasks: tuple[str, ...] = ("recall",)
    rules: tuple[str, ...] = ("sqrt", "inv_d", "none", "const:0.125")
    d_heads: tuple[int, ...] = (16, 64)
    lm_d_heads: tuple[int, ...] = (16, 64)
    seeds: int = 3
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    log_every: int = 25
    lr_widen: int = 3
    recall_pairs: int = 3
    recall_values: int = 16
    recall_steps: int = 300
    recall_batch: int = 64
    recall_lrs: tuple[float, ...] = (1e-3, 3e-3, 9e-3)
    lm_context: int = 32
    lm_steps: int = 600
    lm_batch: int = 32
    lm_lrs: tuple[float, ...] = (9e-3, 2.7e-2, 8.1e-2)
    deep: bool = False
    deep_layers: int = 8
    deep_d_head: int = 256
    deep_lrs: tuple[float, ...] = (3e-3,)
    deep_steps: int = 200
    # the deep cells' base seeds (each factor's best rate is chosen on them); a deep run costs about 6 of a
    # 2-layer d_head 256 run, so the rates are compared on fewer seeds than the grid's and the best cell alone
    # gets more
    deep_seeds: int = 3
    deep_best_seeds: int = 10   # seeds in each factor's best deep cell, fixed before looking (the base seeds among them)
    t5_recall_d_head: int = 16
    t5_tasks: tuple[str, ...] = ("recall",)
    t5_lm_d_head: int = 64
    t5_optimisers: tuple[tuple[str, float], ...] = (("adamw", 3e-3), ("adafactor", 1e-2))
    # recall at a d_head where unscaled logits start far out (std sqrt(256) = 16): the rules that decide
    # "no scaling stalls" only, on fixed grids (no widening; sqrt, the reference, at one rate), to keep
    # the quick budget
    decisive_d_heads: tuple[int, ...] = (256,)
    decisive_rules: tuple[str, ...] = ("sqrt", "none")
    decisive_lrs: tuple[float, ...] = (1e-3, 3e-3)
    decisive_sqrt_lrs: tuple[float, ...] = (1e-3,)
    # the seeds of every deciding cell (each rule at the rates the verdicts read, sqrt's reference cells),
    # a count fixed before any result is seen, so that a stall rate's Wilson interval is that of a fixed
    # design (fewer where runs cost more: a d_head 256 run costs about 3 of d_head 64's).  A cell whose 5
    # or 4 seeds all agree has its interval clear of DECIDED_RATE: Wilson [0.57, 1] and [0.51, 1].  5, not 6:
    # judged on the stored runs of quick base seeds 0-9 with each deciding cell cut to 5, every label the
    # same at all ten, as with 6 (docs/benchmarks.md); the 10-13 runs saved pay for sqrt's confirmation
    seed_cap: int = 5
    seed_cap_large: int = 4
    large_d_head: int = 256
    # Shakespeare's progress is a loss drop, continuous and far from the stall threshold in every cell
    # measured (0.83-1.1 of sqrt's at seed 0, full preset, 10 seeds a cell): its deciding cells get this many
    lm_seed_cap: int = 8
    # Shakespeare's base seeds (each rule's best rate is chosen on them; a deciding cell is then filled to
    # lm_seed_cap, as a recall cell is to seed_cap)
    lm_seeds: int = 3
    # recall's base seeds at d_head >= large_d_head (a run there costs about 3 of d_head 64's)
    seeds_large: int = 3

    def __post_init__(self):
        checks.fields(self, ints=("seeds", "d_model", "n_heads", "n_layers", "log_every", "recall_pairs", "recall_values",
                                  "recall_steps", "recall_batch", "lm_context", "lm_steps", "lm_batch",
                                  "deep_layers", "deep_d_head", "deep_steps", "deep_seeds", "deep_best_seeds", "lm_seeds", "seeds_large", "t5_recall_d_head", "t5_lm_d_head",
                                  "seed_cap", "seed_cap_large", "large_d_head", "lm_seed_cap"),
                      non_negative=("lr_widen",), int_tuples=("d_heads", "lm_d_heads"),
                      float_tuples=("recall_lrs", "lm_lrs", "deep_lrs"))
        if self.decisive_d_heads:
            checks.fields(self, int_tuples=("decisive_d_heads",), float_tuples=("decisive_lrs", "decisive_sqrt_lrs"))
        for rule in self.decisive_rules:
            checks.one_of("decisive rule", rule, self.rules)
        if self.seed_cap < self.seeds:
            raise UserError(f"seed_cap must be >= seeds ({self.seeds}), got {self.seed_cap}")
        for base, cap in SEED_SCHEDULES[1:]:
            if not 1 <= getattr(self, base) <= getattr(self, cap):
                raise UserError(f"{base} must be from 1 to {cap} ({getattr(self, cap)}), got {getattr(self, base)}")
        for task in self.tasks + self.t5_tasks:
            checks.one_of("task", task, TASKS)
        if not isinstance(self.deep, bool):
            raise UserError(f"deep must be True or False, got {self.deep!r}")
        if not self.tasks or "recall" not in self.tasks:
            raise UserError(f"tasks must include 'recall' (the deep and t5 runs use it), got {self.tasks!r}")
        if "sqrt" not in self.rules:
            raise UserError(f"rules must include the reference 'sqrt', got {self.rules!r}")


PRESETS = {
    "quick": Config(),
    # every deciding cell gets a fixed count (10 seeds on recall, 8 at d_head 256, 5 on Shakespeare); C09's
    # best deep cells a fixed 8 a factor (a deep run costs about 28 CPU-s here)
    "full": Config(tasks=("recall", "shakespeare"), d_heads=(16, 64, 256), seeds=5, recall_steps=400,
                   deep=True, deep_steps=400, deep_lrs=(1e-3, 3e-3), t5_recall_d_head=256, deep_seeds=3, deep_best_seeds=8,
                   decisive_d_heads=(), seed_cap=10, seeds_large=3, seed_cap_large=8, lm_seeds=3, lm_seed_cap=5,
                   t5_optimisers=(("adamw", 3e-3), ("sgd", 0.1), ("adafactor", 1e-2))),
}


# --------------------------------------------------------------------------- specs

def base_spec(config: Config, task: str, **fields) -> RunSpec:
    if task == "recall":
        defaults = dict(steps=config.recall_steps, batch_size=config.recall_batch, n_pairs=config.recall_pairs,
                        n_queries=config.recall_pairs, n_keys=config.recall_values, n_values=config.recall_values)
    else:
        defaults = dict(steps=config.lm_steps, batch_size=config.lm_batch, context=config.lm_context)
    defaults.update(task=task, d_model=config.d_model, n_heads=config.n_heads, n_layers=config.n_layers,
                    log_every=config.log_every, device=config.device)
    defaults.update(fields)
    return RunSpec(**defaults)


def tasks_of(result: dict) -> tuple[str, ...]:
    return tuple(result["config"]["tasks"])


def task_d_heads(result: dict, task: str) -> tuple[int, ...]:
    """The d_heads a task's grid was trained at (recall: with the decisive ones, for their rules only)."""
    cfg = result["config"]
    if task != "recall":
        return tuple(cfg["lm_d_heads"])
    return tuple(cfg["d_heads"]) + tuple(d for d in cfg.get("decisive_d_heads", ()) if d not in cfg["d_heads"])


def seeds_of(config: Config, task: str, d_head: int) -> range:
    """A cell's base seeds: every cell of its task and d_head gets them, and each rule's best learning rate is
    chosen on them (recall's at d_head >= large_d_head, where runs cost most, ``seeds_large``; the T5 runs take
    recall's on either task)."""
    if task != "recall":
        count = config.lm_seeds
    else:
        count = config.seeds_large if d_head >= config.large_d_head else config.seeds
    return range(config.seed, config.seed + count)


def deep_seeds_of(seed: int, deep_seeds: int) -> range:
    """The deep cells' base seeds (from the config's seed and deep_seeds): each factor's best rate is chosen on them."""
    return range(seed, seed + deep_seeds)


def seed_cap(config: Config, task: str, d_head: int) -> int:
    if task != "recall":
        return config.lm_seed_cap
    return config.seed_cap_large if d_head >= config.large_d_head else config.seed_cap


def trained_rule(rule: str, d_head: int) -> str:
    """The rule a cell's runs train under: a fixed rule with sqrt's factor at this d_head
    (``const:0.125`` at 64) is the sqrt model, so its cell shares sqrt's runs."""
    parsed = scaling.parse(rule)
    if parsed.kind == "fixed" and parsed.factor(d_head) == scaling.factor("sqrt", d_head):
        return "sqrt"
    return rule


def cell_specs(config: Config, task: str, rule: str, d_head: int, lr: float,
               seeds: range | None = None) -> list[tuple[str, RunSpec]]:
    """One cell's runs, one per seed (by default the base seeds), each labelled with the cell's rule."""
    trained = trained_rule(rule, d_head)
    return [(rule, base_spec(config, task, rule=trained, d_head=d_head, lr=lr, seed=s))
            for s in (seeds_of(config, task, d_head) if seeds is None else seeds)]


def lr_value(lr: float) -> float:
    """A grid point, rounded to 3 significant digits so that the same rate reached two ways
    (a start grid, a widening step) is the same run."""
    return float(f"{lr:.3g}")


def start_shift(rule: str, d_head: int) -> int:
    """How many x3 steps a rule's starting grid sits from sqrt's: half the log3 of how much
    smaller its factor is than sqrt's, rounded (halfway, in log, between keeping sqrt's rates
    and fully compensating the factor, since only the attention logits see the factor).
    A guess that saves runs, nothing more: the grid widens until each rule's best rate is
    inside it, so where it starts does not change which rate wins."""
    parsed = scaling.parse(rule)
    if parsed.kind != "fixed":
        return 0
    return round(0.5 * math.log(scaling.factor("sqrt", d_head) / parsed.factor(d_head), LR_STEP))


def initial_lrs(config: Config, task: str, rule: str = "sqrt", d_head: int = 64) -> tuple[float, ...]:
    """A rule's starting grid.  Recall: sqrt's (``recall_lrs``) moved by :func:`start_shift`.
    Shakespeare: ``lm_lrs`` for every rule, since there the factor barely moves the optimum
    (measured with seed 0 and 600 steps: every rule's best rate at d_head 16 and 64 was 9e-3
    or 2.7e-2, ``none``'s included, which the recall shift would have moved a step lower)."""
    if task != "recall":
        return tuple(lr_value(lr) for lr in config.lm_lrs)
    return tuple(lr_value(lr * LR_STEP ** start_shift(rule, d_head)) for lr in config.recall_lrs)


def d_heads_of(config: Config, task: str) -> tuple[int, ...]:
    return config.d_heads if task == "recall" else config.lm_d_heads


def decisive_cells(config: Config) -> list[tuple[str, str, int]]:
    """(task, rule, d_head) of the decisive point: recall at ``decisive_d_heads`` not already on the grid."""
    if "recall" not in config.tasks:
        return []
    return [("recall", rule, d) for d in config.decisive_d_heads if d not in config.d_heads
            for rule in config.decisive_rules]


def start_grid(config: Config, task: str, rule: str, d_head: int) -> tuple[float, ...]:
    """A cell's first learning rates: the decisive point's fixed grid, or :func:`initial_lrs`."""
    if d_head not in d_heads_of(config, task):
        return tuple(lr_value(lr) for lr in (config.decisive_sqrt_lrs if rule == "sqrt" else config.decisive_lrs))
    return initial_lrs(config, task, rule, d_head)


def grid_specs(config: Config) -> list[tuple[str, RunSpec]]:
    """The first round: every rule x d_head on its starting grid, then the decisive point, base seeds."""
    cells = [(task, rule, d) for task in config.tasks for rule in config.rules for d in d_heads_of(config, task)]
    return [spec for task, rule, d in cells + decisive_cells(config) for lr in start_grid(config, task, rule, d)
            for spec in cell_specs(config, task, rule, d, lr)]


DEEP_FACTORS = ("const:0.125", "const:0.0625")  # 1/8 (right for d_k = 64) and 1/16 (= 1/sqrt(256))


def deep_spec(config: Config, rule: str, lr: float, seed: int) -> RunSpec:
    return base_spec(config, "recall", rule=rule, d_head=config.deep_d_head, n_layers=config.deep_layers, lr=lr,
                     steps=config.deep_steps, seed=seed)


def deep_specs(config: Config) -> list[RunSpec]:
    """C09's first round: both factors at d_head 256, 8 layers, on recall, over ``deep_lrs`` and ``deep_seeds``."""
    if not config.deep:
        return []
    return [deep_spec(config, rule, lr_value(lr), s) for rule in DEEP_FACTORS for lr in config.deep_lrs
            for s in deep_seeds_of(config.seed, config.deep_seeds)]


def edge_steps(info: dict) -> list[float]:
    """The next x3 step on the side of the grid where its best rate sits (both sides for a grid of one)."""
    low, high = info["grid"][0] / LR_STEP, info["grid"][-1] * LR_STEP
    return {"low": [low], "high": [high], "both": [low, high]}[info["at_edge"]]


def deep_widen(config: Config, best: dict[tuple, dict], widened: dict[tuple, int]) -> list[RunSpec]:
    """A factor whose best rate sits at an edge of its grid gets one x3 step on that side (up to
    ``lr_widen`` times), as every grid cell does."""
    new = []
    for (_, rule, _), info in best.items():
        if info["at_edge"] is None or widened.get(rule, 0) >= config.lr_widen:
            continue
        widened[rule] = widened.get(rule, 0) + 1
        new += [deep_spec(config, rule, lr_value(lr), s) for lr in edge_steps(info)
                for s in deep_seeds_of(config.seed, config.deep_seeds)]
    return new


def deep_extend(config: Config, best: dict[tuple, dict], runs: list[dict]) -> list[RunSpec]:
    """Seeds for each factor's best cell up to ``deep_best_seeds``, a count fixed before any result is seen:
    whether a seed escapes the plateau is close to a coin flip at this depth, so the solve rate is read
    with the Wilson interval of a fixed design (adding seeds while the rate was undecided, as this lab
    did before, made that interval overstate its confidence)."""
    new = []
    for (_, rule, _), info in best.items():
        members = [r for r in runs if r["rule"] == rule and r["lr"] == info["lr"]]
        start = config.seed + len(members)
        new += [deep_spec(config, rule, info["lr"], s) for s in range(start, config.seed + config.deep_best_seeds)]
    return new


def t5_specs(config: Config) -> list[RunSpec]:
    """C10: none + t5 init vs sqrt + unit init, same seeds, per optimiser and task."""
    return [base_spec(config, task, rule=rule, init=init, d_head=d_head, optimiser=opt, lr=lr, seed=s)
            for task, d_head in (("recall", config.t5_recall_d_head), ("shakespeare", config.t5_lm_d_head))
            if task in config.t5_tasks for opt, lr in config.t5_optimisers for rule, init in (("sqrt", "unit"), ("none", "t5"))
            for s in seeds_of(config, "recall", d_head)]


# --------------------------------------------------------------------------- baselines

def copy_baseline(n_pairs: int, n_values: int) -> float:
    """Accuracy of copying a uniformly random value token of the context: the queried pair's
    value, or another pair's value that happens to be equal (each with probability 1/n_values)."""
    return (1 + (n_pairs - 1) / n_values) / n_pairs


def text_entropies() -> dict[str, float]:
    """Unigram entropy and bigram (next character given the last) entropy of the training
    text, in nats, from its own character counts."""
    ids = load_corpus()["train"].long()
    vocab = int(ids.max()) + 1
    unigram = torch.bincount(ids, minlength=vocab).double()
    pairs = torch.bincount(ids[:-1] * vocab + ids[1:], minlength=vocab * vocab).double().view(vocab, vocab)

    def entropy(counts):
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log()).sum())

    return {"unigram": entropy(unigram), "bigram": entropy(pairs.flatten()) - entropy(pairs.sum(dim=1))}


def baselines(config: Config) -> dict:
    task = RecallTask(n_pairs=config.recall_pairs, n_queries=config.recall_pairs, n_keys=config.recall_values,
                      n_values=config.recall_values)
    return {"recall": {"copy": copy_baseline(config.recall_pairs, config.recall_values),
                       "chance": task.chance_accuracy},
            "shakespeare": text_entropies()}


# --------------------------------------------------------------------------- one run, summarised

def steps_to_solve(log: dict) -> int | None:
    return next((step for step, acc in zip(log["step"], log["val_acc"]) if acc is not None and acc >= SOLVED_ACC),
                None)


def summarise(spec: RunSpec, result: dict, rule: str | None = None) -> dict:
    """A run reduced to what the verdicts, tables and figures read (``rule``: the cell's rule,
    when the run is shared with another rule's cell)."""
    log = result["log"]
    steps = log["step"]
    half = max(1, len(steps) // 2)
    qk = [math.hypot(q[0] or 0.0, k[0] or 0.0) for q, k in zip(log["grad"]["W_q"], log["grad"]["W_k"])]
    at = {str(s): layers for s, layers in zip(steps, log["attention"]) if s in (0, COORD_STEP)}
    at["final"] = log["attention"][-1] if log["attention"] else []
    return {
        **{k: getattr(spec, k) for k in ("task", "rule", "init", "d_head", "n_layers", "lr", "optimiser", "steps",
                                         "seed")},
        **({"rule": rule} if rule is not None else {}),
        "status": result["status"], "diverged_at": result["diverged_at"],
        "initial_val_loss": result["initial_val_loss"], "final_val_loss": result["final_val_loss"],
        "final_val_acc": result["final_val_acc"],
        "steps_to_solve": steps_to_solve(log) if spec.task == "recall" else None,
        "curve": {"step": steps, "val_loss": log["val_loss"], "val_acc": log["val_acc"]},
        "grad_qk_layer0": qk,
        "grad_qk_layer0_early": sum(qk[:half]) / half if qk else None,
        "attention_at": at,
    }


# --------------------------------------------------------------------------- seeds folded

def spread(values: list) -> dict:
    """Median, min and max of the values that exist (None when none does), and how many."""
    found = [v for v in values if v is not None]
    if not found:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(found), "min": min(found), "max": max(found), "n": len(found)}


def final_loss(run: dict) -> float:
    """The final validation loss; a diverged run keeps its initial loss."""
    return run["final_val_loss"] if run["final_val_loss"] is not None else run["initial_val_loss"]


def accuracy(run: dict) -> float:
    """The final validation accuracy; a diverged run scores 0."""
    return run["final_val_acc"] if run["final_val_acc"] is not None else 0.0


def solved(run: dict) -> bool:
    return accuracy(run) >= SOLVED_ACC


def score(run: dict) -> float | None:
    """The number a cell is ranked by: recall accuracy, LM final loss."""
    return accuracy(run) if run["task"] == "recall" else final_loss(run)


def fold_cells(runs: list[dict]) -> list[dict]:
    """One row per (task, rule, d_head, lr): the seeds' scores and their median [min, max]."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["task"], r["rule"], r["d_head"], r["lr"]), []).append(r)
    rows = []
    for (task, rule, d_head, lr), members in sorted(groups.items()):
        members.sort(key=lambda r: r["seed"])
        rows.append({
            "task": task, "rule": rule, "d_head": d_head, "lr": lr, "seeds": [r["seed"] for r in members],
            "score": spread([score(r) for r in members]),
            "scores": [score(r) for r in members],
            "final_val_loss": spread([r["final_val_loss"] for r in members]),
            "final_val_acc": spread([r["final_val_acc"] for r in members]) if task == "recall" else None,
            "steps_to_solve": [r["steps_to_solve"] for r in members] if task == "recall" else None,
            "diverged": sum(r["status"] == "diverged" for r in members),
        })
    return rows


def mean_score(cell: dict) -> float:
    found = [v for v in cell["scores"] if v is not None]
    return statistics.fmean(found) if found else math.nan


def rank(cell: dict) -> tuple:
    """Sort key, best first: recall by mean accuracy over seeds, then median loss; LM by mean loss.
    The mean, not the median: where seeds split between two outcomes (solved, stuck at the copy
    baseline), the median of three jumps from one outcome to the other with a single seed."""
    loss = cell["final_val_loss"]["median"]
    loss = math.inf if loss is None else loss
    if cell["task"] == "recall":
        return (-mean_score(cell), loss)
    return (mean_score(cell), 0.0)


def score_interval(cell: dict) -> tuple[float, float]:
    """Bootstrap 95% interval of a cell's mean score over its seeds."""
    return intervals.bootstrap([v for v in cell["scores"] if v is not None] or [math.nan], statistics.fmean)


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] >= b[0] and a[0] <= b[1]


def best_lrs(cells: list[dict]) -> dict[tuple, dict]:
    """{(task, rule, d_head): {"lr", "grid", "at_edge", "near_best"}}: the learning rate with the best
    mean score; ``at_edge`` is "low", "high", "both" (a grid of one) or None; ``near_best``: the other
    rates whose bootstrap interval of the mean score overlaps the best one's (indistinguishable)."""
    by_key: dict[tuple, list[dict]] = {}
    for c in cells:
        by_key.setdefault((c["task"], c["rule"], c["d_head"]), []).append(c)
    out = {}
    for key, members in by_key.items():
        grid = sorted(c["lr"] for c in members)
        top = min(members, key=rank)
        best = top["lr"]
        low, high = score_interval(top)
        near = sorted(c["lr"] for c in members if c is not top and overlaps(score_interval(c), (low, high)))
        out[key] = {"lr": best, "grid": grid, "at_edge": edge_of(best, grid), "near_best": near}
    return out


def edge_of(lr: float, grid: list[float]) -> str | None:
    """Where ``lr`` sits in the sorted ``grid``: "low", "high", "both" (a grid of one) or None (inside)."""
    return "both" if len(grid) == 1 else "low" if lr == grid[0] else "high" if lr == grid[-1] else None


def widen(config: Config, best: dict[tuple, dict], widened: dict[tuple, int]) -> list[tuple[str, RunSpec]]:
    """New specs for every (task, rule, d_head) whose best LR is at an edge of its grid (the decisive
    point keeps its fixed grid)."""
    new = []
    for (task, rule, d_head), info in best.items():
        if info["at_edge"] is None or widened.get((task, rule, d_head), 0) >= config.lr_widen:
            continue
        if d_head not in d_heads_of(config, task):  # the decisive point: a fixed grid
            continue
        widened[(task, rule, d_head)] = widened.get((task, rule, d_head), 0) + 1
        for lr in edge_steps(info):
            new.extend(cell_specs(config, task, rule, d_head, lr_value(lr)))
    return new


def fill_reference_rates(config: Config, best: dict[tuple, dict]) -> list[tuple[str, RunSpec]]:
    """New specs for every (task, rule, d_head) whose grid lacks sqrt's best LR there: each rule
    is also read at sqrt's rate (the source's claims swap the factor in a working recipe)."""
    new = []
    for (task, rule, d_head), info in best.items():
        reference = best.get((task, "sqrt", d_head))
        if rule != "sqrt" and reference is not None and reference["lr"] not in info["grid"]:
            new.extend(cell_specs(config, task, rule, d_head, reference["lr"]))
    return new


# --------------------------------------------------------------------------- seed outcomes

def gain(run: dict, baselines: dict) -> float:
    """What a run learned: recall accuracy above the copy baseline; LM drop of the validation loss."""
    if run["task"] == "recall":
        return accuracy(run) - baselines["recall"]["copy"]
    return run["initial_val_loss"] - final_loss(run)


def progress(run: dict, ref_runs: list[dict], baselines: dict) -> float:
    """A run's gain as a fraction of the reference's (median over the reference's seeds)."""
    ref_gain = statistics.median(gain(r, baselines) for r in ref_runs)
    return gain(run, baselines) / ref_gain if ref_gain > 0 else math.nan


def classify(p: float) -> str:
    return "stalls" if p < STALL_BELOW else ("trains" if p >= TRAINS_FROM else "worse")


# rules the verdicts also read at sqrt's best rate, from this d_head on: inv_d (C05, C13) and no
# scaling (C06, C17, which look at d_head >= 64)
READ_AT_SQRT_LR = {"inv_d": 1, "none": 64}


def deciding_cells(config: Config, best: dict[tuple, dict]) -> list[tuple[str, str, int, float]]:
    """The cells the verdicts read: each rule at its own best rate (sqrt's own is the reference
    every comparison divides by), and the rules of READ_AT_SQRT_LR at sqrt's."""
    out = []
    for (task, rule, d), info in sorted(best.items()):
        out.append((task, rule, d, info["lr"]))
        ref = best.get((task, "sqrt", d))
        if (d >= READ_AT_SQRT_LR.get(rule, math.inf) and ref is not None and ref["lr"] != info["lr"]):
            out.append((task, rule, d, ref["lr"]))
    return out


def reference_candidates(best: dict[tuple, dict]) -> dict[tuple, list[float]]:
    """{(task, d_head): rates}: sqrt's rate chosen on the base seeds and the rates those seeds cannot
    tell from it (``near_best``).  The reference is what every comparison divides by and what decides
    whether a cell votes at all, so it is chosen again among these on every seed of its cell."""
    return {(task, d): sorted({info["lr"], *info["near_best"]}) for (task, rule, d), info in best.items()
            if rule == "sqrt"}


def fill_candidates(config: Config, candidates: dict[tuple, list[float]], runs: list[dict]) -> list[tuple[str, RunSpec]]:
    """Seeds for each of sqrt's candidate rates up to its cell's fixed count (a rate alone needs none)."""
    return fill_to_count(config, [(task, "sqrt", d, lr) for (task, d), rates in candidates.items() if len(rates) > 1
                                  for lr in rates], runs)


def confirm_reference(best: dict[tuple, dict], candidates: dict[tuple, list[float]],
                      runs: list[dict]) -> dict[tuple, dict]:
    """``best`` with sqrt's rate in each cell chosen among its candidates on all their seeds (as many for
    each, a count fixed before looking), by :func:`best_lrs` as on the base seeds; ``confirmed_among``
    names the candidates where there were several, ``near_best`` the candidates those seeds cannot
    tell from the confirmed rate.  (A candidate is a rate of sqrt's grid, so the grid does not widen
    again: a confirmed rate may sit at its edge, as ``at_edge`` says.)"""
    out = dict(best)
    for (task, d), rates in candidates.items():
        if len(rates) < 2:
            continue
        cells = [c for c in fold_cells([r for r in runs if (r["task"], r["rule"], r["d_head"]) == (task, "sqrt", d)])
                 if c["lr"] in rates]
        top = best_lrs(cells)[(task, "sqrt", d)]
        info = best[(task, "sqrt", d)]
        out[(task, "sqrt", d)] = {**info, "lr": top["lr"], "at_edge": edge_of(top["lr"], info["grid"]),
                                  "near_best": top["near_best"], "chosen_on_base": info["lr"],
                                  "confirmed_among": rates,
                                  "confirmed_seeds": len(next(c for c in cells if c["lr"] == top["lr"])["seeds"])}
    return out


def with_reference(chosen: dict[tuple, dict], confirmed: dict[tuple, dict]) -> dict[tuple, dict]:
    """Every rule's rate as ``chosen`` on the base seeds, sqrt's as ``confirmed``."""
    return {**chosen, **{key: info for key, info in confirmed.items() if key[1] == "sqrt"}}


def fill_to_count(config: Config, cells: list[tuple[str, str, int, float]], runs: list[dict]) -> list[tuple[str, RunSpec]]:
    """Seeds for each (task, rule, d_head, lr) cell from the runs it has up to its fixed count (:func:`seed_cap`)."""
    have = collections.Counter((r["task"], r["rule"], r["d_head"], r["lr"]) for r in runs)
    return [spec for task, rule, d, lr in cells
            for spec in cell_specs(config, task, rule, d, lr, range(config.seed + have[(task, rule, d, lr)],
                                                                   config.seed + seed_cap(config, task, d)))]


def fill_seeds(config: Config, best: dict[tuple, dict], runs: list[dict]) -> list[tuple[str, RunSpec]]:
    """Seeds for every deciding cell up to its fixed count, whatever its seeds show: sqrt's reference
    cells (each comparison divides by their median gain) and every cell a verdict reads.  The count is
    chosen before any result is seen, so a stall rate's Wilson interval is that of a fixed design
    (adding seeds while a rate was undecided, as this lab did before, is a sequential design, and made
    that interval overstate its confidence).  A cell read at sqrt's rate that its grid lacks (sqrt's
    confirmed rate off that rule's grid) gets all its seeds here; a cell without sqrt's reference
    beside it votes in no verdict and gets none."""
    return fill_to_count(config, [(task, rule, d, lr) for task, rule, d, lr in deciding_cells(config, best)
                                  if (task, "sqrt", d) in best], runs)


# --------------------------------------------------------------------------- the lab

def run(config: Config, progress=None, *, store=None, workers: int | None = None, batch_runs: int = 24) -> dict:
    """Every run of the lab, trained in groups of at most ``batch_runs`` by ``workers`` processes
    (started once for all the rounds).

    ``store``: a :class:`attnscale.runs.RunStore` that keeps every finished group (a killed
    lab resumes where it stopped), or None to keep runs in memory.  Execution options do not
    change the numbers, so they are arguments here, not fields of the config.
    """
    with KeptPool(workers) as pool:
        return _run(config, progress, store, workers, batch_runs, pool)


def _run(config: Config, progress, store, workers: int | None, batch_runs: int, pool: KeptPool) -> dict:
    rounds = 1 + config.lr_widen

    def train_round(specs: list[RunSpec], number: int, what: str) -> dict[str, dict]:
        def report(done, total, message):
            if progress:  # the grid (0), the widening rounds (1 to rounds), the fill and what sqrt's confirmed
                # rate adds (rounds + 1 to rounds + 3)
                progress(min(1.0, (number + done / max(1, total)) / (rounds + 4)), f"{what}: {message}")
        return execute(specs, store, workers=workers, batch_runs=batch_runs, progress=report, pool=pool)

    stored_before = store.keys() if store is not None else set()
    grid = grid_specs(config)
    deep, t5 = deep_specs(config), t5_specs(config)
    results = train_round([s for _, s in grid] + deep + t5, 0,
                          "grid, deep and t5 runs" if config.deep else "grid and t5 runs")
    widened: dict[tuple, int] = {}
    deep_widened: dict[str, int] = {}

    def summaries() -> list[dict]:
        return [summarise(s, results[run_key(s)], rule) for rule, s in grid]

    def deep_summaries() -> list[dict]:
        return [summarise(s, results[run_key(s)]) for s in deep]

    task_baselines = baselines(config)

    def grid_base(row: dict) -> bool:
        return row["seed"] in seeds_of(config, row["task"], row["d_head"])

    def deep_base(row: dict) -> bool:
        return row["seed"] in deep_seeds_of(config.seed, config.deep_seeds)

    def chosen_lrs(rows: list[dict], base=grid_base) -> dict[tuple, dict]:  # on base seeds (sqrt's is then confirmed)
        return best_lrs(fold_cells([r for r in rows if base(r)]))

    def unseen(specs: list[RunSpec]) -> list[RunSpec]:
        keys = {run_key(s) for s in deep}
        return list({run_key(s): s for s in specs if run_key(s) not in keys}.values())

    for number in range(1, rounds + 1):  # one more round than widenings: sqrt's rate may move in the last
        best = chosen_lrs(summaries())
        new = widen(config, best, widened) if number < rounds else []
        have = {(rule, run_key(s)) for rule, s in grid}
        # a widening step can land on sqrt's rate: such a cell is added once
        new = list({(rule, run_key(s)): (rule, s) for rule, s in new + fill_reference_rates(config, best)
                    if (rule, run_key(s)) not in have}.values())
        new_deep = unseen(deep_widen(config, chosen_lrs(deep_summaries(), deep_base), deep_widened)) if number < rounds else []
        if not new and not new_deep:
            break
        results.update(train_round([s for _, s in new] + new_deep, number, f"widening the LR grids (round {number})"))
        grid += new
        deep += new_deep
    best = chosen_lrs(summaries())
    candidates = reference_candidates(best)
    deep_best = chosen_lrs(deep_summaries(), deep_base)

    def missing(specs: list[tuple[str, RunSpec]]) -> list[tuple[str, RunSpec]]:
        have = {(rule, run_key(s)) for rule, s in grid}
        return list({(rule, run_key(s)): (rule, s) for rule, s in specs if (rule, run_key(s)) not in have}.values())

    # the deciding cells filled to their fixed counts, and sqrt's candidate rates beside them
    new = missing(fill_seeds(config, best, summaries()) + fill_candidates(config, candidates, summaries()))
    new_deep = unseen(deep_extend(config, deep_best, deep_summaries()))
    if new or new_deep:
        results.update(train_round([s for _, s in new] + new_deep, rounds + 1, "filling the deciding cells' seeds"))
        grid += new
        deep += new_deep
    confirmed = confirm_reference(best, candidates, summaries())
    # where sqrt's rate moved off a rule's grid: that rule's base seeds at it (every rule is trained at sqrt's
    # rate), its own rate chosen again with it, then the cells read at the rates now chosen filled
    new = missing(fill_reference_rates(config, confirmed))
    if new:
        results.update(train_round([s for _, s in new], rounds + 2, "every rule at sqrt's confirmed rate"))
        grid += new
    best = with_reference(chosen_lrs(summaries()), confirmed)
    new = missing(fill_seeds(config, best, summaries()))
    if new:
        results.update(train_round([s for _, s in new], rounds + 3, "filling the cells read at sqrt's confirmed rate"))
        grid += new
    out = {"config": dataclasses.asdict(config), "baselines": task_baselines}
    out["grid"] = summaries()
    out["deep"] = deep_summaries()
    out["t5"] = [summarise(s, results[run_key(s)]) for s in t5]
    out["cells"] = fold_cells(out["grid"])
    out["best_lr"] = [{"task": t, "rule": r, "d_head": d, **info, "widened": widened.get((t, r, d), 0)}
                      for (t, r, d), info in sorted(best.items())]
    with torch_threads(1):
        out["t5_variant_step0"] = seed_variant_logit_std(config)
    out["runs"] = len(results)
    out["runs_reused"] = len(stored_before & set(results))  # found in the run store, not trained by this call
    return out


@torch.no_grad()
def seed_variant_logit_std(config: Config) -> dict:
    """Step-0 logit std of the source's other reading of T5 (W_q variance 1/(d_model sqrt(d_k)), no scale)
    next to sqrt + unit init: same seed, so the only difference is W_q's scale."""
    spec = base_spec(config, "shakespeare", rule="sqrt", init="unit", d_head=config.t5_lm_d_head, seed=config.seed)
    task = build_task(spec)
    x = task.validation()[0][:64]
    sqrt_std = [layer["logit_std"] for layer in attention_stats(build_model(spec, task), x)]
    variant = build_model(dataclasses.replace(spec, rule="none"), task)
    for block in variant.blocks:
        block.attn.w_q.weight.mul_(config.t5_lm_d_head ** -0.25)
    variant_std = [layer["logit_std"] for layer in attention_stats(variant, x)]
    return {"d_head": config.t5_lm_d_head, "sqrt_unit": sqrt_std, "none_wq_var_inv_sqrt_dk": variant_std}
