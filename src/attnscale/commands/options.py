"""Options that several commands share, declared once as Typer ``Annotated`` aliases.

A command writes ``seed: options.Seed = 0`` and gets the same name, bounds and help text as
every other command with a seed.  Choices are Enums and bounds are :func:`within` callbacks, so
that Typer refuses a bad value before the command starts, in the one-line form the CLI prints.
Paths go through :func:`path_value`, which refuses an empty path: ``--out ''`` would
otherwise become the current folder.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..lab import PRESET_NAMES
from ..runtime import MAX_SEED

PresetName = enum.Enum("PresetName", {name: name for name in PRESET_NAMES}, type=str)


def path_value(text) -> Path:
    """A path option's text as a Path; an empty text is refused (it would mean the current folder)."""
    if isinstance(text, Path):
        return text
    if not str(text).strip():
        raise typer.BadParameter(f"is empty ({text!r}); give a path")
    return Path(text)


def within(low: int, high: int | None = None):
    """A callback that refuses a number outside low..high, naming it (Typer's own ``min=``/``max=``
    message does not say which value was given)."""
    accepted = f"{low} or more" if high is None else f"{low} to {high}"

    def check(value):
        if value is not None and (value < low or (high is not None and value > high)):
            raise typer.BadParameter(f"{value} is out of range; accepted: {accepted}")
        return value

    return check


def path_option(help_text: str, *names: str):
    return typer.Option(*names, help=help_text, parser=path_value, metavar="PATH")


Preset = Annotated[PresetName, typer.Option(help="The lab's preset: quick or full.")]
Seed = Annotated[int, typer.Option(callback=within(0, MAX_SEED), help="Random seed (0 to 2^63-1); same seed, same "
                                                                      "numbers.")]
Device = Annotated[str, typer.Option(help="cpu or cuda.")]  # checked by runtime.check_device: cuda needs a GPU
Json = Annotated[bool, typer.Option("--json", help="Print the full result as JSON.")]
Figures = Annotated[Optional[Path], path_option("Also draw the lab's figures into this folder.")]


def preset_name(preset) -> str:
    """The preset's name, from the Enum Typer passes or a plain string."""
    return preset.value if isinstance(preset, enum.Enum) else preset


def given(ctx: typer.Context) -> list[str]:
    """The options the user typed (or set through the environment), by parameter name."""
    return [name for name in ctx.params
            if getattr(ctx.get_parameter_source(name), "name", "") in ("COMMANDLINE", "ENVIRONMENT")]


def flag(ctx: typer.Context, name: str) -> str:
    """The option as the user types it (``as_json`` -> ``--json``)."""
    param = next((p for p in ctx.command.params if p.name == name), None)
    return max(param.opts, key=len) if param is not None and param.opts else f"--{name.replace('_', '-')}"


def refuse_given(ctx: typer.Context, why: str, allowed: tuple[str, ...] | None = None,
                 refused: tuple[str, ...] = ()) -> None:
    """Refuse an option that does not apply in this mode instead of ignoring it: any given option
    outside ``allowed`` (when given), and any given option in ``refused``."""
    from ..errors import UserError

    for name in given(ctx):
        if (allowed is not None and name not in allowed) or name in refused:
            raise UserError(f"{flag(ctx, name)} does not apply here: {why}; drop it")
