"""One training run, the plain way: :class:`attnscale.models.Transformer` and torch.optim.

This is the reference the batched engine (:mod:`attnscale.train.group`) is tested against,
and the path ``attnscale train`` takes for a single run.  A run whose loss turns NaN/inf is
a result ("diverged at step k"), not an error.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import stats
from ..attention import capture
from ..errors import UserError
from ..models import IGNORE_INDEX, ModelConfig, Transformer, targets_at
from ..models.tasks import make_task
from ..memory import require_memory
from ..threads import flushed_denormals
from .spec import RunSpec, as_spec, memory_estimate

WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
VAL_SIZE = 128        # validation sequences, the same for every run of a task
STATS_ROWS = 32       # validation sequences the attention statistics are measured on
ADAMW_BETAS = (0.9, 0.95)
SGD_MOMENTUM = 0.9


def torch_dtype(spec: RunSpec) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64}[spec.dtype]


def build_task(spec: RunSpec):
    if spec.task == "recall":
        return make_task("recall", n_pairs=spec.n_pairs, n_queries=spec.n_queries, n_keys=spec.n_keys,
                         n_values=spec.n_values, val_size=VAL_SIZE)
    return make_task("shakespeare", context=spec.context, val_size=VAL_SIZE)


def model_config(spec: RunSpec, task) -> ModelConfig:
    return ModelConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, d_model=spec.d_model,
                       n_layers=spec.n_layers, n_heads=spec.n_heads, d_head=spec.d_head, scale=spec.rule,
                       init=spec.init)


def build_model(spec: RunSpec, task) -> Transformer:
    """The run's model with its seeded initial weights, on its device and dtype."""
    return Transformer(model_config(spec, task), seed=spec.seed).to(spec.device, torch_dtype(spec))


def build_optimiser(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if spec.optimiser == "adamw":
        return torch.optim.AdamW(params, lr=spec.lr, betas=ADAMW_BETAS, weight_decay=spec.weight_decay)
    if spec.optimiser == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=SGD_MOMENTUM, weight_decay=spec.weight_decay)
    # Adafactor's lr caps its relative step size: updates scale with each parameter's RMS.
    return torch.optim.Adafactor(params, lr=spec.lr, weight_decay=spec.weight_decay)


def lr_factor(step: int, spec: RunSpec) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < spec.warmup:
        return (step + 1) / spec.warmup
    done = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))


def batch_stream(seed: int) -> torch.Generator:
    """The stream of training batches of a run with this seed (seeded apart from its initial weights)."""
    return torch.Generator().manual_seed(seed + 1_000_003)


def batch_generator(spec: RunSpec) -> torch.Generator:
    """The run's own stream of training batches."""
    return batch_stream(spec.seed)


def layer_stats(logits: torch.Tensor, probs: torch.Tensor, runs: int = 0) -> dict[str, torch.Tensor]:
    """Attention statistics of one layer, over the keys each causal query sees, the first row
    (one key) left out.  ``logits`` hold NaN where a key is masked.  With ``runs`` > 0 the
    leading dimension is the run and each statistic comes back per run; otherwise as scalars."""
    logits, probs = logits[..., 1:, :], probs[..., 1:, :]
    valid = ~torch.isnan(logits)
    moments = stats.logit_moments(logits.nan_to_num(0.0), valid)
    per_row = {"entropy": stats.normalized_entropy(probs, valid), "max_prob": stats.max_prob(probs, valid),
               "logit_std": moments["std"]}
    if runs:
        out = {name: value.reshape(runs, -1).mean(dim=1) for name, value in per_row.items()}
        out["max_abs_logit"] = moments["max_abs"].reshape(runs, -1).amax(dim=1)
        return out
    out = {name: value.mean() for name, value in per_row.items()}
    out["max_abs_logit"] = moments["max_abs"].max()
    return out


def as_row(layer: dict[str, torch.Tensor], run: int | None = None) -> dict[str, float]:
    pick = (lambda t: t) if run is None else (lambda t: t[run])
    return {name: float(pick(layer[name])) for name in ("entropy", "max_prob", "max_abs_logit", "logit_std")}


@torch.no_grad()
def attention_stats(model: Transformer, x: torch.Tensor) -> list[dict]:
    """Per layer: normalised entropy, max probability, max |logit|, logit std."""
    with capture(model) as seen:
        model(x)
    return [as_row(layer_stats(seen[name].logits, seen[name].probs)) for name in model.observation_points()]


def loss_of(model: Transformer, x: torch.Tensor, y: torch.Tensor, rows: slice | None) -> torch.Tensor:
    """The forward pass's loss; with ``rows`` (the task's ``loss_rows``, where every target lies), the
    same loss computed on those positions alone (:meth:`Transformer.loss_at`)."""
    return model(x, y)[1] if rows is None else model.loss_at(x, y, rows)


@torch.no_grad()
def evaluate(model: Transformer, x: torch.Tensor, y: torch.Tensor, rows: slice | None = None) -> tuple[float, float]:
    """Validation loss and accuracy over the scored positions (``rows``: as in :func:`loss_of`)."""
    if rows is None:
        logits, loss = model(x, y)
    else:
        logits, y = model.logits_at(x, rows)[0], targets_at(y, rows)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX)
    scored = y != IGNORE_INDEX
    accuracy = float((logits.argmax(-1)[scored] == y[scored]).float().mean())
    return float(loss), accuracy


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def new_log() -> dict:
    return {"step": [], "train_loss": [], "val_loss": [], "val_acc": [], "grad": {w: [] for w in WEIGHTS},
            "attention": []}


def is_log_step(step: int, spec: RunSpec) -> bool:
    return step % spec.log_every == 0 or step == spec.steps


def finish(log: dict, status: str, diverged_at: int | None, task) -> dict:
    """The result dict of a run from its log."""
    finished_losses = [v for v in log["val_loss"] if v is not None]
    return {
        "status": status,
        "diverged_at": diverged_at,
        "log": log,
        "initial_val_loss": log["val_loss"][0] if log["val_loss"] else None,
        "final_val_loss": None if status == "diverged" else log["val_loss"][-1],
        "best_val_loss": min(finished_losses) if finished_losses else None,
        "final_val_acc": None if (status == "diverged" or not task.has_accuracy) else log["val_acc"][-1],
        "chance_acc": task.chance_accuracy if task.has_accuracy else None,
    }


def check_device(spec: RunSpec) -> None:
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise UserError("device 'cuda' asked for, but torch sees no CUDA GPU; use device 'cpu'")


def check_memory(spec: RunSpec, runs: int = 1) -> None:
    """Refuse, in one line, a run (or a group of ``runs``) that would not fit in free memory."""
    what = f"training {runs} run{'s' if runs > 1 else ''} (d_model {spec.d_model}, d_head {spec.d_head}, " \
           f"{spec.n_heads} heads, {spec.n_layers} layers, batch {spec.batch_size})"
    require_memory(memory_estimate(spec, runs), what, "use a smaller d_head, d_model, batch or fewer layers"
                   + (" or fewer runs per group (--batch-runs)" if runs > 1 else ""), spec.device)


@flushed_denormals()
def train(spec, return_model: bool = False):
    """Train one run; returns its result dict (and the model if ``return_model``).

    A task whose targets lie at its last positions only (recall: the queries) is trained on the loss
    computed there alone (:func:`loss_of`): the same loss and gradients, less work.
    Logged at step 0, every ``log_every`` steps and at the end, before that step's update:
    the minibatch loss, validation loss and accuracy, per-layer gradient norms of W_q, W_k,
    W_v, W_o, and per-layer attention statistics on 32 validation sequences.  Subnormal floats
    are flushed to zero (:func:`attnscale.threads.flushed_denormals`).
    """
    spec = as_spec(spec)
    check_device(spec)
    check_memory(spec)
    task = build_task(spec)
    model = build_model(spec, task)
    optimiser = build_optimiser(spec, model)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: lr_factor(step, spec))
    batches = batch_generator(spec)
    x_val, y_val = (t.to(spec.device) for t in task.validation())
    log = new_log()
    status, diverged_at = "finished", None
    for step in range(spec.steps + 1):
        x, y = (t.to(spec.device) for t in task.batch(spec.batch_size, batches))
        model.train()
        loss = loss_of(model, x, y, task.loss_rows)
        if not torch.isfinite(loss):
            status, diverged_at = "diverged", step
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        if is_log_step(step, spec):
            model.eval()
            val_loss, val_acc = evaluate(model, x_val, y_val, task.loss_rows)
            log["step"].append(step)
            log["train_loss"].append(float(loss.detach()))
            log["val_loss"].append(finite_or_none(val_loss))
            log["val_acc"].append(val_acc if task.has_accuracy else None)
            for w in WEIGHTS:
                log["grad"][w].append([finite_or_none(float(layer[w].grad.norm())) for layer in model.attention_weights()])
            log["attention"].append(attention_stats(model, x_val[:STATS_ROWS]))
        if step == spec.steps:
            break
        optimiser.step()
        schedule.step()
    result = finish(log, status, diverged_at, task)
    return (result, model) if return_model else result
