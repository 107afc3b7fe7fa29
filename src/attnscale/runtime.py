"""The two run settings every lab and command takes: the device and the seed, checked up front."""

from __future__ import annotations

import operator

from .errors import UserError

DEVICES = ("cpu", "cuda")
MAX_SEED = 2**63 - 1  # torch, numpy and Python's random all take seeds in 0..2^63-1


def check_device(device) -> str:
    """``device`` if it is 'cpu', or 'cuda' with a GPU that torch can use; else ValueError."""
    if device not in DEVICES:
        raise UserError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("device 'cuda' asked for, but torch sees no CUDA GPU; use --device cpu")
    return device


def torch_device(device):
    """``device`` (a name like 'cpu', 'cuda:0', or a torch.device) as a torch.device torch can use; else ValueError."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"unknown device {device!r}; accepted: cpu, cuda, cuda:N") from None
    if parsed.type not in DEVICES:
        raise UserError(f"unknown device {device!r}; accepted: cpu, cuda, cuda:N")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} asked for, but torch sees no CUDA GPU; use cpu")
    return parsed


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int if it is an integer in 0..2^63-1; else ValueError."""
    try:
        value = operator.index(seed)
    except TypeError:
        value = None
    if value is None or isinstance(seed, bool) or not 0 <= value <= MAX_SEED:
        raise UserError(f"{name} must be an integer from 0 to 2^63-1, got {seed!r}")
    return value


class Notice(UserWarning):
    """Something the user should know that is not an error (e.g. a value clipped to a limit);
    raised with ``warnings.warn``, printed by the command line as one ``attnscale: note:`` line."""


def import_target(spec: str, option: str, form: str, accepted: str):
    """What ``pkg.mod:name`` names (the module imported from the current folder or the Python path), for
    ``--callable`` and ``--module``; UserError naming ``option`` when the text is not ``form``, the module does not
    import, or it has no such name."""
    import importlib
    import os
    import sys

    module_name, _, attribute = (spec or "").partition(":")
    if not module_name or not attribute:
        raise UserError(f"{option} {spec!r} is not {form}; {accepted}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - the user's module: a SyntaxError or any error it raises on import
        text = str(error).splitlines()[0] if str(error) else ""
        raise UserError(f"{option} {spec!r}: cannot import {module_name!r} ({type(error).__name__}: {text})") from None
    if not hasattr(module, attribute):
        raise UserError(f"{option} {spec!r}: {module_name} has no {attribute!r}; {accepted}")
    return getattr(module, attribute)
