"""Scale rules and initialisation schemes for attention.

A scale rule maps the head dimension d_k to the factor that multiplies QK^T before the
softmax.  Rules are written as spec strings and parsed by :func:`parse`:

========== ==============================================================================
spec       factor
========== ==============================================================================
sqrt       1 / sqrt(d_k)  (the default everywhere; Vaswani et al. 2017)
inv_d      1 / d_k        (muP's choice, Yang et al. 2022)
none       1
const:C    C              (a constant that ignores d_k; C finite and > 0)
power:A    d_k ** -A      (A finite; A=0 is none, A=0.5 is sqrt, A=1 is inv_d)
learned    a learnable temperature, log-parameterised, initialised at 1 / sqrt(d_k)
qknorm     q and k L2-normalised per head, then multiplied by a learnable gain
qknorm:G   the same with initial gain G (default sqrt(d_k), so that at random init the
           logits have the same spread as the sqrt rule; Henry et al. 2020)
========== ==============================================================================

A length term may follow after ``+`` (``sqrt+logn:64``, ``sqrt+ssmax``, ``sqrt+temp:0.1:64``):
a second factor m(n) that grows with the number of keys n a query sees; see
:mod:`attnscale.length`.

Init schemes set the q/k/v projection weights (:func:`init_qkv`): ``torch``, ``unit``,
``t5`` and ``mup``; see :data:`INIT_SCHEMES`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass

import torch
from torch import nn

from . import length as length_terms
from .errors import UserError

ACCEPTED_SPECS = ("sqrt, inv_d, none, const:C (C > 0), power:A (A a number), learned, qknorm, qknorm:G (G > 0), "
                  "each optionally +TERM with TERM one of " + length_terms.ACCEPTED_TERMS)

INIT_SCHEMES = {
    "torch": "PyTorch's nn.Linear default (uniform, variance 1/(3 d_model))",
    "unit": "normal, std d_model^-1/2: q and k components of variance 1 for unit-variance input",
    "t5": "T5 / Mesh-TensorFlow: W_q std (d_model d_k)^-1/2, W_k and W_v std d_model^-1/2; pair with scale 'none'",
    "mup": "muP: W_q zero, W_k and W_v std d_model^-1/2; pair with scale 'inv_d'",
}


@dataclass(frozen=True)
class ScaleRule:
    """A parsed scale rule.

    ``kind`` is one of ``fixed``, ``learned``, ``qknorm``.  For ``fixed`` rules the factor is
    ``coef * d_k ** -exponent``; ``learned`` starts at 1/sqrt(d_k); ``qknorm`` multiplies the
    cosine similarities by a gain (``gain`` if set, else sqrt(d_k)).
    """

    spec: str
    kind: str = "fixed"
    exponent: float = 0.5
    coef: float = 1.0
    gain: float | None = None
    length: length_terms.LengthTerm | None = None  # a factor m(n) on top, growing with the keys a query sees

    @property
    def learnable(self) -> bool:
        return self.kind in ("learned", "qknorm") or (self.length is not None and self.length.learnable)

    @property
    def normalizes_qk(self) -> bool:
        return self.kind == "qknorm"

    def factor(self, d_k: int) -> float:
        """The factor that multiplies QK^T (for learnable rules: its initial value)."""
        d_k = check_d_k(d_k)
        if self.kind == "qknorm":
            return self.gain if self.gain is not None else math.sqrt(d_k)
        if self.kind == "learned":
            return d_k**-0.5
        try:
            value = self.coef * d_k ** (-self.exponent)
        except OverflowError:
            value = math.inf
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"scale {self.spec!r} gives the factor {value:g} at d_k = {d_k}, which is not a finite "
                             f"number > 0 in float64; choose a smaller |A| in power:A or a smaller constant")
        return value

    def __str__(self) -> str:
        return self.spec


def check_d_k(d_k) -> int:
    """Return d_k as an int, or raise ValueError unless it is an integer >= 1."""
    try:
        value = operator.index(d_k)
    except TypeError:
        value = None
    if value is None or isinstance(d_k, bool) or value < 1:
        raise UserError(f"d_k must be an integer >= 1, got {d_k!r}")
    return value


def _positive_number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(
            f"bad scale spec {spec!r}: {what} {text!r} is not a number; accepted: {ACCEPTED_SPECS}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(
            f"bad scale spec {spec!r}: {what} must be finite and > 0, got {text!r}; accepted: {ACCEPTED_SPECS}"
        )
    return value


def parse(spec: str | ScaleRule) -> ScaleRule:
    """Parse a spec string (see the module docstring) into a :class:`ScaleRule`.

    Raises ValueError naming the bad value and listing the accepted forms.
    """
    if isinstance(spec, ScaleRule):
        return spec
    if not isinstance(spec, str):
        raise UserError(f"scale spec must be a string, got {spec!r}; accepted: {ACCEPTED_SPECS}")
    text = spec.strip()
    base, plus, term = text.partition("+")
    if plus:
        rule = _parse_base(base.strip(), text)
        return dataclasses.replace(rule, spec=text, length=length_terms.parse(term))
    return _parse_base(text, text)


def _parse_base(text: str, spec: str) -> ScaleRule:
    name, sep, arg = text.partition(":")
    if name in ("sqrt", "inv_d", "none", "learned") and not sep:
        exponent = {"sqrt": 0.5, "inv_d": 1.0, "none": 0.0, "learned": 0.5}[name]
        kind = "learned" if name == "learned" else "fixed"
        return ScaleRule(spec=text, kind=kind, exponent=exponent)
    if name == "qknorm":
        gain = _positive_number(arg, "gain G", text) if sep else None
        return ScaleRule(spec=text, kind="qknorm", exponent=0.0, gain=gain)
    if name == "const" and sep:
        return ScaleRule(spec=text, exponent=0.0, coef=_positive_number(arg, "constant C", text))
    if name == "power" and sep:
        try:
            exponent = float(arg)
        except ValueError:
            raise UserError(
                f"bad scale spec {text!r}: exponent A {arg!r} is not a number; accepted: {ACCEPTED_SPECS}"
            ) from None
        if not math.isfinite(exponent):
            raise UserError(f"bad scale spec {text!r}: exponent A must be finite; accepted: {ACCEPTED_SPECS}")
        return ScaleRule(spec=text, exponent=exponent)
    raise UserError(f"unknown scale spec {spec!r}; accepted: {ACCEPTED_SPECS}")


def is_plain_fixed(rule: ScaleRule) -> bool:
    """A fixed factor from d_k alone: no learnable part, no length term."""
    return rule.kind == "fixed" and rule.length is None


def factor(spec: str | ScaleRule, d_k: int) -> float:
    """Shorthand: ``parse(spec).factor(d_k)``."""
    return parse(spec).factor(d_k)


def check_init(scheme: str) -> str:
    if scheme not in INIT_SCHEMES:
        raise UserError(f"unknown init scheme {scheme!r}; accepted: {', '.join(INIT_SCHEMES)}")
    return scheme


@torch.no_grad()
def init_qkv(w_q: nn.Linear, w_k: nn.Linear, w_v: nn.Linear, scheme: str, d_k: int, generator=None) -> None:
    """Initialise the q/k/v projections in place under ``scheme`` (see :data:`INIT_SCHEMES`).

    ``d_k`` is the head dimension; d_model is read from the layers' input size.  Biases, if
    any, are set to zero for every scheme but ``torch``.
    """
    check_init(scheme)
    d_k = check_d_k(d_k)
    if scheme == "torch":
        return
    d_model = w_q.in_features
    std_in = d_model**-0.5
    stds = {
        "unit": (std_in, std_in, std_in),
        "t5": ((d_model * d_k) ** -0.5, std_in, std_in),
        "mup": (0.0, std_in, std_in),
    }[scheme]
    for layer, std in zip((w_q, w_k, w_v), stds):
        if std == 0.0:
            layer.weight.zero_()
        else:
            layer.weight.normal_(0.0, std, generator=generator)
        if layer.bias is not None:
            layer.bias.zero_()
