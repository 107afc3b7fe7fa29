"""Train a group of runs that share a shape together: one forward and backward per step for all.

Each run keeps everything that makes it its own run: its scale rule, init and seeded
initial weights, its batch stream, its learning rate and its optimiser state.  A run whose
training loss turns NaN/inf is frozen at that step and recorded as diverged; the others go
on untouched.  What is logged, and when, is what :func:`attnscale.train.single.train` logs,
so a run's result does not depend on which path trained it.
"""

from __future__ import annotations

import torch

from ..threads import flushed_denormals
from . import single
from .batched import BatchedTransformer
from .optim import BatchedOptimiser
from .single import (STATS_ROWS, WEIGHTS, as_row, batch_stream, build_model, build_task, check_device, check_memory,
                     finish, finite_or_none, is_log_step, layer_stats, lr_factor, new_log)
from .spec import RunSpec, as_spec


def optimiser_ranges(specs: list[RunSpec]) -> list[tuple[str, int, int]]:
    """[(optimiser, start, stop)]: the contiguous range of runs each optimiser updates."""
    ranges, start = [], 0
    for i in range(1, len(specs) + 1):
        if i == len(specs) or specs[i].optimiser != specs[start].optimiser:
            ranges.append((specs[start].optimiser, start, i))
            start = i
    kinds = [kind for kind, _, _ in ranges]
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"runs of one optimiser must be contiguous in a group, got {[s.optimiser for s in specs]}")
    return ranges


def check_group(specs: list[RunSpec]) -> None:
    if not specs:
        raise ValueError("a group needs at least one run")
    shapes = {s.shape() for s in specs}
    if len(shapes) > 1:
        raise ValueError("runs of one group must share every field but rule, init, lr, optimiser and seed")


class Batches:
    """Each run's own training batches, drawn as that run alone would draw them (runs that
    share a seed share a stream, drawn once): ``seeds`` one per run, ``stream(seed)`` the
    generator a seed's batches are drawn from."""

    def __init__(self, task, seeds: list[int], batch_size: int, device, stream=batch_stream):
        self.task, self.batch_size, self.device = task, batch_size, device
        self.seeds = list(seeds)
        self.streams = {seed: stream(seed) for seed in self.seeds}

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        drawn = {seed: self.task.batch(self.batch_size, g) for seed, g in self.streams.items()}
        x = torch.stack([drawn[seed][0] for seed in self.seeds]).to(self.device)
        y = torch.stack([drawn[seed][1] for seed in self.seeds]).to(self.device)
        return x, y


@torch.no_grad()
def log_step(model: BatchedTransformer, logs: list[dict], active: list[bool], step: int, train_loss: torch.Tensor,
             val: tuple[torch.Tensor, torch.Tensor], has_accuracy: bool, rows: slice | None = None) -> None:
    x_val, y_val = val
    logits, val_loss = model(x_val, y_val, rows=rows)
    y_val = y_val if rows is None else y_val[..., rows]
    scored = y_val != -100
    correct = ((logits.argmax(-1) == y_val) & scored).flatten(1).sum(dim=1)
    accuracy = correct / scored.flatten(1).sum(dim=1)
    grads = [{w: t.grad.flatten(1).norm(dim=1) for w, t in model.attention_weights(i).items()}
             for i in range(model.config.n_layers)]
    seen: list = []
    model(x_val[:, :STATS_ROWS], observe=seen)
    layers = [layer_stats(logits_i, probs_i, runs=model.runs) for logits_i, probs_i in seen]
    for k, log in enumerate(logs):
        if not active[k]:
            continue
        log["step"].append(step)
        log["train_loss"].append(float(train_loss[k]))
        log["val_loss"].append(finite_or_none(float(val_loss[k])))
        log["val_acc"].append(float(accuracy[k]) if has_accuracy else None)
        for w in WEIGHTS:
            log["grad"][w].append([finite_or_none(float(layer[w][k])) for layer in grads])
        log["attention"].append([as_row(layer, k) for layer in layers])


@flushed_denormals()
def train_group(specs, return_models: bool = False, progress=None):
    """Train ``specs`` (runs of one shape, each optimiser's runs contiguous) as one batch.

    Returns the list of result dicts, in the order of ``specs`` (and the list of trained
    :class:`attnscale.models.Transformer` models with ``return_models``).  ``progress(step,
    steps)`` is called after every step.
    """
    specs = [as_spec(s) for s in specs]
    check_group(specs)
    first = specs[0]
    check_device(first)
    check_memory(first, len(specs))
    task = build_task(first)
    singles = [build_model(s, task) for s in specs]
    model = BatchedTransformer(singles)
    optimiser = BatchedOptimiser(list(model.parameters()), optimiser_ranges(specs), first.weight_decay)
    base_lr = torch.tensor([s.lr for s in specs], dtype=torch.float64)
    batches = Batches(task, [s.seed for s in specs], first.batch_size, first.device)
    x_val, y_val = (t.to(first.device) for t in task.validation())
    val = (x_val.expand(len(specs), *x_val.shape), y_val.expand(len(specs), *y_val.shape))
    logs = [new_log() for _ in specs]
    active = [True] * len(specs)
    diverged_at: list[int | None] = [None] * len(specs)
    for step in range(first.steps + 1):
        x, y = batches.next()
        model.train()
        _, losses = model(x, y, rows=task.loss_rows)  # a task scored at its last positions: the loss there alone
        finite = torch.isfinite(losses.detach())
        for k in range(len(specs)):
            if active[k] and not bool(finite[k]):
                active[k], diverged_at[k] = False, step
        if not any(active):
            break
        for p in model.parameters():
            p.grad = None
        mask = torch.tensor(active, device=losses.device)
        torch.where(mask, losses, torch.zeros_like(losses)).sum().backward()
        if is_log_step(step, first):
            model.eval()
            log_step(model, logs, active, step, losses.detach(), val, task.has_accuracy, task.loss_rows)
        if step == first.steps:
            break
        lr = (base_lr * lr_factor(step, first)).to(device=first.device, dtype=losses.dtype)
        optimiser.step(lr, mask)
        if progress:
            progress(step + 1, first.steps)
    results = [finish(log, "finished" if diverged_at[k] is None else "diverged", diverged_at[k], task)
               for k, log in enumerate(logs)]
    if not return_models:
        return results
    return results, [model.unstack(k, single) for k, single in enumerate(singles)]
