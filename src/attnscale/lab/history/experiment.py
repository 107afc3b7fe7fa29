"""The history lab's experiment: the factor through history, from the released code.

Each release of :data:`attnscale.history.RELEASES` present in the cache is read (the statement
that applies the attention factor, found by pattern, with its file and line) and, for the PyTorch
releases, run: its BERT self-attention built at two head sizes in a subprocess and probed
black-box, so that 1/sqrt(d_k) and 1/d_k are told apart.  A release missing from the cache, or
whose file does not match its pinned hash, gives a row that says so; nothing is downloaded here.
Nothing here writes a file or prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ... import checks
from ...errors import UserError

VERSION = 3  # 3: rows carry cache_state and probe_state
HEAD_DIMS = (16, 64)  # two head sizes: 1/sqrt(d_k) gives 0.25 and 0.125, 1/d_k 0.0625 and 0.0156


@dataclass(frozen=True)
class Config:
    seed: int = 0          # nothing here is random; kept for the lab protocol
    device: str = "cpu"
    run: bool = True       # run the PyTorch releases (False: read only)
    head_dims: tuple[int, ...] = HEAD_DIMS

    def __post_init__(self):
        checks.fields(self, int_tuples=("head_dims",))
        if len(set(self.head_dims)) < 2:
            raise UserError(f"head_dims needs two different head sizes to tell 1/sqrt(d_k) from 1/d_k, got {self.head_dims!r}")
        if not isinstance(self.run, bool):
            raise UserError(f"run must be True or False, got {self.run!r}")


PRESETS = {"quick": Config(), "full": Config()}


def stored_key() -> str:
    """What besides the config a stored result depends on: which releases the cache holds intact
    (a result computed before a fetch is not reused after it)."""
    from ...history import RELEASES
    from ...history.cache import check, resolve_cache_dir

    folder = resolve_cache_dir(None)
    present = [f"{r.package}-{r.version}" for r in RELEASES if check(folder, r).usable]
    return "cache:" + (",".join(present) or "empty")


def unrepeatable(result: dict) -> str:
    """Why this result must not be stored for reuse, or "": a release whose probe failed (a timeout on a busy
    machine, a broken environment) or that could not be unpacked here would stay failed in every later report
    that reused it, however healthy that run."""
    from .verdicts import release_name

    failed = [release_name(row) for row in result["rows"]
              if row.get("probe_state") == "failed" or row.get("cache_state") == "unwritable"]
    return f"{len(failed)} release(s) could not be probed or unpacked here ({', '.join(failed)})" if failed else ""


def run(config: Config, progress=None) -> dict:
    from ...history import RELEASES, factor_history
    from ...history.cache import FETCH_COMMAND, resolve_cache_dir

    folder = resolve_cache_dir(None)
    rows = factor_history(folder, run=config.run, releases=RELEASES, head_dims=config.head_dims, progress=progress)
    rows.append(installed_row())
    return {"config": dataclasses.asdict(config), "cache": str(folder), "fetch_command": FETCH_COMMAND, "rows": rows}


INSTALLED_MODULE = "transformers.models.bert.modeling_bert"  # where the installed release defines BertSelfAttention


def installed_row() -> dict:
    """The installed transformers' BERT attention, read by the same pattern reader (its own module only:
    the whole tree takes 18 s); the doctor lab runs it (``attnscale doctor``'s scale probe), so it is
    read, not run, here.  The table's last row, where the history meets today's code."""
    import importlib.util
    import re
    from importlib.metadata import version
    from pathlib import Path

    from ...history.reader import scan_source, subject_reading

    spec = importlib.util.find_spec(INSTALLED_MODULE)
    base = {"package": "transformers", "version": f"{version('transformers')} (installed)", "date": "installed",
            "language": "pytorch", "factor_measured": None, "rule_measured": None, "notes": [],
            "agreement": "read, not run (the doctor lab runs it)", "stubs": [], "shims": [], "probe_seconds": None}
    if spec is None or spec.origin is None:
        return {**base, "location": None, "scope": None, "statement": None, "formula": None, "factor_read": None,
                "forward_read": None, "status": f"{INSTALLED_MODULE} is not in the installed transformers"}
    text = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    relative = INSTALLED_MODULE.replace(".", "/") + ".py"
    line = next((i + 1 for i, code in enumerate(text.splitlines()) if re.match(r"^class BertSelfAttention\b", code)), None)
    reading = subject_reading(scan_source(text, relative), "BertSelfAttention" if line else None,
                              f"{relative}:{line}" if line else None, ())
    primary = reading.primary
    return {**base, "location": reading.where, "scope": reading.subject,
            "statement": primary.statement if primary else None, "formula": primary.formula if primary else None,
            "factor_read": reading.summary, "forward_read": reading.forward_rule, "status": "read only"}
