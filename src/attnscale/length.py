"""Length terms: a second factor on the logits that grows with the number of keys a query sees.

A scale rule (:mod:`attnscale.scaling`) fixes the factor from d_k.  Long-context models also
multiply it by m(n), where n is the number of keys the query may attend to (in a causal
sequence n = p + 1 for the query at position p).  A length term is written after the rule with
a plus sign, ``sqrt+logn:64``; :func:`parse` reads the part after the plus.

============== ==========================================================================
term           m(n)
============== ==========================================================================
logn:L         max(1, ln n / ln L): log-n scaling with base length L (Chiang & Cholak
               2022 use ln n; Su 2021 log_512 n; Qwen-1's ``use_logn_attn`` log_L(p + 1)
               once p + 1 > L, L its training length: the form taken here, 1 up to L)
sqrtlogn:L     max(1, sqrt(ln n / ln L)): the slower law that keeps attention's entropy over
               n iid logits (m proportional to sqrt(ln n)); the length lab trains it beside
               log n to test which law a needle needs
ssmax          s ln n on top of the rule's factor, s learned per head (Scalable-Softmax,
ssmax:S        Nakanishi 2025, arXiv 2501.19399: n^(s z_i) / sum_j n^(s z_j)); initial s = S,
               default 0.43, the value of the paper's Fig. 1 (its text states no initial
               value; 1 / ln L makes the rule start as the plain one at L keys)
temp:B:F       1 + B ln(1 + floor(n / F)): Llama 4's ``attn_temperature_tuning`` (B = 0.1,
               F = 8192 there), in n = p + 1 of its (p + 1) / floor_scale
============== ==========================================================================

The factor multiplies q row by row, so every attention implementation (fused SDPA included)
takes it unchanged.  Where no key is allowed (n = 0) the multiplier is 1: the row is zeros anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .errors import UserError

ACCEPTED_TERMS = ("logn:L (L an integer >= 2), sqrtlogn:L (L an integer >= 2), ssmax, ssmax:S (S > 0), "
                  "temp:B:F (B > 0, F an integer >= 1)")
SSMAX_INITIAL_S = 0.43  # Nakanishi 2025, Fig. 1 ("s ... set to 0.43"); the paper's text gives no initial value
KINDS = ("logn", "sqrtlogn", "ssmax", "temp")


@dataclass(frozen=True)
class LengthTerm:
    """A parsed length term: ``kind`` one of :data:`KINDS`; ``base`` is L (logn, sqrtlogn) or F (temp),
    ``coef`` is B (temp) or the initial s (ssmax)."""

    spec: str
    kind: str
    base: int = 0
    coef: float = 0.0

    @property
    def learnable(self) -> bool:
        return self.kind == "ssmax"

    def multiplier(self, n_keys, s=None):
        """m(n) for a tensor (or number) of key counts; ``s`` overrides ssmax's initial value
        (a learned tensor, broadcast against ``n_keys``)."""
        n = torch.as_tensor(n_keys, dtype=torch.float64) if not isinstance(n_keys, torch.Tensor) else n_keys
        n = n.clamp_min(1)
        if self.kind in ("logn", "sqrtlogn"):
            log_ratio = torch.clamp(torch.log(n) / math.log(self.base), min=1.0)
            return log_ratio if self.kind == "logn" else log_ratio.sqrt()
        if self.kind == "ssmax":
            return (self.coef if s is None else s) * torch.log(n)
        return 1.0 + self.coef * torch.log1p(torch.floor(n / self.base))

    def __str__(self) -> str:
        return self.spec


def _number(text: str, what: str, spec: str, integer: bool, minimum: float) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise UserError(f"bad length term {spec!r}: {what} {text!r} is not {kind}; accepted: {ACCEPTED_TERMS}") from None
    if not math.isfinite(value) or value < minimum or (not integer and value <= 0):
        bound = f">= {minimum:g}" if integer else "finite and > 0"
        raise UserError(f"bad length term {spec!r}: {what} must be {bound}, got {text!r}; accepted: {ACCEPTED_TERMS}")
    return value


def parse(spec: str) -> LengthTerm:
    """Parse a length term (the part of a scale spec after ``+``); ValueError names the bad part."""
    text = spec.strip()
    name, *args = text.split(":")
    if name in ("logn", "sqrtlogn") and len(args) == 1:
        return LengthTerm(text, name, base=int(_number(args[0], "base length L", text, True, 2)))
    if name == "ssmax" and len(args) <= 1:
        initial = _number(args[0], "initial s", text, False, 0) if args else SSMAX_INITIAL_S
        return LengthTerm(text, "ssmax", coef=initial)
    if name == "temp" and len(args) == 2:
        return LengthTerm(text, "temp", coef=_number(args[0], "B", text, False, 0),
                          base=int(_number(args[1], "floor scale F", text, True, 1)))
    raise UserError(f"unknown length term {spec!r}; accepted: {ACCEPTED_TERMS}")
