"""``attnscale audit --module pkg.mod:factory``: build the user's module, run it on a random input, read it."""

from __future__ import annotations

import inspect

import torch

from ..errors import UserError
from ..runtime import import_target
from ..scale_check import expectation
from ..terminal import print_table, say
from .anymodule import probe

ACCEPTED = "accepted: pkg.mod:factory, a function or class that returns an nn.Module when called with no arguments"
MAX_INPUT_ELEMENTS = 2**24


def load_module(spec: str) -> torch.nn.Module:
    """The nn.Module that ``pkg.mod:factory`` builds (the module imported from the current folder or the path)."""
    factory = import_target(spec, "--module", "pkg.mod:factory", ACCEPTED)
    if isinstance(factory, torch.nn.Module):
        return factory
    if not callable(factory):
        raise UserError(f"--module {spec!r} names a {type(factory).__name__}; {ACCEPTED}")
    try:
        built = factory()
    except Exception as error:  # noqa: BLE001 - the user's factory, whatever it raises
        raise UserError(f"--module {spec!r}: calling it with no arguments raised {type(error).__name__}: "
                        f"{str(error).splitlines()[0] if str(error) else ''}; {ACCEPTED}") from None
    if not isinstance(built, torch.nn.Module):
        raise UserError(f"--module {spec!r} returned a {type(built).__name__}, not an nn.Module; {ACCEPTED}")
    return built


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--input-shape {text!r} is not comma-separated whole numbers; accepted: e.g. 2,16,64") from None
    if not shape or min(shape) < 1:
        raise UserError(f"--input-shape {text!r} has a size below 1; accepted: whole numbers >= 1, e.g. 2,16,64")
    elements = 1
    for size in shape:
        elements *= size
    if elements > MAX_INPUT_ELEMENTS:
        raise UserError(f"--input-shape {text!r} holds {elements:,} numbers; accepted: at most {MAX_INPUT_ELEMENTS:,}")
    return shape


def required_inputs(module: torch.nn.Module) -> int:
    """How many positional arguments the module's forward needs (self-attention gets x for each: MHA's q, k, v)."""
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return 1
    needed = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return max(1, len(needed))


def probe_spec(spec: str, input_shape: str, seed: int = 0, expect: str = "sqrt") -> dict:
    """The module ``spec`` builds, probed on a random input of ``input_shape`` and judged against ``expect``."""
    expected = expectation(expect)
    shape = parse_shape(input_shape)
    module = load_module(spec)
    example = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    try:
        read = probe(module, tuple(example for _ in range(required_inputs(module))), expect=expected)
    except ValueError as error:
        raise UserError(f"--module {spec!r} with --input-shape {input_shape}: {error}") from None
    return {"target": spec, "input_shape": list(shape), **read.to_dict()}


def print_probe(report: dict, console) -> None:
    from rich.table import Table

    table = Table(title=f"attention calls of {report['target']} on a random input of shape {tuple(report['input_shape'])}")
    columns = ("module", "call", "d_k", "at the call", "c_q", "c_k", "factor", "expected", "form", "q from", "verdict")
    for column in columns:
        table.add_column(column, justify="right" if column in ("d_k", "at the call", "c_q", "c_k", "factor", "expected")
                         else "left")
    number = lambda value: "" if value is None else f"{value:.6g}"  # noqa: E731
    for call in report["calls"]:
        measured = call["cosine_logit"] if call["form"] == "QK-norm" else call["factor"]
        table.add_row(call["module"], call["kind"], str(call["d_k"]), number(call["factor_at_call"]),
                      number(call["q_scale"]), number(call["k_scale"]), number(measured), number(call["expected"]),
                      call["form"] + (f": {call['detail']}" if call["detail"] else ""), call["q_from"], call["verdict"])
    print_table(table, console)
    line = lambda text: say(text, console)  # noqa: E731
    for module in report["modules"]:
        if module["verdict"] != "ok":
            for finding in module["findings"]:
                line(f"{module['name'] or report['module']} ({module['class']}): {module['verdict']}: {finding}")
    for reason in report["unread"]:
        line(f"not read: {reason}")
    for other in report["other_softmax"]:
        line(f"not attention: {other}")
    line(f"verdict: {report['summary']} (expected: {report['expect']})")
