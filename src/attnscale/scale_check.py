"""Is a measured factor the expected one?  The verdicts a user's attention gets, and the exit codes they map to.

An attention module (or one call, or a function) is judged against an :class:`Expectation`: a scale rule the
library parses (``sqrt``, ``inv_d``, ``none``, ``const:C``, ``power:A``, ``learned`` at its initial value,
``qknorm`` / ``qknorm:G``) or a plain number.  Each is

* ``ok``: measured, and the factor on the projections' q·k equals the expected one within :data:`FACTOR_TOL`;
* ``mismatch``: measured, and it does not (said in words: "1/d_k where 1/sqrt(d_k) was expected"), or the
  attention it computes is not finite;
* ``not measured``: why is said (a rotation between projection and product, an additive bias, a module that
  never ran on the input, q·k that is 0 everywhere).

A model (every attention module it has) is ``ok`` only when every one was measured and is ok; ``mismatch`` when
any is a mismatch; else ``incomplete``, N of M measured.  :func:`exit_code` maps these to 0, 1 and 3
(:data:`EXIT_CODES`; 2 stays bad input), ``strict`` making an incomplete model a failure.

Under QK-norm q and k have one length each, so a factor on q·k is not what is fixed: the expectation is read as
the logit of a cosine-1 pair of vectors of root-mean-square 1 per coordinate, ``factor x d_k`` (sqrt(d_k) for
``sqrt``, the gain G for ``qknorm:G``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from .errors import UserError
from .scaling import ACCEPTED_SPECS, ScaleRule, parse

FACTOR_TOL = 1e-3  # measured and expected agree within 0.1% (float32 reads the factor to about 1e-6)
ACCEPTED = f"a scale rule ({ACCEPTED_SPECS.split(', each optionally')[0]}) or a number > 0"


class Verdict(StrEnum):
    """One attention module's, call's or function's verdict."""

    OK = "ok"
    MISMATCH = "mismatch"
    NOT_MEASURED = "not measured"


class ModelVerdict(StrEnum):
    """A whole model's: ok only when every attention module was measured and matches."""

    OK = "ok"
    MISMATCH = "mismatch"
    INCOMPLETE = "incomplete"


EXIT_OK, EXIT_MISMATCH, EXIT_INCOMPLETE = 0, 1, 3
EXIT_CODES = {ModelVerdict.OK: EXIT_OK, ModelVerdict.MISMATCH: EXIT_MISMATCH, ModelVerdict.INCOMPLETE: EXIT_INCOMPLETE}


def exit_code(verdict: ModelVerdict, strict: bool = False) -> int:
    """0 ok, 1 mismatch, 3 incomplete (1 with ``strict``: what was not measured fails the check too)."""
    if strict and verdict == ModelVerdict.INCOMPLETE:
        return EXIT_MISMATCH
    return EXIT_CODES[ModelVerdict(verdict)]


def model_verdict(verdicts) -> ModelVerdict:
    """The model's verdict from its modules' (none at all: incomplete, there was nothing to measure)."""
    verdicts = [Verdict(v) for v in verdicts]
    if Verdict.MISMATCH in verdicts:
        return ModelVerdict.MISMATCH
    if not verdicts or Verdict.NOT_MEASURED in verdicts:
        return ModelVerdict.INCOMPLETE
    return ModelVerdict.OK


@dataclass(frozen=True)
class Expectation:
    """What a module's factor should be: a fixed scale rule of d_k, or a number."""

    spec: str
    rule: ScaleRule | None = None
    number: float | None = None

    def factor(self, d_k: int) -> float:
        """The expected factor on q·k at head width ``d_k``."""
        if self.number is not None:
            return self.number
        if self.rule.kind == "qknorm":  # q and k unit vectors times the gain: per unit-RMS vector, gain / d_k
            return self.rule.factor(d_k) / d_k
        return self.rule.factor(d_k)

    def cosine_logit(self, d_k: int) -> float:
        """The expected logit of a cosine-1 pair under QK-norm (vectors of RMS 1 per coordinate)."""
        return self.factor(d_k) * d_k

    def words(self, d_k: int) -> str:
        return factor_words(self.factor(d_k), d_k) if self.number is None else f"{self.number:.6g}"


def expectation(spec: str | float | Expectation = "sqrt") -> Expectation:
    """``spec`` as an :class:`Expectation`; ValueError naming it and what is accepted."""
    if isinstance(spec, Expectation):
        return spec
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        number = float(spec)
    elif isinstance(spec, str):
        try:
            number = float(spec)
        except ValueError:
            number = None
    else:
        raise UserError(f"expected scale {spec!r} is not a string or a number; accepted: {ACCEPTED}")
    if number is not None:
        if not (math.isfinite(number) and number > 0):
            raise UserError(f"expected scale {spec!r} is not a finite number > 0; accepted: {ACCEPTED}")
        return Expectation(f"{number:g}", number=number)
    try:
        rule = parse(spec)
    except ValueError:
        raise UserError(f"expected scale {spec!r} is not one the library accepts; accepted: {ACCEPTED}") from None
    if rule.length is not None:
        raise UserError(f"expected scale {spec!r} has a length term, which moves with the keys a query sees; "
                        f"accepted: {ACCEPTED}")
    return Expectation(rule.spec, rule=rule)


# The factors a reader knows by name, as powers of d_k: d_k ** -exponent.
NAMED_POWERS = ((0.5, "1/sqrt(d_k)"), (1.0, "1/d_k"), (0.0, "1 (no scaling)"), (0.25, "d_k^-1/4"),
                (1.5, "d_k^-3/2"), (2.0, "1/d_k^2"), (-0.5, "sqrt(d_k)"))


def factor_words(factor: float, d_k: int) -> str:
    """The factor by name where it is a known power of d_k ("1/d_k (0.015625)"), else the number."""
    if not math.isfinite(factor):
        return f"{factor}"
    if d_k > 1 and factor > 0:
        for exponent, name in NAMED_POWERS:
            if abs(factor / d_k**-exponent - 1) <= FACTOR_TOL:
                return name if exponent == 0 else f"{name} ({factor:.6g})"
    return f"{factor:.6g}"


def agree(measured: float, expected: float, tol: float = FACTOR_TOL) -> bool:
    return math.isfinite(measured) and abs(measured - expected) <= tol * abs(expected)


def judged(measured: float, want: float, finding) -> tuple[Verdict, str]:
    """(ok, "") where ``measured`` agrees with ``want``, else (mismatch, ``finding()``)."""
    return (Verdict.OK, "") if agree(measured, want) else (Verdict.MISMATCH, finding())


def judge_factor(measured: float, expected: Expectation, d_k: int) -> tuple[Verdict, str]:
    """(verdict, finding) for a factor measured on the projections' q·k."""
    return judged(measured, expected.factor(d_k), lambda: f"{factor_words(measured, d_k)} where {expected.words(d_k)} "
                  f"was expected (--expect {expected.spec}, d_k {d_k})")


def judge_cosine_logit(measured: float, expected: Expectation, d_k: int) -> tuple[Verdict, str]:
    """(verdict, finding) for the logit of a cosine-1 pair read under QK-norm."""
    want = expected.cosine_logit(d_k)
    return judged(measured, want, lambda: f"QK-norm: the logit of a cosine-1 pair is {measured:.6g} where {want:.6g} "
                  f"was expected ({expected.spec} on unit-RMS q and k, d_k {d_k})")
