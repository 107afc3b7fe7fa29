"""From labs to report: run (or reuse) every lab, judge, draw, and write the files.

``run_labs`` runs the experiments through the SQLite store; ``build_report`` turns their
results into the report.json contract (:mod:`.schema`) and renders report.md and a
self-contained index.html from it.  Files are written to temporary names and renamed, so
an interrupted run leaves no half-written report.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime as dt
import json
import math
import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from .. import __version__, answer, claims, lab, timings
from ..errors import UserError, WriteError
from ..runs import RunStore, default_workers, drained, progress_queue, worker_pool
from ..paths import FolderLock, check_folder, check_outputs, replace_set
from ..runtime import check_device, check_seed
from ..store import Store, config_key
from ..threads import torch_threads
from . import fonts
from .render import render_html, render_markdown

Progress = Callable[[str, float, str], None]


def run_labs(preset: str, seed: int, device: str, store: Store, labs: tuple[str, ...], fresh: bool = False,
             progress: Progress | None = None, run_store: RunStore | None = None,
             figure_dir: Path | None = None) -> dict[str, dict]:
    """Run each lab's preset (or read it from the store); returns {lab: {result, seconds, cached, config}}.

    With more than one core, the labs that run in this process alone (all but the training
    lab, which has worker processes of its own) run side by side in worker processes, each
    on one torch thread as in this process, while the training lab runs here; each result is
    stored as soon as it is back.  With ``figure_dir``, those workers also draw their lab's
    figures into it (the lab's entry gains ``figures``, as :func:`draw` returns them).
    """
    runs, todo = {}, {}
    for name in labs:
        module = lab.load(name)
        config = lab.config_for(name, preset, seed=seed, device=device)
        key, config_text = config_key(name, lab.REGISTRY[name].stored_version(), config)
        stored = None if fresh else store.get(key)
        if stored is not None:
            result, seconds = stored
            if not store.has_digest(key):  # a row with a digest is this code's own output, checked on opening
                raise UserError(f"the {name} row stored in {str(store.path)!r} (key {key!r}) carries no digest of "
                                "this attnscale's: it was put there by hand or by an older attnscale, so its numbers are not known "
                                "to be this lab's; rerun with --fresh to compute it again")
            runs[name] = {"result": result, "seconds": seconds, "cached": True, "config": json.loads(config_text)["config"]}
            if progress:
                progress(name, 1.0, "reused stored result")
        else:
            todo[name] = (module, config, key, config_text)
    if progress:
        for name in todo:
            progress(name, 0.0, "waiting")  # one bar per lab, in the labs' order

    def keep(name: str, result: dict, seconds: float, figures: dict | None = None) -> None:
        _, _, key, config_text = todo[name]
        unrepeatable = lab.REGISTRY[name].unrepeatable(result)
        if progress:
            progress(name, 1.0, f"done in {seconds:.1f} s" + (f"; not stored: {unrepeatable}" if unrepeatable else ""))
        if not unrepeatable:  # a result made under a broken environment is used once, never reused
            store.put(key, name, config_text, result, seconds)
        runs[name] = {"result": result, "seconds": seconds, "cached": False, "config": json.loads(config_text)["config"],
                      **({"figures": figures} if figures is not None else {})}

    alone = [name for name in todo if not lab.REGISTRY[name].uses_run_store]
    side_pool = side_workers(len(alone))
    beside = longest_first(alone, preset) if len(alone) > 1 and side_pool > 1 else []
    here = [name for name in todo if name not in beside]
    with SideLabs({name: todo[name][1] for name in beside}, keep, progress, figure_dir, side_pool) as side:
        for name in here:
            module, config, _, _ = todo[name]
            keep(name, *_run_here(name, module, config, store, fresh, side.passing_on(progress), run_store))
        side.finish()
    return {name: runs[name] for name in labs}


def longest_first(names: list[str], preset: str) -> list[str]:
    """``names`` ordered by their measured time in ``preset`` (data/timings.json), longest first: the side
    labs' pool then starts the longest lab at once rather than after the short ones, so it does not run
    on alone after the rest have finished (labs without a measured time keep their order, last)."""
    measured = timings.load().get(preset, {}).get("labs", {})
    return sorted(names, key=lambda name: -measured.get(name, 0.0))


def _run_here(name: str, module, config, store: Store, fresh: bool, progress: Progress | None,
              run_store: RunStore | None = None) -> tuple[dict, float]:
    start = time.perf_counter()
    options = {}
    if lab.REGISTRY[name].uses_run_store:
        options["store"] = run_store or run_store_beside(store.path, fresh)
    result = module.run(config, progress=(lambda f, m: progress(name, f, m)) if progress else None, **options)
    return result, time.perf_counter() - start


def run_store_beside(results_path: Path, fresh: bool) -> RunStore:
    """runs.sqlite next to the results store; with ``fresh``, it sees only runs stored from now on."""
    return RunStore(results_path.with_name("runs.sqlite"), since=time.time() if fresh else None)


# The side labs' workers run at the report's own priority, beside the training lab's: a lower one (the
# idle scheduling class, used before) let any other busy process on the machine starve them, so under
# load the report waited for the machine to go idle (1.95x its quiet time beside one busy process on 2
# cores, where this takes 1.35x; quiet it costs the training lab the cores it used to leave idle:
# bench/report_under_load.py, docs/benchmarks.md).
#
# What one side-lab worker process may hold at its peak: its interpreter, torch and the largest side lab's work.
# Measured alone, full preset (max RSS): audit 1,611 MB, variance 1,054, doctor 902, length 801 at initialisation
# (8 GB before its Monte Carlo went by blocks of rows), numerics 643, saturation 369, history 61.
SIDE_LAB_WORKER_BYTES = 1700 * 10**6


def side_workers(labs: int) -> int:
    """How many worker processes run the side labs: one per core, at most one per lab, and no more than free
    memory holds (fewer than 2: the labs run in this process, one after the other)."""
    from ..memory import workers_that_fit

    return workers_that_fit(min(default_workers(), labs), per_worker=SIDE_LAB_WORKER_BYTES)


class SideLabs:
    """Labs run side by side in a pool of worker processes (:func:`side_workers`) while this process goes
    on; ``keep(name, result, seconds)`` is called here, in this thread, for each as it comes back
    (from :meth:`poll`, which the work done here calls through :meth:`passing_on`, and from
    :meth:`finish`).  A lab's error is raised from whichever of them sees it first.  When the
    work done here fails, the labs still running are waited for and kept before the error goes
    on (an interrupt stops them)."""

    def __init__(self, configs: dict, keep: Callable[..., None], progress: Progress | None,
                 figure_dir: Path | None = None, workers: int = 1):
        self.configs, self.keep, self.progress = configs, keep, progress
        self.workers = workers  # run_labs's side_workers(), worked out once
        self.figure_dir = figure_dir
        self.futures: dict[cf.Future, str] = {}
        self.kept: set[str] = set()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "SideLabs":
        if self.configs:
            context = multiprocessing.get_context("spawn")
            self.queue = context.Queue()
            pool = self._stack.enter_context(worker_pool(context, self.workers, 1,
                                                         self.queue))
            self.futures = {pool.submit(_run_in_worker, name, config, self.figure_dir): name
                            for name, config in self.configs.items()}
        return self

    def __exit__(self, kind, error, trace) -> None:
        try:
            if kind is not None and issubclass(kind, Exception) and self.futures:
                with contextlib.suppress(Exception):  # the error here is the one to raise
                    self.finish()
        finally:
            self._stack.close()

    def passing_on(self, progress: Progress | None) -> Progress | None:
        """``progress``, which also polls the side labs each time it is called."""
        if not self.futures:
            return progress

        def both(name: str, fraction: float, message: str) -> None:
            if progress:
                progress(name, fraction, message)
            self.poll()
        return both

    def poll(self) -> None:
        """Pass on the workers' progress reports; keep the labs that are done."""
        if not self.futures:
            return
        for name, fraction, message in drained(self.queue):
            if self.progress and name not in self.kept:  # a report can arrive after its lab's result
                self.progress(name, min(fraction, 0.99), message)
        for future in [f for f in self.futures if f.done()]:
            name = self.futures.pop(future)
            self.keep(name, *future.result())
            self.kept.add(name)

    def finish(self) -> None:
        """Wait for every side lab and keep it."""
        while self.futures:
            cf.wait(list(self.futures), timeout=0.2, return_when=cf.FIRST_COMPLETED)
            self.poll()


def _run_in_worker(name: str, config, figure_dir: Path | None = None) -> tuple[dict, float, dict | None]:
    """(result, seconds, figures or None): the lab's run, and with ``figure_dir`` its figures drawn there."""
    queue = progress_queue()
    module = lab.load(name)
    start = time.perf_counter()
    with torch_threads(1):
        result = module.run(config, progress=lambda fraction, message: queue.put((name, fraction, message)))
    seconds = time.perf_counter() - start
    return result, seconds, None if figure_dir is None else draw(module, result, figure_dir)


def draw(module, result: dict, figure_dir: Path) -> dict[str, list[str]]:
    """A lab's figures drawn into ``figure_dir``: {key: ["figures/<file>", ...]}, as the report links them."""
    return {key: [f"figures/{p}" for p in paths] for key, paths in module.figures(result, figure_dir).items()}


def reproduce_command(lab_name: str, preset: str, seed: int) -> str:
    return f"attnscale {lab_name} --preset {preset} --seed {seed}"


def _clean(value):
    """JSON has no NaN/inf: they become null (the evidence text still says what happened)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def build_report(preset: str = "quick", seed: int = 0, out: str | Path = "attnscale-report", fresh: bool = False,
                 device: str = "cpu", labs: tuple[str, ...] | None = None, store_path: str | Path | None = None,
                 progress: Progress | None = None) -> dict:
    """Run the labs and write report.json, report.md, figures/ and index.html into ``out``."""
    if preset not in lab.PRESET_NAMES:
        raise UserError(f"unknown preset {preset!r}; accepted: {', '.join(lab.PRESET_NAMES)}")
    check_device(device)
    check_seed(seed)
    labs = lab.LABS if labs is None else labs
    for name in labs:
        if name not in lab.LABS:
            raise UserError(f"unknown lab {name!r}; accepted: {', '.join(lab.LABS)}")
    out = check_folder(out, "report folder")
    check_outputs(out, files=REPORT_FILES + ("results.sqlite", "runs.sqlite"), folders=("figures",))
    fonts.font_path()  # a bad ATTNSCALE_CJK_FONT is refused before any work
    if "history" in labs:
        from ..history.cache import check_can_unpack

        check_can_unpack()  # so is a read-only history cache the lab would need to unpack into
    # Both stores are checked before either is made, and made before any lab runs.  Labs made of
    # many training runs keep each finished group in runs.sqlite beside the results: a killed
    # report resumes where it stopped.
    store_path = Path(store_path or out / "results.sqlite")
    trains = any(lab.REGISTRY[name].uses_run_store for name in labs)
    Store.check(store_path)
    if trains:
        RunStore.check(store_path.with_name("runs.sqlite"))
    store = Store(store_path)
    run_store = run_store_beside(store_path, fresh) if trains else None
    with FolderLock(out, "the report folder"):  # made here, after every check: a refusal leaves nothing
        started = dt.datetime.now(dt.timezone.utc)
        start = time.perf_counter()
        # the labs run in workers draw their figures there as they finish; moved into the staged report after
        drawn = out / f".figures.{os.getpid()}.tmp"
        shutil.rmtree(drawn, ignore_errors=True)
        try:
            try:
                drawn.mkdir()
            except OSError as error:
                raise WriteError(f"could not write the report into {str(out)!r}: {error.strerror}", error.strerror) from None
            runs = run_labs(preset, seed, device, store, labs, fresh, progress, run_store, figure_dir=drawn)
            with staged(out) as staging:
                for figure in drawn.iterdir():
                    os.replace(figure, staging / "figures" / figure.name)
                report = _assemble(runs, preset, seed, device, started, start, staging / "figures")
                for name, text in (("report.json", json.dumps(report, indent=1, ensure_ascii=False)),
                                   ("report.md", render_markdown(report)), ("index.html", render_html(report, staging))):
                    (staging / name).write_text(text, encoding="utf-8")
        finally:
            shutil.rmtree(drawn, ignore_errors=True)
        report["seconds"] = round(time.perf_counter() - start, 2)
    return report


REPORT_FILES = ("report.json", "report.md", "index.html")


@contextlib.contextmanager
def staged(out: Path):
    """A hidden folder inside ``out`` that the report's files and figures are written into; when
    all are written they are renamed into place (figures first, index.html last), so a failure
    (a full disk, a kill) leaves the previous report as it was and no figure of a report that
    was not written.  On any failure the folder is removed; a disk's error names ``out``."""
    staging = out / f".report.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (staging / "figures").mkdir(parents=True)
        yield staging
    except (OSError, WriteError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        reason = getattr(error, "reason", None) or getattr(error, "strerror", None) or "the disk refused a write"
        raise WriteError(f"could not write the report into {str(out)!r}: {reason}; the folder was left as it "
                         "was", reason) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        (out / "figures").mkdir(exist_ok=True)
        # the figures an earlier report drew that this one does not (other labs, another preset) go with it
        replace_set(staging / "figures", out / "figures", sorted(f.name for f in (staging / "figures").iterdir()),
                    stale=list((out / "figures").glob("*.png")))
        for name in REPORT_FILES:
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def machine_line() -> str:
    """The machine a report was measured on, in words: its timings depend on it."""
    import os
    import platform

    import torch

    return (f"{os.cpu_count()} CPU cores, {platform.system()} {platform.machine()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def _assemble(runs: dict, preset: str, seed: int, device: str, started, start: float, figure_dir: Path) -> dict:
    """The report.json contract from the labs' results; the figures are drawn into ``figure_dir``."""
    findings, figures, tables = {}, {}, {}
    for name, run in runs.items():
        module = lab.load(name)
        findings[name] = module.judge(run["result"])
        figures[name] = run["figures"] if "figures" in run else draw(module, run["result"], figure_dir)
        tables[name] = module.tables(run["result"])

    claim_rows = claims.evaluate(findings)
    # the statements beyond the source are labelled only where their lab ran (a report of other labs has none)
    statement_rows = [row for row in claims.evaluate(findings, claims.STATEMENTS) if row["lab_verdicts"]]
    for row in claim_rows + statement_rows:
        row["figures"] = [path for name in row["experiments"] for path in figures.get(name, {}).get(row["id"], [])]
        row["commands"] = [reproduce_command(name, preset, seed) for name in row["experiments"] if name in runs]

    report = {
        "attnscale_version": __version__,
        "preset": preset,
        "seed": seed,
        "device": device,
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - start, 2),
        "machine": machine_line(),
        "labs": {name: {"seconds": round(run["seconds"], 2), "cached": run["cached"], "config": run["config"],
                        "figures": figures[name].get(name, []),
                        **{key: run["result"][key] for key in ("runs", "runs_reused") if key in run["result"]}}
                 for name, run in runs.items()},
        "claims": claim_rows,
        "statements": statement_rows,
        "experiments": {name: run["result"] for name, run in runs.items()},
        "tables": tables,
    }
    report = _clean(report)
    report["answer"] = {lang: answer.compose(report, lang) for lang in answer.LANGS}
    return report

