"""The ``attnscale`` command.

Each lab gets a subcommand that runs its preset and prints its tables; labs with options of
their own (training, numerics, doctor, ...) register commands from
``attnscale.commands.<name>`` (a module with ``register(app)``).

Errors a user can cause (a :class:`attnscale.errors.UserError`: bad options, bad files, a store
that is not one, work that does not fit in memory; usage errors; files that cannot be read or
written) print one line on stderr, ``attnscale: error: ...``, and exit with code 2.  Anything
else is a bug: one line ``attnscale: internal error: ...`` and the traceback, exit code 1; a :class:`attnscale.runtime.Notice` (a value clipped) prints one line
``attnscale: note: ...`` and the command goes on.  Options are checked before any work
starts and before any progress bar is drawn.  Output never interprets Rich markup: paths
and user text are printed as they are.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sqlite3
import sys
import time
import warnings
from pathlib import Path

import typer

from . import __version__, lab
from .commands import options
from .errors import UserError
from .paths import check_folder
from .runtime import Notice, check_device, check_seed
from .terminal import console, print_rows, progress_bar

app = typer.Typer(
    name="attnscale",
    help="Why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment; and a health check for your model.",
    no_args_is_help=True,
    add_completion=True,   # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Extra command modules under attnscale.commands, each with register(app).
COMMAND_MODULES = ("report", "explore", "answer", "explain")


def version_callback(value: bool) -> None:
    if value:
        console.print(f"attnscale {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """attnscale: the attention scale factor, with evidence."""


def run_lab_command(name: str, preset: str, seed: int, device: str, as_json: bool, figures: Path | None) -> None:
    """Run one lab's preset; print its tables and findings (or the whole result as JSON)."""
    module = lab.load(name)
    check_device(device)
    config = lab.config_for(name, preset, seed=check_seed(seed), device=device)
    if figures is not None:
        check_folder(figures, "--figures")
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(name, total=1.0, note="")
        result = module.run(config, progress=lambda f, m: bar.update(task, completed=f, note=m))
        bar.update(task, completed=1.0)
    findings = module.judge(result)
    if as_json:
        payload = {"lab": name, "preset": preset, "seed": seed, "result": result,
                   "findings": {cid: f.as_dict() for cid, f in findings.items()}}
        sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
        return
    for title, rows in module.tables(result).items():
        print_rows(f"{name}: {title}", rows)
    for claim_id, finding in findings.items():
        console.print(f"{claim_id} {finding.line}: {finding.evidence}", markup=False, highlight=False)
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
        for paths in module.figures(result, figures).values():
            for path in paths:
                console.print(f"figure: {figures / path}")
    console.print(f"{name} took {time.perf_counter() - start:.1f} s")


def make_lab_command(name: str):
    def command(preset: options.Preset = "quick", seed: options.Seed = 0, device: options.Device = "cpu",
                as_json: options.Json = False, figures: options.Figures = None) -> None:
        run_lab_command(name, options.preset_name(preset), seed, device, as_json, figures)

    command.__doc__ = f"Run the {name} lab and print its measurements and findings."
    return command


def register_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"attnscale.commands.{name}").register(app)
    for name in lab.LABS:  # a lab with options of its own has a command module; the rest share one
        if importlib.util.find_spec(f"attnscale.commands.{name}") is not None:
            importlib.import_module(f"attnscale.commands.{name}").register(app)
        else:
            app.command(name)(make_lab_command(name))


register_commands()


def usage_error_types() -> tuple[type, ...]:
    """Typer 0.2x vendors click as typer._click; older ones use click itself."""
    types = []
    for module_name in ("typer._click.exceptions", "click.exceptions"):
        try:
            types.append(importlib.import_module(module_name).UsageError)
        except ImportError:
            continue
    return tuple(types)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def describe_os_error(error: OSError) -> str:
    """'Permission denied: 'out/x.html'' from an OSError, naming the file(s) when it knows them."""
    if error.filename is None:
        return first_line(error)
    names = " -> ".join(repr(str(name)) for name in (error.filename, error.filename2) if name is not None)
    return f"{error.strerror or type(error).__name__}: {names}"


def show_notice(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning) -> None:
    """Notices print as one line on stderr; other warnings as Python prints them."""
    if issubclass(category, Notice):
        text = str(message).strip()
        sys.stderr.write(f"attnscale: note: {text.splitlines()[0] if text else category.__name__}\n")
    else:
        _default(message, category, filename, lineno, file, line)


def fail(message: str) -> None:
    sys.stderr.write(f"attnscale: error: {message}\n")
    sys.exit(2)


def internal_error(error: BaseException) -> None:
    """A bug, not bad input: say so in one line, then the traceback; exit code 1."""
    import traceback

    sys.stderr.write(f"attnscale: internal error (a bug in attnscale, not your input): {type(error).__name__}: "
                     f"{first_line(error)}\n")
    traceback.print_exception(error, file=sys.stderr)
    sys.exit(1)


def degrade_output() -> None:
    """On a terminal that cannot show a character (a latin-1 or ASCII locale), print a replacement
    for it instead of failing with a codec error after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError, OSError):  # not a text stream that can be reconfigured
            pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2; any other exception is
    an internal error (exit code 1, with its traceback); no arguments prints the help."""
    args = sys.argv[1:] if argv is None else list(argv)
    warnings.showwarning = show_notice
    degrade_output()
    try:
        if args and not {"-h", "--help", "--version"} & set(args):  # help and the version read no variable
            from .environment import check_environment

            check_environment()
        code = app(args=args or ["--help"], prog_name="attnscale", standalone_mode=False)
    except usage_error_types() as error:
        fail(error.format_message().replace("\n", " "))
    except FileNotFoundError as error:
        fail(first_line(error) if error.filename is None else describe_os_error(error))
    except UserError as error:
        fail(first_line(error))
    except OSError as error:  # a file or folder that cannot be read or written
        fail(describe_os_error(error))
    except sqlite3.Error as error:
        fail(f"results store: {first_line(error)}")
    except MemoryError:
        fail("out of memory; run with smaller sizes")
    except typer.Abort:
        sys.stderr.write("attnscale: aborted\n")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - everything left is a bug, and is reported as one
        internal_error(error)
    sys.exit(code if isinstance(code, int) else 0)
