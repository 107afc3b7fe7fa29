"""Sweep execution: many training runs, in worker processes or on Ray, into SQLite.

A run is a :class:`attnscale.lab.training.RunSpec` (task, rule, init, d_head, n_layers, lr,
optimiser, steps, seed, ...), identified by a hash of its fields and the training lab's
VERSION.  :func:`execute` runs the specs that the store does not hold yet:

* ``executor="local"`` (default): a pool of ``workers`` spawned processes, each with
  cores // workers torch threads.  A worker that dies (killed, out of memory) breaks the
  pool; the pool is restarted and the runs that were in flight are run again.
* ``executor="ray"``: one Ray task per run, on the cluster at ``address``, or on a local
  Ray instance started for the sweep (its files under ``ray_dir``, HOME untouched).

Only the parent process writes the store, one row per finished run, each in its own
transaction (``INSERT OR IGNORE`` on the key): a sweep killed with kill -9 loses only the
runs in flight, and rerunning it skips every run already stored.  A diverged run (NaN/inf
loss) is a finished run: its row says at which step.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import secrets
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable

from .store import SQLiteTable

EXECUTORS = ("local", "ray")
MAX_POOL_RESTARTS = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL
)
"""

Progress = Callable[[int, int, str], None]  # (done, total, message)


def spec_dict(spec) -> dict:
    """A RunSpec (or a dict of its fields) as a plain dict."""
    if isinstance(spec, dict):
        return dict(spec)
    import dataclasses

    return dataclasses.asdict(spec)


def run_key(spec) -> str:
    """The store key of a run: its fields and the training lab's VERSION, hashed."""
    from .lab import training

    data = training.RunSpec(**spec_dict(spec))  # validates and fills defaults
    import dataclasses

    text = json.dumps({"version": training.VERSION, "spec": dataclasses.asdict(data)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class RunStore(SQLiteTable):
    """The ``runs`` table of one SQLite file: one row per finished run."""

    schema = SCHEMA

    def keys(self) -> set[str]:
        with self._connect() as db:
            return {row[0] for row in db.execute("SELECT key FROM runs")}

    def put(self, key: str, spec: dict, result: dict, seconds: float) -> None:
        """Store one finished run in a single transaction; a key already stored is left as it is."""
        db = self._connect()
        try:
            with db:
                db.execute(
                    "INSERT OR IGNORE INTO runs (key, spec, status, result, seconds, created) VALUES (?, ?, ?, ?, ?, ?)",
                    (key, json.dumps(spec, sort_keys=True), result["status"], json.dumps(result), seconds, time.time()),
                )
        finally:
            db.close()

    def get(self, key: str) -> dict | None:
        with self._connect() as db:
            row = db.execute("SELECT result FROM runs WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def rows(self) -> list[dict]:
        """Every stored run: {"key", "spec", "status", "result", "seconds"}, oldest first."""
        with self._connect() as db:
            found = db.execute("SELECT key, spec, status, result, seconds FROM runs ORDER BY created, key").fetchall()
        return [{"key": k, "spec": json.loads(s), "status": st, "result": json.loads(r), "seconds": sec}
                for k, s, st, r, sec in found]


class MemoryStore:
    """The same interface, in memory (for a lab run that must write no file)."""

    def __init__(self):
        self._rows: dict[str, dict] = {}

    def keys(self) -> set[str]:
        return set(self._rows)

    def put(self, key, spec, result, seconds) -> None:
        self._rows.setdefault(key, {"key": key, "spec": spec, "status": result["status"], "result": result,
                                    "seconds": seconds})

    def get(self, key):
        row = self._rows.get(key)
        return row["result"] if row else None

    def rows(self) -> list[dict]:
        return list(self._rows.values())


def run_one(spec: dict, checkpoint_dir: str | None = None) -> tuple[dict, float]:
    """Train one run (in whatever process calls it); returns (result, seconds).

    With ``checkpoint_dir``, the final weights go to ``<checkpoint_dir>/<key>.safetensors``.
    """
    from .lab import training

    start = time.perf_counter()
    result, model = training.train(training.RunSpec(**spec), return_model=True)
    if checkpoint_dir is not None:
        from safetensors.torch import save_file

        folder = Path(checkpoint_dir)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
        save_file(tensors, str(folder / f"{run_key(spec)}.safetensors"), metadata={"spec": json.dumps(spec)})
    return result, time.perf_counter() - start


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def ray_run_one(spec: dict, checkpoint_dir: str | None = None) -> tuple[dict, float]:
    """run_one inside a Ray worker, on one torch thread (Ray gives each task one CPU)."""
    _init_worker(1)
    return run_one(spec, checkpoint_dir)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_options(executor: str, workers: int | None) -> int:
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; accepted: {', '.join(EXECUTORS)}")
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


def execute(specs, store=None, *, workers: int | None = None, executor: str = "local", address: str | None = None,
            ray_dir: str | Path | None = None, checkpoint_dir: str | Path | None = None,
            threads: int | None = None, progress: Progress | None = None) -> dict[str, dict]:
    """Run every spec the store lacks; return {key: result} for all of ``specs``.

    ``store``: a :class:`RunStore` (a path is accepted too) or None for an in-memory one.
    ``threads``: torch threads per local worker (default: cores // workers).  Duplicate specs run once.
    """
    workers = check_options(executor, workers)
    if store is None:
        store = MemoryStore()
    elif isinstance(store, (str, Path)):
        store = RunStore(store)
    wanted = {}
    for spec in specs:
        data = spec_dict(spec)
        wanted.setdefault(run_key(data), data)
    done = store.keys()
    todo = {key: data for key, data in wanted.items() if key not in done}
    total, finished = len(wanted), len(wanted) - len(todo)
    ckpt = None if checkpoint_dir is None else str(checkpoint_dir)

    def record(key: str, result: dict, seconds: float) -> None:
        nonlocal finished
        store.put(key, todo[key], result, seconds)
        finished += 1
        if progress:
            progress(finished, total, f"{finished}/{total} runs")

    if progress:
        progress(finished, total, f"{finished}/{total} runs already stored")
    if todo:
        if executor == "local":
            _local_execute(todo, workers, ckpt, record, threads)
        else:
            _ray_execute(todo, workers, address, ray_dir, ckpt, record)
    return {key: store.get(key) for key in wanted}


def _local_execute(todo: dict, workers: int, ckpt, record, threads: int | None = None) -> None:
    threads = threads or max(1, default_workers() // workers)
    context = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
    remaining = dict(todo)
    for _attempt in range(MAX_POOL_RESTARTS + 1):
        try:
            with cf.ProcessPoolExecutor(max_workers=min(workers, len(remaining)), mp_context=context,
                                        initializer=_init_worker, initargs=(threads,)) as pool:
                futures = {pool.submit(run_one, spec, ckpt): key for key, spec in remaining.items()}
                for future in cf.as_completed(futures):
                    key = futures[future]
                    result, seconds = future.result()
                    record(key, result, seconds)
                    remaining.pop(key)
            return
        except BrokenProcessPool:
            continue  # a worker died: the runs it and its peers held are run again
    raise RuntimeError(f"the worker pool broke {MAX_POOL_RESTARTS + 1} times; {len(remaining)} runs not done")


RAY_MISSING = ("--executor ray needs Ray, which is not installed; install it with "
               "`pip install 'attnscale[ray]'` (or `pip install 'ray[default]'`), or use --executor local")


def _ray_execute(todo: dict, workers: int, address, ray_dir, ckpt, record) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    started_here, set_token = not ray.is_initialized(), False
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            temp = Path(ray_dir if ray_dir is not None else Path("attnscale-runs") / "ray").resolve()
            temp.mkdir(parents=True, exist_ok=True)
            if not any(os.environ.get(v) for v in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
                # Ray would otherwise write a token to ~/.ray/auth_token; this instance's token lives in memory.
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)
                set_token = True
            ray.init(num_cpus=workers, _temp_dir=str(temp), include_dashboard=False, log_to_driver=False,
                     runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        remote = ray.remote(num_cpus=1)(ray_run_one)
        pending = {remote.remote(spec, ckpt): key for key, spec in todo.items()}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                result, seconds = ray.get(ref)
                record(pending.pop(ref), result, seconds)
    finally:
        if started_here:
            ray.shutdown()
        if set_token:
            os.environ.pop("RAY_AUTH_TOKEN", None)


def summary(rows: list[dict]) -> list[dict]:
    """One line per (task, rule, init, d_head, n_layers, optimiser, steps): the learning-rate grid folded.

    Losses are means over seeds (a diverged seed counts at its initial loss).  ``lr_sensitivity``
    is Wortsman et al.'s (2023): the mean over the LR grid of min(final loss, initial loss),
    minus the best final loss; 0 means the rule does not care about the learning rate.
    """
    cells: dict[tuple, dict[float, list[dict]]] = {}
    for row in rows:
        spec = row["spec"]
        group = tuple(spec.get(k) for k in ("task", "rule", "init", "d_head", "n_layers", "optimiser", "steps"))
        cells.setdefault(group, {}).setdefault(spec["lr"], []).append(row["result"])
    out = []
    for (task, rule, init, d_head, n_layers, optimiser, steps), by_lr in sorted(cells.items(), key=lambda kv: str(kv[0])):
        per_lr = {}
        for lr, results in by_lr.items():
            initial = sum(r["initial_val_loss"] for r in results) / len(results)
            final = sum(r["final_val_loss"] if r["final_val_loss"] is not None else initial for r in results) / len(results)
            accs = [r["final_val_acc"] or 0.0 for r in results] if results[0]["chance_acc"] is not None else None
            per_lr[lr] = {"initial": initial, "final": final, "acc": sum(accs) / len(accs) if accs else None,
                          "diverged": sum(r["status"] == "diverged" for r in results), "seeds": len(results)}
        best_lr = min(per_lr, key=lambda lr: per_lr[lr]["final"])
        capped = [min(v["final"], v["initial"]) for v in per_lr.values()]
        out.append({
            "task": task, "rule": rule, "init": init, "d_head": d_head, "layers": n_layers, "optimiser": optimiser,
            "steps": steps, "lrs": len(per_lr), "seeds": max(v["seeds"] for v in per_lr.values()),
            "best_lr": best_lr, "best_final_loss": per_lr[best_lr]["final"], "acc_at_best": per_lr[best_lr]["acc"],
            "diverged": sum(v["diverged"] for v in per_lr.values()),
            "lr_sensitivity": (sum(capped) / len(capped) - per_lr[best_lr]["final"]) if len(per_lr) > 1 else None,
        })
    return out
