"""Batched training (K runs of one shape as one program) against one run at a time.

For the quick preset's recall shapes (d_model 32 and 64, d_head 16, 64, 256, 2 layers), in
one process with the same torch threads, interleaved so machine load hits both alike:

* runs x steps per second, one run at a time (``attnscale.train.train``) and batched
  (``attnscale.train.train_group``) with K = 12 and 24, logging as the lab logs, and with
  the K the engine picks for the shape (``attnscale.train.spec.shape_cap``: as many runs
  as keep one layer's activations of the group within 8 MiB; K = 1 is the one-run path);
* the batched path's achieved FLOP/s (FLOPs of one training step counted by
  torch.utils.flop_counter, per second of pure training steps) as a share of this
  machine's float32 matmul FLOP/s, measured here with a large torch.mm.

Prints the ratios; targets: batched / one-at-a-time >= 4x at d_head 16 and 64, >= 1.5x at
d_head 256; FLOP share >= 30% at d_head 256.

It also prints what bounds the speedup: batching removes per-op overhead (Python, dispatch,
autograd bookkeeping, kernel launches), not arithmetic.  The overhead share of a one-run
step is measured as the time of the same run with batch_size 1 (the same ops on almost no
data) over its time at the real batch size; removing all of it speeds a run up by at most
1 / (1 - share), unless batching also makes the arithmetic itself faster.  A hard ceiling
comes from the FLOP count: a batched run-step cannot cost less than its FLOPs at the
machine's matmul rate, so the speedup is at most 1 / (the one-at-a-time path's FLOP share).

    python bench/train_batched.py [--threads 1] [--steps 60] [--device cpu|cuda] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from attnscale.lab.training.experiment import PRESETS, base_spec
from attnscale.train import RunSpec, train, train_group
from attnscale.train.batched import BatchedTransformer
from attnscale.train.single import build_model, build_task
from attnscale.train.spec import shape_cap

RULES = ("sqrt", "inv_d", "none", "const:0.125")


def specs_for(d_model: int, d_head: int, runs: int, steps: int, device: str) -> list[RunSpec]:
    """Runs of the quick preset's recall shape (heads, pairs, batch) at this d_model and d_head."""
    quick = PRESETS["quick"]
    return [base_spec(quick, "recall", rule=RULES[i % len(RULES)], seed=i // len(RULES), lr=3e-3, d_head=d_head,
                      d_model=d_model, steps=steps, device=device) for i in range(runs)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def matmul_flops_per_second(device: str, size: int = 2048, repeats: int = 5) -> float:
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    a @ b
    seconds = min(timed(lambda: a @ b, device) for _ in range(repeats))
    return 2 * size**3 / seconds


def step_flops_and_rate(specs: list[RunSpec], device: str, steps: int = 20) -> tuple[float, float]:
    """(FLOPs of one forward+backward of the batch, FLOP/s over ``steps`` pure training steps)."""
    task = build_task(specs[0])
    model = BatchedTransformer([build_model(s, task) for s in specs])
    gen = torch.Generator().manual_seed(0)
    x, y = task.batch(specs[0].batch_size, gen)
    x, y = (t.expand(len(specs), *t.shape).to(device) for t in (x, y))
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def step():
        optimiser.zero_grad(set_to_none=True)
        model(x, y)[1].sum().backward()
        optimiser.step()

    with FlopCounterMode(display=False) as counter:
        model(x, y)[1].sum().backward()
    flops = counter.get_total_flops()
    step()
    seconds = timed(lambda: [step() for _ in range(steps)], device)
    return flops, flops * steps / seconds


def plain_step_flops(spec: RunSpec) -> float:
    """FLOPs of one forward+backward of one run on the plain model (the one-at-a-time path's arithmetic,
    which at d_head > d_model is more than the batched engine's: it projects where the engine uses the
    heads' bilinear forms)."""
    task = build_task(spec)
    model = build_model(spec, task)
    x, y = task.batch(spec.batch_size, torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(x.to(spec.device), y.to(spec.device))[1].backward()
    return counter.get_total_flops()


def overhead_share(d_model: int, d_head: int, steps: int, device: str) -> float:
    """Time of a one-run training at batch_size 1 over its time at the real batch size."""
    spec = specs_for(d_model, d_head, 1, steps, device)[0]
    tiny = dataclasses.replace(spec, batch_size=1)
    return timed(lambda: train(tiny), device) / timed(lambda: train(spec), device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--quick", action="store_true", help="d_model 32 only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peak = matmul_flops_per_second(args.device)
    train(specs_for(32, 16, 1, 5, args.device)[0])  # warm up: the first run pays torch's one-time set-up
    train_group(specs_for(32, 16, 2, 5, args.device))
    print(f"torch threads {args.threads}, device {args.device}; float32 matmul: {peak / 1e9:.1f} GFLOP/s")
    print(f"{'d_model':>7} {'d_head':>6} {'one at a time':>14} {'K=12':>8} {'K=24':>8} {'x K=12':>7} {'x K=24':>7}"
          f" {'auto K':>6} {'x auto':>7}"
          f" {'FLOP share K=24':>16} {'overhead share':>15} {'bound':>6} {'FLOP share one':>14} {'ceiling':>8}"
          "   (runs x steps / s)")
    for d_model in ((32,) if args.quick else (32, 64)):
        for d_head in (16, 64, 256):
            single = specs_for(d_model, d_head, 2, args.steps, args.device)
            rate_one = len(single) * args.steps / timed(lambda: [train(s) for s in single], args.device)
            auto = min(24, shape_cap(single[0]))
            rates = {}
            for runs in sorted({12, 24, auto} - {1}):
                group = specs_for(d_model, d_head, runs, args.steps, args.device)
                rates[runs] = runs * args.steps / timed(lambda: train_group(group), args.device)
            flops, achieved = step_flops_and_rate(specs_for(d_model, d_head, 24, args.steps, args.device), args.device)
            one_share = plain_step_flops(single[0]) * rate_one / peak
            share = overhead_share(d_model, d_head, args.steps, args.device)
            rates[1] = rate_one
            print(f"{d_model:>7} {d_head:>6} {rate_one:>14.1f} {rates[12]:>8.1f} {rates[24]:>8.1f} "
                  f"{rates[12] / rate_one:>6.2f}x {rates[24] / rate_one:>6.2f}x {auto:>6} {rates[auto] / rate_one:>6.2f}x"
                  f" {achieved / peak:>15.0%} "
                  f"{share:>15.0%} {1 / max(1e-9, 1 - share):>5.1f}x {one_share:>14.0%} {1 / one_share:>7.1f}x",
                  flush=True)


if __name__ == "__main__":
    main()
