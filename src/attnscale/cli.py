"""The ``attnscale`` command.

Each lab gets a subcommand that runs its preset and prints its tables; labs with options of
their own (training, numerics, history) register commands from
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
import os
import sqlite3
import sys
import warnings

import typer

from . import __version__, lab
from .commands.lab_command import make_lab_command
from .errors import UserError
from .runtime import Notice
from .terminal import console

def _flags_show_no_type() -> None:
    """A flag takes no value, so its help shows none: this typer prints ``--json <bool>`` for a flag,
    which reads as if ``--json true`` were accepted (click refuses it)."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "flag_aware", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.flag_aware = True
    TyperOption.display_type_rich = display_type_rich


_flags_show_no_type()

app = typer.Typer(
    name="attnscale",
    help="Why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment; and a health check for your model.",
    no_args_is_help=True,
    add_completion=True,   # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Extra command modules under attnscale.commands, each with register(app).
COMMAND_MODULES = ("report", "explore", "answer", "explain", "diagnose")


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


def message_line(error: BaseException) -> str:
    """The error's own first line, as the user reads it after "attnscale: error:" (its type name if it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def describe_os_error(error: OSError) -> str:
    """'Permission denied: 'out/x.html'' from an OSError, naming the file(s) when it knows them."""
    if error.filename is None:
        return message_line(error)
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
                     f"{message_line(error)}\n")
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


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")  # what typer's completion classes write
COMPLETION_OPTIONS = ("--install-completion", "--show-completion")
COMPLETION_VARIABLE = "_ATTNSCALE_COMPLETE"  # set by the completion script: "complete_bash", "source_zsh", ...


def check_completion(args: list[str], environ) -> None:
    """Refuse a completion request typer would misread: an unknown shell after --install-completion (it wrote bash
    completion into ~/.bashrc for any name), a completion instruction it cannot follow, or a cursor index that is
    not a number (a traceback before)."""
    for index, arg in enumerate(args):
        for option in COMPLETION_OPTIONS:
            if arg.startswith(option + "="):
                shell = arg.split("=", 1)[1]
            elif arg == option and index + 1 < len(args) and not args[index + 1].startswith("-"):
                shell = args[index + 1]
            else:
                continue
            if shell not in COMPLETION_SHELLS:
                raise UserError(f"{option} {shell!r}: unknown shell; accepted: {', '.join(COMPLETION_SHELLS)}")
    instruction = environ.get(COMPLETION_VARIABLE)
    if instruction is None:
        return
    action, _, shell = instruction.partition("_")
    if action not in ("complete", "source") or shell not in COMPLETION_SHELLS:
        raise UserError(f"{COMPLETION_VARIABLE}={instruction!r} is not a completion instruction; accepted: complete_SHELL "
                        f"or source_SHELL, SHELL one of {', '.join(COMPLETION_SHELLS)}")
    cursor = environ.get("COMP_CWORD")
    if action == "complete" and shell == "bash" and cursor is not None and not cursor.strip().isdigit():
        raise UserError(f"COMP_CWORD={cursor!r} is not a word index; accepted: an integer >= 0")


HELP_WORDS = ("-h", "--help", "--version")


def asks_for_help(args: list[str]) -> bool:
    """Whether the command line asks for the help or the version, and nothing runs: a help word in the place of an
    option (``report --help``), not the value of one (``report --out --help`` runs the report into "--help")."""
    if not set(HELP_WORDS) & set(args):
        return False
    command = typer.main.get_command(app)  # typer's own click: its classes are not click's
    takes_value = False
    for token in args:
        if takes_value:
            takes_value = False
            continue
        if token == "--":
            return False
        if token in HELP_WORDS:
            return True
        if token.startswith("-"):
            name = token.split("=", 1)[0]
            option = next((p for p in command.params if p.param_type_name == "option"
                           and name in p.opts + p.secondary_opts), None)
            takes_value = option is not None and not option.is_flag and not option.count and "=" not in token
        elif hasattr(command, "list_commands"):  # a group: the token names its command
            command = command.commands.get(token, command)
    return False


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2; any other exception is
    an internal error (exit code 1, with its traceback); no arguments prints the help."""
    args = sys.argv[1:] if argv is None else list(argv)
    warnings.showwarning = show_notice
    degrade_output()
    try:
        check_completion(args, os.environ)
        if args and not asks_for_help(args):  # help and the version read no variable
            from .environment import check_environment
            from .threads import keep_freed_heap

            check_environment()
            keep_freed_heap()
        code = app(args=args or ["--help"], prog_name="attnscale", standalone_mode=False)
    except usage_error_types() as error:
        fail(error.format_message().replace("\n", " "))
    except FileNotFoundError as error:
        fail(message_line(error) if error.filename is None else describe_os_error(error))
    except UserError as error:
        fail(message_line(error))
    except OSError as error:  # a file or folder that cannot be read or written
        fail(describe_os_error(error))
    except sqlite3.Error as error:
        fail(f"results store: {message_line(error)}")
    except MemoryError:
        fail("out of memory; run with smaller sizes")
    except typer.Abort:
        sys.stderr.write("attnscale: aborted\n")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - everything left is a bug, and is reported as one
        internal_error(error)
    sys.exit(code if isinstance(code, int) else 0)
