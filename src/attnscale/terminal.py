"""What every command prints with: the consoles (stdout, stderr), the progress bar, and tables that are never
cut to 80 columns when the output goes to a pipe or a file.

Commands import these from here, not from :mod:`attnscale.cli` (which wires the commands together).
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

# No markup, no highlighting: paths and user text (which may hold "[...]") print as they are.
console = Console(markup=False, highlight=False)
err_console = Console(stderr=True, markup=False, highlight=False)
PIPED_MAX_WIDTH = 400  # a table printed to a pipe or file is as wide as its content, up to this


def print_table(table, to: Console | None = None) -> None:
    """``table`` on ``to`` (stdout's console): on a terminal at its width, elsewhere as wide as its content needs,
    so that a pipe or a file gets whole rows instead of rows cut at Rich's default 80 columns."""
    to = to or console
    if to.is_terminal:
        to.print(table)
        return
    wide = Measurement.get(to, to.options.update(width=PIPED_MAX_WIDTH), table).maximum
    before = to._width  # print(width=) is clamped to the console's width: widen the console for this table
    to.width = max(to.width, min(wide, PIPED_MAX_WIDTH))
    try:
        to.print(table)
    finally:
        to._width = before


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
    print_table(table)


def say(text: str, to: Console | None = None) -> None:
    """One line as it is (no markup, no highlighting, no wrapping)."""
    (to or console).print(text, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def progress_bar():
    """A progress bar on stderr; if the block raises, the bar is erased, so that the error
    line is the only line left on stderr."""
    bar = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                   TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                   TextColumn("{task.fields[note]}", markup=False), console=err_console, transient=False)
    bar.start()
    try:
        yield bar
    except BaseException:
        bar.live.transient = True
        bar.live.stop()  # Progress.stop would add a blank line on a non-terminal stderr
        raise
    bar.stop()


def utf8_option(option: str, text: str | None) -> str | None:
    """``text`` as given to ``option``, refused in one line if the shell passed bytes that are not UTF-8 (Python keeps
    them as lone surrogates, which a tokenizer or a file write would fail on later)."""
    from .errors import UserError

    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")[:40]
        raise UserError(f"{option} {shown!r} is not valid UTF-8; accepted: UTF-8 text") from None
    return text
