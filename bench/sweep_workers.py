"""A local sweep with 2 workers against 1 worker: runs per minute, and their ratio (target >= 1.8).

Each sweep runs the same grid of small recall runs into its own temporary store, pool
start-up included.  Wall-clock numbers on a shared machine carry its load; run it on an
otherwise idle one.

    python bench/sweep_workers.py [--runs 8] [--steps 150]

Measured twice: with one torch thread per worker (the same work per process either way), and
with the default cores // workers threads (one worker then gets every core's threads).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from attnscale.train import RunSpec
from attnscale.runs import execute


def grid(n: int, steps: int) -> list[RunSpec]:
    rules = ("sqrt", "inv_d", "none", "const:0.125")
    return [RunSpec(task="recall", rule=rules[i % len(rules)], d_head=16, seed=i // len(rules), steps=steps,
                    log_every=50) for i in range(n)]


def runs_per_minute(specs, workers: int, threads: int | None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        execute(specs, Path(tmp) / "runs.sqlite", workers=workers, threads=threads)
        return len(specs) / (time.perf_counter() - start) * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    specs = grid(args.runs, args.steps)
    print(f"{args.runs} recall runs of {args.steps} steps")
    for threads, label in ((1, "1 torch thread per worker"), (None, "default threads (cores // workers)")):
        one = runs_per_minute(specs, 1, threads)
        two = runs_per_minute(specs, 2, threads)
        print(f"{label}: 1 worker {one:.1f} runs/min, 2 workers {two:.1f} runs/min, "
              f"ratio {two / one:.2f} (target >= 1.8)")


if __name__ == "__main__":
    main()
