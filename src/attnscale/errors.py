"""The one error type for bad input.

:class:`UserError` is raised where attnscale checks what a user gave it (options, spec strings,
paths, stores, model folders, report files, config values).  It is a ``ValueError``, so code
that catches ``ValueError`` keeps working; the command line turns it (and only it, with usage
errors and unreadable or unwritable files) into one line on stderr and exit code 2.  Any other
exception is a bug in attnscale: the command line says so, prints the traceback, and exits 1.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input that the user can fix; the message names the bad value and what is accepted."""


class WriteError(UserError):
    """An output that could not be written (a full disk, a read-only or too-large file); the
    message names the path, ``reason`` says why, and nothing was left there."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def message_of(error: BaseException) -> str:
    """The error's first line; where it only announces what follows (a config validator's "Validation error for
    field 'x':"), the line under it too, which says what was refused (at most 300 characters)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()] or [type(error).__name__]
    return (f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0])[:300]


def first_line(error: BaseException) -> str:
    """The error's type and :func:`message_of` it."""
    return f"{type(error).__name__}: {message_of(error)}"[:300]
