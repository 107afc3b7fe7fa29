"""How old implementations scaled attention, checked against the released code itself.

Why: "the original Transformer and BERT divide q.k by sqrt(d_k)" is a claim about published
code.  This subpackage fetches the old distributions (:mod:`.releases`, :mod:`.cache`),
reads the scale statement out of their source by pattern (:mod:`.reader`), and for the
PyTorch ones also runs the attention and measures the factor (:mod:`.probe`).  Reading and
running must agree; when they do not, the row says so instead of picking one.

Entry points: :func:`factor_history` (one row per release) and :func:`format_table`.
Fill the cache first with ``attnscale history --fetch`` (:func:`.cache.fetch`), which set-up runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .releases import RELEASES, Release, find_release

if TYPE_CHECKING:
    from .probe import ProbeResult
    from .reader import ReadResult

# Loaded on first use, so that ``python -m attnscale.history.cache`` does not find its own
# module already imported by this package (runpy warns about that).
_LAZY = {"CacheStatus": "cache", "default_cache_dir": "cache", "fetch": "cache", "status": "cache",
         "ProbeResult": "probe", "probe_release": "probe", "ReadResult": "reader", "read_release": "reader"}

__all__ = ["RELEASES", "Release", "CacheStatus", "ProbeResult", "ReadResult", "default_cache_dir", "factor_history",
           "fetch", "find_release", "format_table", "probe_release", "read_release", "status"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def agreement(read: ReadResult, probe: ProbeResult | None) -> str:
    """``agree``, ``DISAGREE: ...``, ``read, not run`` or ``not checked: <why>``: never a silent choice."""
    if read.reading is None:
        return f"not checked: {read.status.state}"
    if not read.release.probed:
        return "read, not run"
    if probe is None:
        return "not run (run=False)"
    if probe.state != "measured":
        return f"not checked: probe {probe.state}"
    read_exponent = read.reading.forward_exponent
    if read_exponent is None:
        return f"not checked: the read factor depends on a setting whose default was not found; measured {probe.rule}"
    if probe.exponent is None or probe.rule == "other":
        return f"DISAGREE: read {read.reading.forward_rule}, measured other ({_measured_text(probe)})"
    if abs(read_exponent - probe.exponent) < 1e-9:
        return "agree"
    return f"DISAGREE: read {read.reading.forward_rule}, measured {probe.rule} ({_measured_text(probe)})"


def _measured_text(probe: ProbeResult) -> str:
    return ", ".join(f"d_k={d}: {s:.6g}" for d, s in sorted(probe.measured.items()))


def _status_text(read: ReadResult, probe: ProbeResult | None) -> str:
    if read.reading is None:
        return f"{read.status.state}: {read.status.reason}; {read.status.advice}"
    if probe is not None and probe.state == "failed":
        return f"probe failed: {probe.reason}"
    if read.reading.subject is None:
        return "read: the attention code was not found in this release"
    return "checked" if probe is not None and probe.state == "measured" else "read only"


def history_row(read: ReadResult, probe: ProbeResult | None) -> dict:
    """One release as a flat dict (see :func:`factor_history`)."""
    release, reading = read.release, read.reading
    measured = probe.measured if probe is not None and probe.state == "measured" else None
    return {
        "package": release.package,
        "version": release.version,
        "date": release.date,
        "language": release.language,
        "location": reading.where if reading else None,
        "scope": ".".join(reading.primary.scope) if reading and reading.primary else (reading.subject if reading else None),
        "statement": reading.primary.statement if reading and reading.primary else None,
        "formula": reading.primary.formula if reading and reading.primary else None,
        "factor_read": reading.summary if reading else None,
        "forward_read": reading.forward_rule if reading else None,
        "factor_measured": dict(measured) if measured else None,
        "rule_measured": probe.rule if measured else None,
        "agreement": agreement(read, probe),
        "status": _status_text(read, probe),
        "cache_state": read.status.state,
        "probe_state": probe.state if probe is not None else None,
        "notes": (list(reading.notes) if reading else []) + ([probe.reason] if probe is not None and probe.reason
                                                            and probe.state == "measured" else []),
        "stubs": list(probe.stubs_used) if probe is not None else [],
        "shims": list(probe.shims_used) if probe is not None else [],
        "probe_seconds": round(probe.seconds, 2) if probe is not None else None,
    }


def factor_history(cache_dir=None, run: bool = True, releases=RELEASES, head_dims=(16, 64), progress=None) -> list[dict]:
    """One row per release: what its code says about the attention scale, and (PyTorch, ``run``) what it does.

    Keys: package, version, date, language, location ("file:line"), scope, statement, formula,
    factor_read, forward_read, factor_measured ({d_k: s} or None; None for TensorFlow, which is
    read, not run), rule_measured, agreement, status (``checked``, ``read only`` or the reason it
    could not be checked, with the fetch command), notes, stubs, shims, probe_seconds.
    Nothing is downloaded here: a release missing from the cache gives a row that says so.  The releases
    that run are run in one worker process (torch imported once), each isolated from the others there.
    ``progress(fraction, message)`` is told of each release read and of the run.
    """
    from .cache import resolve_cache_dir
    from .probe import probe_releases
    from .reader import read_release

    folder = resolve_cache_dir(cache_dir)
    reads = []
    for index, release in enumerate(releases):
        reads.append(read_release(folder, release))
        if progress:
            progress((index + 1) / (len(releases) + 1), f"read {release.package} {release.version}")
    runs = [run and read.release.probed and read.reading is not None for read in reads]
    runnable = [read.release for read, runs_it in zip(reads, runs) if runs_it]
    if progress and runnable:
        progress(len(releases) / (len(releases) + 1), f"running {len(runnable)} releases' attention")
    probes = iter(probe_releases(folder, runnable, head_dims=head_dims) if runnable else [])
    return [history_row(read, next(probes) if runs_it else None) for read, runs_it in zip(reads, runs)]


def _measured_cell(row: dict) -> str:
    if row["agreement"] == "read, not run":
        return "read, not run"
    if not row["factor_measured"]:
        return "-"
    values = ", ".join(f"{d}:{s:.4g}" for d, s in sorted(row["factor_measured"].items()))
    return f"{values} -> {row['rule_measured']}"


def format_table(rows: list[dict]) -> str:
    """The rows as a plain-text table, one line per release (long statements shortened)."""
    headers = ("release", "date", "file:line", "statement", "factor read", "measured", "agreement")
    lines = []
    for row in rows:
        measured = _measured_cell(row)
        statement = (row["statement"] or "-")
        statement = statement if len(statement) <= 72 else statement[:69] + "..."
        lines.append((f"{row['package']} {row['version']}", row["date"], row["location"] or "-", statement,
                      row["factor_read"] or row["status"], measured, row["agreement"]))
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *lines)]

    def render(cells) -> str:
        return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([render(headers), render(["-" * w for w in widths])] + [render(line) for line in lines])
