"""A training step on the loss of the query rows computed alone against the full forward pass.

Recall and the length lab's needles score their last positions only, so the engine and the length
lab compute the last layer's queries, MLP and head on those rows (``Transformer.loss_at``,
``BatchedTransformer(..., rows=...)``).  For each shape the labs train, both steps (forward,
backward) run on one model in the same process, interleaved, so machine load hits both alike.
Prints the median step time of each and their ratio.

With ``--heap``, instead: the rows step with glibc's default malloc against the same step with freed
memory kept for the next step (:func:`attnscale.threads.keep_freed_heap`, what the report's processes
do), each in a fresh process, the two alternated over ``--rounds``: CPU ms and minor page faults a step.

    python bench/query_rows.py [--repeats 40] [--threads 1] [--heap [--rounds 3]]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

import torch

from attnscale.lab.length import experiment as length
from attnscale.threads import keep_freed_heap, torch_threads
from attnscale.train import RunSpec, build_model, build_task
from attnscale.train.batched import BatchedTransformer

RECALL = dict(task="recall", d_model=32, n_heads=2, n_layers=2, n_pairs=3, n_queries=3, n_keys=16, n_values=16,
              batch_size=64)


def recall_steps(d_head: int, runs: int):
    """(full step, rows step) for ``runs`` recall runs of the training lab's quick shape (one run: the
    plain model, as the engine trains d_head 256; more: one batched group)."""
    specs = [RunSpec(d_head=d_head, rule="sqrt", seed=s, **RECALL) for s in range(runs)]
    task = build_task(specs[0])
    x, y = task.batch(specs[0].batch_size, torch.Generator().manual_seed(0))
    if runs == 1:
        model = build_model(specs[0], task)
        return (lambda: model(x, y)[1], lambda: model.loss_at(x, y, task.loss_rows)), model
    model = BatchedTransformer([build_model(s, task) for s in specs])
    idx, targets = x.expand(runs, *x.shape), y.expand(runs, *y.shape)
    return (lambda: model(idx, targets)[1].sum(), lambda: model(idx, targets, rows=task.loss_rows)[1].sum()), model


def needle_steps():
    """(full step, rows step) for the length lab's one-layer model on its needles."""
    config = length.PRESETS["quick"]
    task = length.task_at(config, config.base_length)
    model = length.build(config, "sqrt", "none", 0)
    x, y = task.batch(config.batch, torch.Generator().manual_seed(0))
    return (lambda: model(x, y)[1], lambda: model.loss_at(x, y, task.loss_rows)), model


def step_time(loss_fn, model) -> float:
    start = time.perf_counter()
    for p in model.parameters():
        p.grad = None
    loss_fn().backward()
    return time.perf_counter() - start


SHAPES = {"recall d_head 16, 8 runs batched": lambda: recall_steps(16, 8),
          "recall d_head 64, 4 runs batched": lambda: recall_steps(64, 4),
          "recall d_head 256, one run": lambda: recall_steps(256, 1),
          "length lab, one-layer needle model": needle_steps}


def rows_vs_full(repeats: int) -> None:
    print(f"{'shape':<38} {'full ms':>8} {'rows ms':>8} {'full / rows':>11}")
    for name, make in SHAPES.items():
        (full, rows), model = make()
        times = {"full": [], "rows": []}
        for _ in range(3):  # warm-up
            step_time(full, model), step_time(rows, model)
        for _ in range(repeats):
            times["full"].append(step_time(full, model))
            times["rows"].append(step_time(rows, model))
        full_ms, rows_ms = (1000 * statistics.median(times[k]) for k in ("full", "rows"))
        print(f"{name:<38} {full_ms:8.2f} {rows_ms:8.2f} {full_ms / rows_ms:10.2f}x")


def heap_child(repeats: int, kept: bool) -> None:
    """One process's CPU ms and minor page faults a rows step, per shape, as "name<TAB>ms<TAB>faults" lines."""
    if kept and not keep_freed_heap():
        sys.exit("this C library is not glibc: nothing to compare")
    for name, make in SHAPES.items():
        (_, rows), model = make()
        for _ in range(3):
            step_time(rows, model)
        before, cpu = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        for _ in range(repeats):
            step_time(rows, model)
        cpu, faults = time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        print(f"{name}\t{1000 * cpu / repeats}\t{faults / repeats}")


def heap_compare(repeats: int, rounds: int, threads: int) -> None:
    found = {"default": {}, "kept": {}}
    for _ in range(rounds):
        for mode in found:
            lines = subprocess.run([sys.executable, __file__, "--heap-child", mode, "--repeats", str(repeats),
                                    "--threads", str(threads)], check=True, capture_output=True, text=True).stdout
            for line in lines.splitlines():
                name, ms, faults = line.split("\t")
                found[mode].setdefault(name, []).append((float(ms), float(faults)))
    print(f"{'shape (CPU ms a step, median of rounds)':<38} {'default':>8} {'kept':>8} {'default / kept':>14} "
          f"{'faults default':>14} {'kept':>6}")
    for name in SHAPES:
        (ms_d, flt_d), (ms_k, flt_k) = ((statistics.median(v[0] for v in found[m][name]),
                                         statistics.median(v[1] for v in found[m][name])) for m in ("default", "kept"))
        print(f"{name:<38} {ms_d:8.2f} {ms_k:8.2f} {ms_d / ms_k:13.2f}x {flt_d:14.0f} {flt_k:6.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--heap", action="store_true", help="default malloc against freed memory kept")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heap-child", choices=("default", "kept"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    with torch_threads(args.threads):
        if args.heap_child:
            heap_child(args.repeats, args.heap_child == "kept")
        elif args.heap:
            heap_compare(args.repeats, args.rounds, args.threads)
        else:
            rows_vs_full(args.repeats)


if __name__ == "__main__":
    main()
