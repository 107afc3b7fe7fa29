"""The places a command writes to: checked before any work starts, written atomically.

A command that would fail only when it saves (an ``--out`` that is a file, a folder that is
not writable) checks its paths first, so that the user gets one clear line at once and no
computed result is thrown away.  The checks create nothing.  :func:`write_atomic` then
writes each output through a temporary file in the same folder, renamed into place: a
kill or a full disk leaves the old file or none, never half of one, and no temporary file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from .errors import UserError, WriteError


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
    if isinstance(path, str) and not path.strip():
        raise UserError(f"{what} is empty ({path!r}); give a folder")
    path = Path(path)
    kind = what_is(path)
    if kind not in ("missing", "a folder"):
        raise UserError(f"{what} {str(path)!r} is {kind}, not a folder; give a folder")
    anchor = _existing_ancestor(path)
    if not anchor.is_dir():
        raise UserError(f"{what} {str(path)!r} cannot be created: {str(anchor)!r} is a file, not a folder")
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise UserError(f"{what} {str(path)!r} is not writable: folder {str(anchor)!r} is read-only")
    return path


def check_file(path, what: str) -> Path:
    """``path`` as a file the process can create or replace; else ValueError."""
    if isinstance(path, str) and not path.strip():
        raise UserError(f"{what} is empty ({path!r}); give a file name")
    path = Path(path)
    kind = what_is(path)
    if kind == "a folder":
        raise UserError(f"{what} {str(path)!r} is a folder; give a file name (e.g. {str(path / 'name')!r})")
    if kind not in ("missing", "a file"):  # renaming the output over it would replace a pipe, a device, a broken link
        raise UserError(f"{what} {str(path)!r} is {kind}, not a file; give a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{what} {str(path)!r} is read-only")
    check_folder(path.parent, f"the folder of {what}")
    return path


def check_outputs(folder: Path, files: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> None:
    """The names a command will write inside ``folder``: each file name must not be a folder
    and each folder name not a file, and what exists must be writable."""
    for name in files:
        path = Path(folder) / name
        if path.is_dir():
            raise UserError(f"{str(path)!r} is a folder, but the output {name!r} is written there as a file; "
                            "move it away or give another folder")
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{str(path)!r} is read-only; the output {name!r} cannot replace it")
    for name in folders:
        path = Path(folder) / name
        if path.exists() and not path.is_dir():
            raise UserError(f"{str(path)!r} is a file, but the outputs go into a folder {name!r} there; "
                            "move it away or give another folder")
        if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
            raise UserError(f"{str(path)!r} is read-only; the outputs {name!r} cannot be written there")


NAME_MAX = 255  # the longest file name most file systems take, where the folder cannot say


def name_limit(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def temporary_name(path: Path) -> Path:
    """A hidden name beside ``path`` for this process, keeping the suffix (writers pick the format by it), and
    within the folder's name limit: a valid name 250 characters long gets its stem cut in the temporary one."""
    tail = f".{os.getpid()}.tmp{path.suffix}"
    room = name_limit(path.parent) - 1 - len(tail)
    if room < 0:  # a suffix nearly as long as the limit: the temporary name goes without it
        return path.with_name(f".{os.getpid()}.tmp")
    return path.with_name(f".{path.stem[:room]}{tail}")


def write_atomic(path, write: Callable[[Path], object], disk_errors: tuple[type[BaseException], ...] = ()) -> Path:
    """``write(tmp)`` writes the whole output to a temporary file beside ``path``, which is then
    renamed to ``path``.  On any failure the temporary file is removed; a failure of the disk
    (full, read-only, too large: an OSError, or one of ``disk_errors``, which a writer such as
    safetensors raises in its place) is a WriteError naming ``path``."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except (OSError, *disk_errors) as error:
        tmp.unlink(missing_ok=True)
        reason = getattr(error, "strerror", None) or (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise WriteError(f"could not write {str(path)!r}: {reason}; nothing was left there", reason) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


LOCK_NAME = ".attnscale.lock"


STAGING = re.compile(r"\.[a-z]+\.(\d+)\.tmp")  # a run's staging folder in its output folder: .report.<pid>.tmp


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def symlinked_lock(lock: Path) -> UserError:
    return UserError(f"{str(lock)!r} is a symbolic link; attnscale writes its lock there itself: remove it, or write "
                     "elsewhere")


def check_lock_file(lock: Path) -> None:
    """UserError in one line where a symbolic link, a folder or anything but a file stands where the lock file
    ``lock`` goes (nothing is made)."""
    if lock.is_symlink():
        raise symlinked_lock(lock)
    kind = what_is(lock)
    if kind not in ("a file", "missing"):
        raise UserError(f"{str(lock)!r} is {kind}, not a file; remove it (attnscale makes it again)")


def open_lock_file(lock: Path) -> int:
    """A descriptor of the lock file ``lock`` (made if missing) to hold an advisory lock on, never opened through a
    symbolic link (:func:`check_lock_file` first)."""
    import errno

    check_lock_file(lock)
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:  # a link put there since it was looked at
            raise symlinked_lock(lock) from None
        raise


class FolderLock:
    """An exclusive hold on an output folder while one run writes it: a second writer is refused in one line
    while the first holds it (an advisory lock on ``folder/.attnscale.lock``, released when the process ends,
    killed or not).  ``with FolderLock(folder, "--out"):`` makes the folder if needed.

    Holding it, a run is the folder's only writer: what a killed run left (its lock file, its staging
    folders ``.<name>.<pid>.tmp`` of a process no longer alive) is removed.  The lock file is never opened
    through a symbolic link."""

    def __init__(self, folder: Path, what: str):
        self.folder, self.what, self.handle = Path(folder), what, None

    def __enter__(self) -> "FolderLock":
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        self.handle = os.fdopen(open_lock_file(self.folder / LOCK_NAME), "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.close()
            self.handle = None
            raise UserError(f"another attnscale run is writing {self.what} {str(self.folder)!r}; wait for it to end "
                            "or write elsewhere") from None
        self.remove_leftovers()
        return self

    def remove_leftovers(self) -> None:
        """The staging folders of runs that were killed (their process is gone)."""
        import shutil

        for path in self.folder.iterdir():
            found = STAGING.fullmatch(path.name)
            if found and int(found.group(1)) != os.getpid() and not pid_alive(int(found.group(1))):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            (self.folder / LOCK_NAME).unlink(missing_ok=True)  # the folder keeps no file of the lock's own
            self.handle.close()  # closing releases the lock


def replace_set(staging: Path, folder: Path, names: list[str], stale: list[Path]) -> None:
    """Move ``names`` from ``staging`` into ``folder`` (the last one last), then remove ``stale``: files an earlier
    run wrote that this run does not, so the folder holds one run's files."""
    for name in names:
        os.replace(staging / name, folder / name)
    for path in stale:
        if path.name not in names:
            path.unlink(missing_ok=True)


def what_is(path) -> str:
    """What stands at ``path``, in words, for a refusal: 'a folder', 'a named pipe (FIFO)', 'a character device',
    'a symbolic link that loops', 'a symbolic link to the missing ...', 'unreadable (...)', 'missing', 'a file'."""
    import errno
    import stat

    path = Path(path)
    try:
        mode = path.lstat().st_mode
    except OSError as error:
        return "missing" if error.errno in (errno.ENOENT, errno.ENOTDIR) else f"unreadable ({error.strerror})"
    if stat.S_ISLNK(mode):
        try:
            mode = path.stat().st_mode
        except RuntimeError:
            return "a symbolic link that loops"
        except OSError as error:
            if error.errno == errno.ELOOP:
                return "a symbolic link that loops"
            if error.errno in (errno.ENOENT, errno.ENOTDIR):
                return f"a symbolic link to the missing {os.readlink(path)!r}"
            return f"a symbolic link to {os.readlink(path)!r}, unreadable ({error.strerror})"
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a file"
