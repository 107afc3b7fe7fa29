"""Checks of the places a command will write to, made before any work starts.

A command that would fail only when it saves (an ``--out`` that is a file, a folder that is
not writable) checks its paths first, so that the user gets one clear line at once and no
computed result is thrown away.  Nothing here creates anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError


def _existing_ancestor(path: Path) -> Path:
    """The nearest folder (or file) on the way to ``path`` that exists (``path`` itself if it does)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def check_folder(path, what: str) -> Path:
    """``path`` as a folder the process can create (if missing) and write into; else ValueError.

    ``what`` names the path in the message, e.g. "--out" or "report folder".
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {str(path)!r} is a file, not a folder; give a folder")
    anchor = _existing_ancestor(path)
    if not anchor.is_dir():
        raise UserError(f"{what} {str(path)!r} cannot be created: {str(anchor)!r} is a file, not a folder")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise UserError(f"{what} {str(path)!r} is not writable: folder {str(anchor)!r} is read-only")
    return path


def check_file(path, what: str) -> Path:
    """``path`` as a file the process can create or replace; else ValueError."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {str(path)!r} is a folder; give a file name (e.g. {str(path / 'name')!r})")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{what} {str(path)!r} is read-only")
    check_folder(path.parent, f"the folder of {what}")
    return path
