"""The audit from a target to its report: plan, audit each item (a family with its towers' rows, or a folder), in
order or over worker processes, compose the composites, report.

    plan("llama,llava")  ->  run_plan(items)  ->  report(records)

:func:`run_plan` returns the records as the whole audit settles them (:func:`.composite.compose`); the stages of one
model are :mod:`.measure`'s (build, feed, read, declare) and :mod:`.verdicts`' (judge).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ..errors import UserError
from ..probing.loading import check_model_dir, check_weights, quiet_transformers
from . import composite, families
from .composite import compose
from .record import COVERED, FAILING, AuditVerdict, FamilyAudit, SkipKind, Status, is_measured, partly_read
from .verdicts import CAP_TOL, DEFAULT_BACKENDS, DEPENDENCE_TOL, FACTOR_TOL, PARITY_TOL, AUDIT_VERDICTS, family_row


def is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long for a path: a list of families
        return False



def plan(target: str | None) -> list[tuple[str, str]]:
    """What to audit: ("family", model_type) or ("folder", path) items, checked before anything runs."""
    if target is None:
        return [("family", family.model_type) for family in families.all_families()]
    path = Path(target).expanduser()
    if "/" in target or target.startswith(".") or is_folder(path):
        checked = check_model_dir(path)
        check_weights(checked, required=False)
        return [("folder", str(checked))]
    names = [name.strip() for name in target.split(",") if name.strip()]
    if not names:
        raise UserError(f"no family in {target!r}; accepted: comma-separated model types (attnscale audit --list)")
    for name in names:
        families.config_class(name)
    return [("family", name) for name in dict.fromkeys(names)]



def run_plan(items, backends=DEFAULT_BACKENDS, seed: int = 0, progress=None, workers: int = 1) -> list[FamilyAudit]:
    """Audit each item, in order; ``workers`` > 1 spreads the items over that many processes
    (each audits whole families; the results come back in the items' order).  The records come back composed
    (:func:`.composite.compose`): a composite covered by its towers says so."""
    if parallel_workers(items, workers) > 1:
        return compose(run_parallel(items, backends, seed, progress, workers))
    results = []
    for done, item in enumerate(items, start=1):
        rows = audit_item(item, backends, seed)
        results += rows
        if progress:
            progress(done, rows[0].family, sum(r.seconds for r in rows))
    return compose(results)



def parallel_workers(items, workers: int) -> int:
    """How many processes :func:`run_plan` uses: ``workers`` where there are enough items to share (more than 4
    each: a worker's start costs about what auditing a few families does), else 1 (this process)."""
    return workers if workers > 1 and len(items) > 4 * workers else 1


def audit_item(item, backends, seed: int) -> list[FamilyAudit]:
    """One planned item's rows: a folder's or a family's, then the rows of a composite's towers that
    have no base model of their own.  A composite those rows cannot cover (a tower left unmeasured,
    as a mask decoder with no model class of its own, or attention classes of its own) is built and
    audited whole; where that measures it, its row takes the place of the composite's skipped one."""
    # transformers' notes on the tiny configs (a layer type it forces) and torch's on kernels (a padding copy) say
    # nothing of the factor; the reading is the audit's to report
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return item_rows(item, backends, seed)



def item_rows(item, backends, seed: int) -> list[FamilyAudit]:
    kind, name = item
    return composite.folder_rows(name, backends, seed) if kind == "folder" else composite.family_rows(name, backends, seed)



# What one audit worker process may hold at its peak: its interpreter, torch, transformers' modelling code and the
# models it builds (one process auditing all 601 families peaked at 1,611 MB, transformers 5.25 on CPU).
AUDIT_WORKER_BYTES = 1700 * 10**6


def workers_within_memory(workers: int, chosen: bool) -> int:
    """``workers`` processes if their own cost fits in free memory.  A count the user chose (``--workers``) that
    does not fit is refused, naming the most that would; the default is cut to that many (1: in this process)."""
    from ..memory import format_bytes, require_memory, workers_that_fit

    if workers <= 1:
        return workers
    fitting = workers_that_fit(workers, per_worker=AUDIT_WORKER_BYTES)
    if fitting < workers and chosen:
        require_memory(workers * AUDIT_WORKER_BYTES, f"{workers} audit worker processes ({format_bytes(AUDIT_WORKER_BYTES)} "
                       "each at its peak)",
                       f"use --workers {fitting} or fewer" if fitting > 1 else "use --workers 1 (this process alone)")
    return max(1, fitting)


def run_parallel(items, backends, seed: int, progress, workers: int) -> list[FamilyAudit]:
    """The items over the project's worker pool (:func:`attnscale.runs.worker_pool`: workers that
    die with this process, one torch thread each per core), whole families per task."""
    import concurrent.futures as cf
    import multiprocessing

    from ..runs import default_workers, worker_pool

    context = multiprocessing.get_context("spawn")
    results: list = [[] for _ in items]
    threads = max(1, default_workers() // workers)
    with worker_pool(context, workers, threads, None) as pool:
        futures = {pool.submit(audit_item, item, tuple(backends), seed): index for index, item in enumerate(items)}
        for done, future in enumerate(cf.as_completed(futures), start=1):
            rows = future.result()
            results[futures[future]] = rows
            if progress:
                progress(done, rows[0].family, sum(r.seconds for r in rows))
    return [row for rows in results for row in rows]



def coverage(results: list[FamilyAudit]) -> dict:
    """How many of the attention-bearing families (all but those without an attention module) were
    measured, covered by their towers, or left unmeasured (each with its reason)."""
    towers = [r for r in results if r.tower_of]
    results = [r for r in results if not r.tower_of]
    bearing = [r for r in results if r.skip != SkipKind.NO_ATTENTION]
    measured = sum(map(is_measured, bearing))
    covered = sum(r.status == Status.COVERED for r in bearing)
    # attention with no softmax over q.k (RWKV's recurrence, YOSO's hashing, ...): named, nothing to measure
    no_softmax = sum(r.skip == SkipKind.NO_SOFTMAX for r in bearing)
    unmeasured = len(bearing) - measured - covered - no_softmax
    partly = sorted(r.family for r in bearing if partly_read(r))
    return {"families": len(results), "attention_bearing": len(bearing), "measured": measured, "covered": covered,
            "no_softmax": no_softmax, "unmeasured": unmeasured, "unmeasured_share": unmeasured / len(bearing) if bearing else 0.0,
            "measured_partly": len(partly), "partly_read": partly,
            "tower_rows": len(towers), "tower_rows_measured": sum(map(is_measured, towers))}



def overall_verdict(results: list[FamilyAudit]) -> dict:
    """The whole audit's verdict (:class:`attnscale.scale_check.ModelVerdict`): ``mismatch`` where any row (a family,
    a folder or a tower row) is a mismatch or a backend disagreement; else ``incomplete`` where a model with
    attention was not wholly measured (skipped, not measured, or leaving an attention module unread) and no tower
    rows cover it; else ``ok``.  With the rows behind it."""
    from ..scale_check import EXIT_CODES, ModelVerdict

    failing = [r.family for r in results if r.verdict in FAILING]
    incomplete = [r.family for r in results if r.skip not in (SkipKind.NO_ATTENTION, SkipKind.NO_SOFTMAX)
                  and r.status != Status.COVERED and r.verdict not in FAILING
                  and (r.verdict == AuditVerdict.INCOMPLETE
                       or not r.tower_of and (r.status == Status.SKIPPED or r.verdict != AuditVerdict.OK))]
    overall = ModelVerdict.MISMATCH if failing else ModelVerdict.INCOMPLETE if incomplete else ModelVerdict.OK
    return {"verdict": str(overall), "exit_code": EXIT_CODES[overall], "failing": failing, "incomplete": incomplete}


def report(results: list[FamilyAudit], backends, seconds: float) -> dict:
    """The audit as plain data: a table row per family, every measurement, the counts (``results``: composed
    records, as :func:`run_plan` returns them)."""
    import transformers

    counts = {verdict: 0 for verdict in (*AUDIT_VERDICTS, COVERED, "skipped")}
    for result in results:
        if not result.tower_of:  # the families; tower rows are counted in coverage
            counts["skipped" if result.status == Status.SKIPPED else result.verdict] += 1
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "backends": list(backends),
        "seconds": round(seconds, 2),
        "tolerances": {"factor": FACTOR_TOL, "cap": CAP_TOL, "dependence": DEPENDENCE_TOL,
                       "parity_float32": PARITY_TOL[torch.float32]},
        "counts": counts,
        "coverage": coverage(results),
        **overall_verdict(results),
        "rows": [family_row(result, backends) for result in results],
        "families": [result.to_dict() for result in results],
    }
