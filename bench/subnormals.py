"""What subnormal floats cost a training run, and what flushing them changes in its numbers.

The training engine flushes subnormals to zero while a run trains
(:func:`attnscale.threads.flushed_denormals`).  This trains the same recall runs (the quick
preset's shape) with the flush and without it, interleaved in one process on one thread, and
prints each run's median CPU seconds both ways, their ratio, and whether the final validation
losses agree.  Runs without scaling saturate their softmax; sqrt's do not.

    python bench/subnormals.py [--steps 300] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnscale.lab.training import experiment
from attnscale.train import single

RULES = ("sqrt", "none")
D_HEADS = (64, 256)  # the quick preset's grid and decisive d_heads where no scaling saturates
LR = 3e-3  # the middle of the quick preset's recall grid


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def cpu_seconds(train, spec) -> tuple[float, float]:
    """(CPU seconds, final validation loss) of one run."""
    start = time.process_time()
    result = train(spec)
    return time.process_time() - start, result["final_val_loss"]


def measure(steps: int, repeats: int) -> list[dict]:
    kept = single.train.__wrapped__  # the same function without its flushed_denormals block
    config = experiment.Config()
    single.train(experiment.base_spec(config, "recall", rule="sqrt", d_head=16, lr=LR, seed=0, steps=5))  # warm-up
    rows = []
    for d_head in D_HEADS:
        for rule in RULES:
            spec = experiment.base_spec(config, "recall", rule=rule, d_head=d_head, lr=LR, seed=0, steps=steps)
            flushed_s, kept_s = [], []
            for _ in range(repeats):  # same seed, same losses: each mode's last one is its loss
                seconds, loss_flushed = cpu_seconds(single.train, spec)
                flushed_s.append(seconds)
                seconds, loss_kept = cpu_seconds(kept, spec)
                kept_s.append(seconds)
            rows.append({"d_head": d_head, "rule": rule, "kept_s": statistics.median(kept_s),
                         "flushed_s": statistics.median(flushed_s), "loss_kept": loss_kept,
                         "loss_flushed": loss_flushed})
    return rows


def print_rows(rows: list[dict]) -> None:
    print(f"{'d_head':>6} {'rule':>5} {'kept CPU-s':>11} {'flushed CPU-s':>14} {'ratio':>6}  final val loss (kept / flushed)")
    for r in rows:
        print(f"{r['d_head']:>6} {r['rule']:>5} {r['kept_s']:>11.2f} {r['flushed_s']:>14.2f} "
              f"{r['kept_s'] / r['flushed_s']:>5.2f}x  {r['loss_kept']:.7g} / {r['loss_flushed']:.7g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive, default=300)
    parser.add_argument("--repeats", type=positive, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print_rows(measure(args.steps, args.repeats))


if __name__ == "__main__":
    main()
