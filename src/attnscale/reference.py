"""The reference report: the quick preset's claims and statements as measured when this version was
released, shipped inside the package so that ``attnscale answer`` has something to say before any
run.  A local report, when there is one, takes precedence.

It is the report's ``claims`` and ``statements`` (labels, parts, numbers, evidence) with its
provenance, without the labs' raw results and tables.  ``python -m attnscale.reference FOLDER``
writes it from a quick report of seed 0; a test rebuilds the quick report and checks that every
label and every number the answer quotes from it match.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import jsonfile

PATH = Path(__file__).parent / "data" / "reference-quick.json"
KEPT = ("attnscale_version", "preset", "seed", "device", "started", "seconds", "machine", "claims", "statements")


def trim(report: dict) -> dict:
    """What the answer and ``explain`` read from a report, and where it came from."""
    if report.get("preset") != "quick" or report.get("seed") != 0:
        raise ValueError(f"the reference is the quick preset at seed 0; this report is preset "
                         f"{report.get('preset')!r}, seed {report.get('seed')!r}")
    return {key: report[key] for key in KEPT if key in report}


def load() -> dict:
    """The shipped reference report (a file of the package, about 100 KB)."""
    return json.loads(PATH.read_text(encoding="utf-8"))


def provenance(report: dict) -> str:
    """One line: which report this is (version, preset, seed, date, device)."""
    date = str(report.get("started", "?"))[:10]
    return (f"the reference report shipped with attnscale {report.get('attnscale_version', '?')} (preset "
            f"{report.get('preset')}, seed {report.get('seed')}, measured {date} on "
            f"{report.get('machine') or report.get('device', '?')})")


DEFAULT_FOLDER = Path("attnscale-report")  # where `attnscale report` writes by default


def local_or_shipped(report: Path | None) -> tuple[dict, str | None]:
    """The report a reading command speaks from, checked: ``report``, else ``attnscale-report/`` when it
    holds one, else the shipped reference; with the folder it came from (None for the reference)."""
    from .answer import check_report, load_report

    if report is None and (DEFAULT_FOLDER / "report.json").exists():  # a folder there is refused, not passed over
        report = DEFAULT_FOLDER
    if report is not None:
        return load_report(report), str(report)
    return check_report(load(), "the reference report"), None


def write(folder: str | Path) -> Path:
    """The reference written from the report in ``folder``."""
    source = Path(folder) / "report.json" if Path(folder).is_dir() else Path(folder)
    report = trim(jsonfile.read(source, repr(str(source))))
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return PATH


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m attnscale.reference REPORT_FOLDER  (a quick report of seed 0)")
    print(f"wrote {write(sys.argv[1])}")
