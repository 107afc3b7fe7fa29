"""JSON read strictly: the numbers Python's json accepts beyond the standard (NaN, Infinity, 1e309, integers of
thousands of digits) are refused with the value named, before anything reads them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .errors import UserError

# The most memory Python's json holds per byte of text, the text included: a list of empty objects ('{},' each)
# takes 24 bytes of objects per byte of text; a report.json about 5 (tracemalloc's peak over the file's size).
EXPANSION = 25
MAX_INT_DIGITS = 100  # far beyond any count, size or seed attnscale reads; int() refuses 4300 on its own, with a bug's words


def loads(text: str, what: str):
    """``json.loads`` that raises UserError naming ``what`` for a non-finite or oversized number."""

    def constant(name: str):
        raise UserError(f"{what} holds {name}, which JSON does not define; accepted: finite numbers")

    def real(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            raise UserError(f"{what} holds the number {literal[:40]}, beyond float range; accepted: finite numbers")
        return value

    def whole(literal: str) -> int:
        if len(literal.lstrip("-")) > MAX_INT_DIGITS:
            raise UserError(f"{what} holds an integer of {len(literal.lstrip('-'))} digits; accepted: at most "
                            f"{MAX_INT_DIGITS}")
        return int(literal)

    return json.loads(text, parse_constant=constant, parse_float=real, parse_int=whole)


def read(path, what: str):
    """The JSON file at ``path``, read whole once its size is known to fit in free memory as Python objects
    (:data:`EXPANSION` bytes a byte), then parsed by :func:`loads`."""
    from .memory import format_bytes, require_memory  # here: memory imports torch, which loads() does not need

    size = Path(path).stat().st_size
    require_memory(size * EXPANSION, f"reading {what} ({format_bytes(size)} of JSON, up to {EXPANSION}x that as "
                   "Python objects)", "free memory, or pass the file that was meant")
    return loads(Path(path).read_text(encoding="utf-8"), what)
