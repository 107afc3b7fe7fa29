"""JSON read strictly: the numbers Python's json accepts beyond the standard (NaN, Infinity, 1e309, integers of
thousands of digits) are refused with the value named, before anything reads them."""

from __future__ import annotations

import json
import math

from .errors import UserError

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
