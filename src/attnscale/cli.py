"""The ``attnscale`` command.

Each lab gets a subcommand that runs its preset and prints its tables; labs with options of
their own (training, numerics, doctor, ...) register commands from
``attnscale.commands.<name>`` (a module with ``register(app)``).  Errors a user can cause
print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__, lab

app = typer.Typer(
    name="attnscale",
    help="Why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment; and a health check for your model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

# Extra command modules under attnscale.commands, each with register(app).
COMMAND_MODULES = ("report", "explore", "answer")


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


def print_rows(title: str, rows: list[dict], limit: int = 40) -> None:
    if not rows:
        return
    table = Table(title=title, show_lines=False)
    for col in rows[0]:
        table.add_column(str(col))
    for row in rows[:limit]:
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row.values()))
    if len(rows) > limit:
        table.caption = f"{len(rows) - limit} more rows in --json output"
    console.print(table)


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                    TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=err_console, transient=False)


def run_lab_command(name: str, preset: str, seed: int, device: str, as_json: bool, figures: Path | None) -> None:
    """Run one lab's preset; print its tables and findings (or the whole result as JSON)."""
    module = lab.load(name)
    config = lab.config_for(name, preset, seed=seed, device=device)
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(name, total=1.0, note="")
        result = module.run(config, progress=lambda f, m: bar.update(task, completed=f, note=m))
        bar.update(task, completed=1.0)
    findings = module.judge(result)
    if as_json:
        payload = {"lab": name, "preset": preset, "seed": seed, "result": result,
                   "findings": {cid: vars(f) for cid, f in findings.items()}}
        sys.stdout.write(json.dumps(payload, indent=1, default=str) + "\n")
        return
    for title, rows in module.tables(result).items():
        print_rows(f"{name}: {title}", rows)
    for claim_id, finding in findings.items():
        console.print(f"{claim_id} {finding.verdict}: {finding.evidence}", markup=False, highlight=False)
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
        for paths in module.figures(result, figures).values():
            for path in paths:
                console.print(f"figure: {figures / path}")
    console.print(f"{name} took {time.perf_counter() - start:.1f} s")


def make_lab_command(name: str):
    def command(
        preset: str = typer.Option("quick", help="quick or full."),
        seed: int = typer.Option(0, help="Random seed; same seed, same numbers."),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        as_json: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
        figures: Path = typer.Option(None, help="Also draw the lab's figures into this folder."),
    ) -> None:
        run_lab_command(name, preset, seed, device, as_json, figures)

    command.__doc__ = f"Run the {name} lab and print its measurements and findings."
    return command


def has_module(module_name: str) -> bool:
    return importlib.util.find_spec(module_name) is not None


def register_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"attnscale.commands.{name}").register(app)
    for name in lab.LABS:
        if not has_module(f"attnscale.lab.{name}"):
            continue
        if has_module(f"attnscale.commands.{name}"):
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


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        code = app(args=argv, prog_name="attnscale", standalone_mode=False)
    except usage_error_types() as error:
        message = error.format_message().replace("\n", " ")
        sys.stderr.write(f"attnscale: error: {message}\n")
        sys.exit(2)
    except (ValueError, FileNotFoundError) as error:
        sys.stderr.write(f"attnscale: error: {str(error).splitlines()[0] if str(error) else type(error).__name__}\n")
        sys.exit(2)
    except typer.Abort:
        sys.stderr.write("attnscale: aborted\n")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
