"""Sweep execution: many training runs, batched into groups, in worker processes or on Ray, into SQLite.

A run is a :class:`attnscale.train.RunSpec` (task, rule, init, d_head, n_layers, lr,
optimiser, steps, seed, ...), identified by a hash of its fields and the training engine's
VERSION.  :func:`execute` runs the specs that the store does not hold yet.  Runs that
share a shape are trained together as one program (:func:`attnscale.train.train_group`),
at most ``batch_runs`` to a group (1 trains each run alone, on the plain one-run path), and
at most as many as :func:`attnscale.train.spec.shape_cap` allows for the shape (beyond it a
group's tensors outgrow the CPU's caches and batching costs more than it saves):

* ``executor="local"`` (default): a pool of ``workers`` spawned processes, each with
  cores // workers torch threads, one group per task.  A worker that dies (killed, out of
  memory) breaks the pool; the pool is restarted and the groups in flight are run again.
  A worker whose parent process is gone (the sweep was killed with kill -9) exits within
  a second or two instead of living on as an orphan.  When the work is done (or failed),
  the workers get ``POOL_GRACE_SECONDS`` to leave and are then terminated (:func:`shut_down`).
* ``executor="ray"``: one Ray task per group, on the cluster at ``address``, or on a local
  Ray instance started for the sweep (its files under ``ray_dir``, HOME untouched).

Only the parent process writes the store, one transaction per finished group (``INSERT OR
IGNORE`` on the key): a sweep killed with kill -9 loses only the groups in flight, and
rerunning it skips every run already stored.  A diverged run (NaN/inf loss) is a finished
run: its row says at which step.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Iterator

from . import checks, scaling
from .errors import UserError
from .store import SQLiteTable, digested, row_digest
from .threads import keep_freed_heap
from .train import RunSpec, as_spec, group_specs, run_key, train, train_group
from .train.spec import head_width

EXECUTORS = ("local", "ray")
MAX_POOL_RESTARTS = 3
POOL_GRACE_SECONDS = 5.0  # how long a finished pool's workers get to leave before they are terminated

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL,
    digest TEXT
)
"""

Progress = Callable[[int, int, str], None]  # (done, total, message)


DEFAULT_BATCH_RUNS = 24   # runs per group: enough to amortise the per-op overhead on a CPU
PARENT_POLL_SECONDS = 1.0  # how often a worker checks that its parent is alive


def spec_dict(spec) -> dict:
    """A RunSpec (or a dict of its fields) as a plain dict, validated and with defaults filled."""
    return dataclasses.asdict(as_spec(spec))


class RunStore(SQLiteTable):
    """The ``runs`` table of one SQLite file: one row per finished run.

    ``since`` (a time.time() value): see only the runs stored from then on (a fresh start
    that still keeps every finished group, so that a killed run resumes).
    """

    schema = SCHEMA
    digest_columns = ("key", "spec", "status", "result", "seconds", "created")

    def __init__(self, path: str | Path, since: float | None = None, readonly: bool = False):
        super().__init__(path, readonly=readonly)
        self.since = 0.0 if since is None else since

    # The rows this store reads: those stored since ``since`` that carry a digest.  A row without
    # one (put there by hand, or by an attnscale whose digests did not cover every column) is not known to be a run's
    # output: it is trained again, and the new row replaces it.
    @property
    def _verified(self) -> str:
        return f"created >= ? AND {digested()}" if self.digests else "created >= ? AND 0"  # 0: an old read-only store

    def keys(self) -> set[str]:
        with self._connect() as db:
            return {row[0] for row in db.execute(f"SELECT key FROM runs WHERE {self._verified}", (self.since,))}

    def unverified(self) -> int:
        """How many stored rows carry no digest of the current format (left out of :meth:`keys`, :meth:`get` and :meth:`rows`)."""
        with self._connect() as db:
            where = f"WHERE NOT coalesce({digested()}, 0)" if self.digests else ""
            return db.execute(f"SELECT COUNT(*) FROM runs {where}").fetchone()[0]

    def put(self, key: str, spec: dict, result: dict, seconds: float) -> None:
        """Store one finished run in a single transaction; a key already stored is left as it is."""
        self.put_many([(key, spec, result, seconds)])

    def put_many(self, rows: list[tuple[str, dict, dict, float]]) -> None:
        """Store finished runs [(key, spec, result, seconds)] in one transaction: all of them or none."""
        now = time.time()
        db = self._connect()
        try:
            with db:
                # A run stored before ``since``, or without a digest, is replaced; one stored since is kept as it is.
                db.executemany(
                    "INSERT INTO runs (key, spec, status, result, seconds, created, digest) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET spec = excluded.spec, status = excluded.status, "
                    "result = excluded.result, seconds = excluded.seconds, created = excluded.created, "
                    f"digest = excluded.digest WHERE runs.created < ? OR NOT coalesce({digested('runs.digest')}, 0)",
                    [self._row(key, spec, result, seconds, now) for key, spec, result, seconds in rows],
                )
        finally:
            db.close()

    def _row(self, key: str, spec: dict, result: dict, seconds: float, now: float) -> tuple:
        values = (key, json.dumps(spec, sort_keys=True), result["status"], json.dumps(result), float(seconds), now)
        return (*values, row_digest(*values), self.since)

    def get(self, key: str) -> dict | None:
        with self._connect() as db:
            row = db.execute(f"SELECT result FROM runs WHERE key = ? AND {self._verified}", (key, self.since)).fetchone()
        return json.loads(row[0]) if row else None

    def rows(self) -> list[dict]:
        """Every stored run with a digest: {"key", "spec", "status", "result", "seconds"}, oldest first."""
        with self._connect() as db:
            found = db.execute(f"SELECT key, spec, status, result, seconds FROM runs WHERE {self._verified} "
                               "ORDER BY created, key", (0.0,)).fetchall()
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

    def put_many(self, rows) -> None:
        for row in rows:
            self.put(*row)

    def get(self, key):
        row = self._rows.get(key)
        return row["result"] if row else None

    def rows(self) -> list[dict]:
        return list(self._rows.values())


def save_checkpoint(spec: dict, model, checkpoint_dir: str) -> None:
    """The run's final weights to ``<checkpoint_dir>/<key>.safetensors`` (its spec in the metadata)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    from .paths import write_atomic

    folder = Path(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    write_atomic(folder / f"{run_key(spec)}.safetensors",
                 lambda tmp: save_file(tensors, str(tmp), metadata={"spec": json.dumps(spec)}),
                 disk_errors=(SafetensorError,))


def run_one(spec: dict, checkpoint_dir: str | None = None) -> tuple[dict, float]:
    """Train one run on the plain one-run path (in whatever process calls it); returns (result, seconds)."""
    start = time.perf_counter()
    result, model = train(RunSpec(**spec), return_model=True)
    if checkpoint_dir is not None:
        save_checkpoint(spec, model, checkpoint_dir)
    return result, time.perf_counter() - start


STEP_REPORT_EVERY = 10  # steps between a worker's progress messages
_progress_queue = None   # set in a pool worker: where it reports the steps its group has done


def run_group(specs: list[dict], checkpoint_dir: str | None = None, group: int = 0,
              step_progress=None) -> list[tuple[dict, float]]:
    """Train a group of runs of one shape (one run: the plain path; more: batched); returns
    [(result, seconds)] in the order of ``specs``, each run charged an equal share of the time.
    ``step_progress(group, step, steps)`` (or, in a pool worker, the pool's queue) hears of the
    batched path's steps."""
    if len(specs) == 1:
        return [run_one(specs[0], checkpoint_dir)]
    if step_progress is None and _progress_queue is not None:
        step_progress = lambda g, step, steps: _progress_queue.put((g, step, steps))  # noqa: E731
    report = None
    if step_progress is not None:
        def report(step, steps):
            if step % STEP_REPORT_EVERY == 0 or step == steps:
                step_progress(group, step, steps)
    start = time.perf_counter()
    results, models = train_group([RunSpec(**s) for s in specs], return_models=True, progress=report)
    if checkpoint_dir is not None:
        for spec, model in zip(specs, models):
            save_checkpoint(spec, model, checkpoint_dir)
    share = (time.perf_counter() - start) / len(specs)
    return [(result, share) for result in results]


def _watch_parent(parent: int) -> None:
    """Exit this worker once its parent is gone (re-parented to init or a subreaper)."""
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


def _die_with_parent() -> None:
    """Linux: ask the kernel to kill this process the moment its parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def progress_queue():
    """In a pool worker: the queue its progress reports go back through (None elsewhere)."""
    return _progress_queue


def init_worker(threads: int, parent: int | None = None, queue=None) -> None:
    """Set up a pool worker: ``threads`` torch threads, killed with ``parent`` (a pid), and
    ``queue`` for its progress reports (see :func:`progress_queue`)."""
    import torch

    global _progress_queue
    _progress_queue = queue
    torch.set_num_threads(threads)
    keep_freed_heap()
    if parent is not None:
        _die_with_parent()
        if os.getppid() != parent:  # the parent died before the kernel could be asked
            os._exit(1)
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()  # where prctl is missing


@contextlib.contextmanager
def worker_pool(context, workers: int, threads: int, queue, grace: float = POOL_GRACE_SECONDS
                ) -> Iterator[cf.ProcessPoolExecutor]:
    """A process pool of ``workers`` (set up by :func:`init_worker`) that :func:`shut_down`
    stops on the way out, whether its work finished or failed."""
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                                  initargs=(threads, os.getpid(), queue))
    try:
        yield pool
    finally:
        shut_down(pool, grace)


def shut_down(pool: cf.ProcessPoolExecutor, grace: float = POOL_GRACE_SECONDS) -> None:
    """Stop ``pool``: cancel what has not started, give the workers ``grace`` seconds to
    leave, terminate the ones still there.

    A plain ``shutdown()`` can wait forever: a worker killed while it waited for work holds
    the task queue's lock for good, and when that death coincides with the last result,
    CPython's executor shuts down normally and waits for the other workers, which wait for
    that lock.  (The executor's worker processes and manager thread are private
    attributes; they have kept their names since Python 3.9.)"""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
            worker.join()
    if manager is not None:
        manager.join()


class KeptPool:
    """A local worker pool kept across several :func:`execute` calls (a lab's rounds of runs), so
    that its workers start once: spawning two workers that import torch costs about 5 s a round.

    Use it as a context manager; a broken pool (a worker died) is replaced on the next call.
    """

    def __init__(self, workers: int | None = None, threads: int | None = None):
        self.workers = check_options("local", workers)
        self.chosen_threads = threads
        self.threads = threads or max(1, default_workers() // self.workers)
        self.context = multiprocessing.get_context("spawn")
        self.pool: cf.ProcessPoolExecutor | None = None
        self.queue = None

    def get(self) -> tuple[cf.ProcessPoolExecutor, object]:
        if self.pool is None:
            self.queue = self.context.Queue()
            self.pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=self.context,
                                               initializer=init_worker, initargs=(self.threads, os.getpid(), self.queue))
        else:
            for _ in drained(self.queue):  # reports of groups an earlier call finished
                pass
        return self.pool, self.queue

    def shrink(self, workers: int) -> None:
        """At most ``workers`` processes from now on (a pool already started is started again), each with its
        share of the cores unless threads were chosen."""
        if workers < self.workers:
            self.discard()
            self.workers = workers
            self.threads = self.chosen_threads or max(1, default_workers() // workers)

    def discard(self) -> None:
        if self.pool is not None:
            shut_down(self.pool)
        self.pool = self.queue = None

    def __enter__(self) -> "KeptPool":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def ray_run_group(specs: list[dict], checkpoint_dir: str | None = None) -> list[tuple[dict, float]]:
    """run_group inside a Ray worker, on one torch thread (Ray gives each task one CPU)."""
    init_worker(1)
    return run_group(specs, checkpoint_dir)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_options(executor: str, workers: int | None, address: str | None = None) -> int:
    if executor not in EXECUTORS:
        raise UserError(f"unknown executor {executor!r}; accepted: {', '.join(EXECUTORS)}")
    if address is not None and executor != "ray":  # it would be silently ignored
        raise UserError(f"a Ray address ({address!r}) is read only with --executor ray, not with {executor!r}")
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UserError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


def group_bytes(groups: list[list[str]], todo: dict) -> list[int]:
    """What training each group takes in memory (train.spec.memory_estimate), in the groups' order."""
    from .train.spec import memory_estimate

    return [memory_estimate(as_spec(todo[keys[0]]), len(keys)) for keys in groups]


def workers_for_memory(workers: int, groups: list[list[str]], todo: dict) -> int:
    """The default worker count cut to what fits in free memory with its groups in flight (at least 1: a
    sweep that does not fit even so is refused by :func:`check_memory`, naming the sizes)."""
    from .memory import workers_that_fit

    if workers <= 1:
        return workers
    device = as_spec(todo[groups[0][0]]).device
    return max(1, workers_that_fit(workers, group_bytes(groups, todo), device=device))


def check_memory(groups: list[list[str]], todo: dict, workers: int) -> None:
    """Refuse, before any work, a sweep whose worker processes (each its own interpreter and torch) and
    largest groups in flight would not fit in free memory together, naming the most --workers that would."""
    from .memory import WORKER_PROCESS_BYTES, format_bytes, placed, require_memory, workers_that_fit

    sizes = sorted(group_bytes(groups, todo), reverse=True)
    device = as_spec(todo[max(groups, key=len)[0]]).device
    in_flight = max(1, min(workers, len(sizes)))
    processes = in_flight if workers > 1 else 0  # one worker trains in this process
    fitting = workers_that_fit(in_flight, sizes, device=device) if processes else 0
    hint = (f"use --workers {fitting} or fewer" if 0 < fitting < in_flight
            else "use fewer --workers, a smaller --batch-runs, or smaller models")
    what = (f"{in_flight} group(s) of up to {max(len(g) for g in groups)} runs in flight "
            f"(d_head up to {max(as_spec(todo[g[0]]).d_head for g in groups)})")
    if processes:
        what += f" in {processes} worker processes ({format_bytes(WORKER_PROCESS_BYTES)} each before their work)"
    for needed, where in placed(processes * WORKER_PROCESS_BYTES, sum(sizes[:in_flight]), device):
        require_memory(needed, what, hint, where)


def plan_groups(todo: dict[str, dict], batch_runs: int, workers: int) -> list[list[str]]:
    """The runs to do as groups of keys: runs of one shape, at most ``batch_runs`` each (and at
    most an even share per worker, so no worker starts idle, and at most the shape's cache-sized
    cap); the costliest groups first."""
    batch_runs = checks.positive_int("batch_runs", batch_runs)
    size = min(batch_runs, max(1, -(-len(todo) // workers)))
    specs = {key: as_spec(spec) for key, spec in todo.items()}
    groups = [[run_key(s) for s in group] for group in group_specs(list(specs.values()), size)]

    def cost(group):
        s = specs[group[0]]
        kinds = [scaling.parse(specs[key].rule).kind for key in group]
        return len(group) * s.steps * s.n_layers * s.batch_size * (s.d_model + s.n_heads * head_width(s, kinds))

    return sorted(groups, key=cost, reverse=True)


def execute(specs, store=None, *, workers: int | None = None, executor: str = "local", address: str | None = None,
            ray_dir: str | Path | None = None, checkpoint_dir: str | Path | None = None,
            threads: int | None = None, batch_runs: int = DEFAULT_BATCH_RUNS,
            progress: Progress | None = None, pool: KeptPool | None = None) -> dict[str, dict]:
    """Run every spec the store lacks; return {key: result} for all of ``specs``.

    ``store``: a :class:`RunStore` (a path is accepted too) or None for an in-memory one.
    ``batch_runs``: most runs trained together as one group (1: each run alone).
    ``threads``: torch threads per local worker (default: cores // workers).  Duplicate specs
    run once.  With one local worker the groups run in this process.  ``pool``: a
    :class:`KeptPool` to run the local groups in (its workers and threads), kept for the next call.
    """
    chosen_workers = workers is not None
    workers = check_options(executor, workers, address)
    batch_runs = checks.positive_int("batch_runs", batch_runs)
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

    in_flight: dict[int, float] = {}  # group -> runs' worth of steps done

    def record(keys: list[str], outcomes: list[tuple[dict, float]], group: int | None = None) -> None:
        nonlocal finished
        store.put_many([(key, todo[key], result, seconds) for key, (result, seconds) in zip(keys, outcomes)])
        finished += len(keys)
        in_flight.pop(group, None)
        if progress:
            progress(min(total, finished + sum(in_flight.values())), total, f"{finished}/{total} runs")

    def steps_done(group: int, size: int, step: int, steps: int) -> None:
        in_flight[group] = size * step / steps
        if progress:
            progress(min(total, finished + sum(in_flight.values())), total, f"{finished}/{total} runs")

    if progress:
        progress(finished, total, f"{finished}/{total} runs already stored")
    if todo:
        groups = plan_groups(todo, batch_runs, workers)
        fitting = workers_for_memory(workers, groups, todo) if executor == "local" and not chosen_workers else workers
        if fitting < workers:  # the default, cut to what memory holds
            workers = fitting
            if pool is not None:
                pool.shrink(workers)
        check_memory(groups, todo, workers if executor == "local" else 1)
        if executor == "ray":
            _ray_execute(groups, todo, workers, address, ray_dir, ckpt, record)
        elif workers == 1:
            _in_process_execute(groups, todo, ckpt, record, threads, steps_done)
        elif pool is not None:
            _kept_execute(groups, todo, pool, ckpt, record, steps_done)
        else:
            _local_execute(groups, todo, workers, ckpt, record, threads, steps_done)
    return {key: store.get(key) for key in wanted}


def _in_process_execute(groups: list[list[str]], todo: dict, ckpt, record, threads: int | None, steps_done) -> None:
    from .threads import torch_threads

    with torch_threads(threads or default_workers()):
        for index, keys in enumerate(groups):
            report = lambda g, step, steps, size=len(keys): steps_done(g, size, step, steps)  # noqa: E731
            record(keys, run_group([todo[k] for k in keys], ckpt, index, report), index)


def _local_execute(groups: list[list[str]], todo: dict, workers: int, ckpt, record, threads: int | None,
                   steps_done) -> None:
    """The groups in a pool of its own, started for this call and stopped after it."""
    with KeptPool(min(workers, len(groups)), threads or max(1, default_workers() // workers)) as kept:
        _kept_execute(groups, todo, kept, ckpt, record, steps_done)


def _run_in_pool(pool: cf.ProcessPoolExecutor, queue, remaining: dict[int, list[str]], todo: dict, ckpt, record,
                 steps_done) -> None:
    futures = {pool.submit(run_group, [todo[k] for k in keys], ckpt, index): index for index, keys in remaining.items()}
    pending = set(futures)
    while pending:
        done, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
        _drain(queue, remaining, steps_done)
        for future in done:
            index = futures[future]
            record(remaining[index], future.result(), index)
            remaining.pop(index)


def _kept_execute(groups: list[list[str]], todo: dict, kept: KeptPool, ckpt, record, steps_done) -> None:
    remaining = dict(enumerate(groups))
    for _attempt in range(MAX_POOL_RESTARTS + 1):
        pool, queue = kept.get()
        try:
            _run_in_pool(pool, queue, remaining, todo, ckpt, record, steps_done)
            return
        except BrokenProcessPool:
            kept.discard()  # a worker died: the groups it and its peers held are run again in a new pool
    raise RuntimeError(f"the worker pool broke {MAX_POOL_RESTARTS + 1} times; {len(remaining)} groups not done")


def drained(queue):
    """The reports a worker pool's progress queue holds now, oldest first."""
    import queue as queues

    while True:
        try:
            yield queue.get_nowait()
        except (queues.Empty, OSError, EOFError):
            return


def _drain(queue, groups: dict[int, list[str]], steps_done) -> None:
    """Pass on the step counts the workers have reported since the last call."""
    for index, step, steps in drained(queue):
        if index in groups:
            steps_done(index, len(groups[index]), step, steps)


RAY_MISSING = ("--executor ray needs Ray, which is not installed; install it with "
               "`pip install 'attnscale[ray]'` (or `pip install 'ray[default]'`), or use --executor local")


def _ray_execute(groups: list[list[str]], todo: dict, workers: int, address, ray_dir, ckpt, record) -> None:
    try:
        import ray
    except ImportError:
        raise UserError(RAY_MISSING) from None
    started_here, set_token, reaper = not ray.is_initialized(), False, None
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
            # Ray's agents outlive a sweep killed with kill -9: a watcher in its own session kills them then.
            reaper = subprocess.Popen([sys.executable, "-m", "attnscale.reaper", str(os.getpid())],
                                      start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
    try:
        remote = ray.remote(num_cpus=1)(ray_run_group)
        pending = {remote.remote([todo[k] for k in keys], ckpt): keys for keys in groups}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                record(pending.pop(ref), ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
        if reaper is not None:
            reaper.kill()
            reaper.wait()
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
