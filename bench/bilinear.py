"""The batched engine's two ways to attend: each head's projections against its bilinear forms.

A head wider than the model (d_head > d_model) can be computed through two d_model x d_model
matrices, W_q^T W_k and W_v^T W_o^T (``BatchedTransformer(..., bilinear=True)``, what the engine picks
there), instead of projecting to d_head.  For the recall shapes the training lab batches (d_model 32,
2 heads, d_head 16/64/256, 2 layers, the loss on the query rows), one group of the size the engine
picks (``shape_cap``), both ways run a training step (forward, backward) in the same process,
interleaved, so machine load hits both alike.  Then the length lab's needle models (one layer,
d_model = d_head 32): one at a time on the plain model against ``length.BATCH_RUNS`` batched, with
AdamW steps.  Prints median CPU ms per run and step and the ratios.

    python bench/bilinear.py [--repeats 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnscale.lab.length import experiment as length
from attnscale.threads import keep_freed_heap, torch_threads
from attnscale.train import RunSpec, build_model, build_task
from attnscale.train.batched import BatchedTransformer
from attnscale.train.optim import BatchedOptimiser
from attnscale.train.spec import shape_cap

RECALL = dict(task="recall", d_model=32, n_heads=2, n_layers=2, n_pairs=3, n_queries=3, n_keys=16, n_values=16,
              batch_size=64)


def cpu_ms(step) -> float:
    start = time.process_time()
    step()
    return 1000 * (time.process_time() - start)


def interleaved(steps: dict, repeats: int) -> dict[str, float]:
    """Median CPU ms of each step, the steps taken in turn ``repeats`` times (after one warm-up each)."""
    times = {name: [] for name in steps}
    for name, step in steps.items():
        step()
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(cpu_ms(step))
    return {name: statistics.median(t) for name, t in times.items()}


def recall_step(d_head: int, bilinear: bool):
    specs = [RunSpec(d_head=d_head, rule=rule, seed=s, **RECALL)
             for s, rule in zip(range(shape_cap(RunSpec(d_head=d_head, **RECALL))), ("sqrt", "none", "inv_d") * 8)]
    task = build_task(specs[0])
    model = BatchedTransformer([build_model(s, task) for s in specs], bilinear=bilinear)
    x, y = task.batch(specs[0].batch_size, torch.Generator().manual_seed(0))
    idx, targets = x.expand(len(specs), *x.shape), y.expand(len(specs), *y.shape)

    def step():
        model.zero_grad(set_to_none=True)
        model(idx, targets, rows=task.loss_rows)[1].sum().backward()
    return step, len(specs)


def needle_steps():
    config = length.PRESETS["quick"]
    task = length.task_at(config, config.base_length)
    x, y = task.batch(config.batch, torch.Generator().manual_seed(0))
    plain = length.build(config, "sqrt", "none", 0)
    optimiser = torch.optim.AdamW(plain.parameters(), lr=3e-3, betas=length.ADAMW_BETAS, weight_decay=0.0)

    def alone():
        optimiser.zero_grad(set_to_none=True)
        plain.loss_at(x, y, task.loss_rows).backward()
        optimiser.step()
    runs = length.BATCH_RUNS
    engine = BatchedTransformer([length.build(config, "sqrt", "none", seed) for seed in range(runs)])
    batched_optimiser = BatchedOptimiser(list(engine.parameters()), [("adamw", 0, runs)], weight_decay=0.0)
    idx, targets = x.expand(runs, *x.shape), y.expand(runs, *y.shape)
    rates, active = torch.full((runs,), 3e-3), torch.ones(runs, dtype=torch.bool)

    def together():
        for param in engine.parameters():
            param.grad = None
        engine(idx, targets, rows=task.loss_rows)[1].sum().backward()
        batched_optimiser.step(rates, active)
    return alone, together, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    keep_freed_heap()
    with torch_threads(args.threads):
        print(f"CPU ms per run and step, median of {args.repeats} interleaved, {args.threads} thread(s)")
        for d_head in (16, 64, 256):
            projected, runs = recall_step(d_head, False)
            bilinear, _ = recall_step(d_head, True)
            ms = interleaved({"projected": projected, "bilinear": bilinear}, args.repeats)
            picked = "bilinear" if d_head > RECALL["d_model"] else "projected"
            print(f"recall d_head {d_head:>3}, {runs} runs: projections {ms['projected'] / runs:6.2f}, bilinear forms "
                  f"{ms['bilinear'] / runs:6.2f}: {ms['projected'] / ms['bilinear']:.2f}x (the engine picks {picked})")
        alone, together, runs = needle_steps()
        ms = interleaved({"alone": alone, "together": together}, args.repeats)
        print(f"length lab needle model: one at a time {ms['alone']:6.2f}, {runs} together {ms['together'] / runs:6.2f}: "
              f"{ms['alone'] * runs / ms['together']:.2f}x")


if __name__ == "__main__":
    main()
