"""Validation shared by every config and spec dataclass.

Each check raises ValueError naming the field, the bad value and what is accepted, so a
frozen dataclass validates itself in ``__post_init__`` with one call::

    def __post_init__(self):
        checks.fields(self, ints=("d_head", "steps"), floats=("lr",), device="device")
"""

from __future__ import annotations

import math
import operator

from .errors import UserError

DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "float64")


def positive_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (bools and floats refused)."""
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or number < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


def positive_float(name: str, value, allow_zero: bool = False) -> float:
    """``value`` as a finite float > 0 (>= 0 with ``allow_zero``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UserError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def one_of(name: str, value, accepted) -> str:
    if value not in accepted:
        raise UserError(f"unknown {name} {value!r}; accepted: {', '.join(map(str, accepted))}")
    return value


def device(value) -> str:
    return one_of("device", value, DEVICES)


def dtype(value) -> str:
    return one_of("dtype", value, DTYPES)


def seed(value) -> int:
    """A seed: an integer in [0, 2^63)."""
    number = positive_int("seed", value, minimum=0)
    if number >= 2**63:
        raise UserError(f"seed must be below 2^63, got {value!r}")
    return number


def fields(obj, ints=(), floats=(), non_negative=(), int_tuples=(), float_tuples=(), minimum: int = 1) -> None:
    """Validate the named dataclass fields of ``obj``; device/dtype/seed fields are checked when present."""
    for name in ints:
        positive_int(name, getattr(obj, name), minimum)
    for name in floats:
        positive_float(name, getattr(obj, name))
    for name in non_negative:
        value = getattr(obj, name)
        if isinstance(value, float) or isinstance(value, bool):
            positive_float(name, value, allow_zero=True)
        else:
            positive_int(name, value, minimum=0)
    for names, check in ((int_tuples, positive_int), (float_tuples, positive_float)):
        for name in names:
            values = getattr(obj, name)
            if not values:
                raise UserError(f"{name} must list at least one value, got {values!r}")
            for value in values:
                check(name, value)
    for name, check in (("device", device), ("dtype", dtype), ("seed", seed)):
        if hasattr(obj, name):
            check(getattr(obj, name))


def finite_number(name: str, value) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        raise UserError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def config(obj) -> None:
    """Validate a lab's config by the types of its fields: ints >= 0, finite floats, tuples of
    them (item by item), and the device and seed fields."""
    import dataclasses

    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, bool) or item is None or isinstance(item, (str, tuple)):
                continue
            if isinstance(item, int):
                positive_int(f.name, item, minimum=0)
            elif isinstance(item, float):
                finite_number(f.name, item)
    fields(obj)
