"""A project-owned cache of the old distribution files: fetched once, verified always, never installed.

Why a cache of our own: the history check must read the published bytes, offline after the
first fetch, and must not mix them with the packages this environment runs on (the venv has
transformers 5; the 2019 ``transformers`` must never be importable from site-packages).
So the files are downloaded with ``pip download --no-deps --require-hashes`` into a folder of
ours (pip checks each file against the sha256 frozen in :mod:`.releases` before it unpacks or builds
anything of it; we check it again), and unpacked on demand into a sub-folder.  Fetching and
unpacking hold the cache's lock (``.attnscale-cache.lock``), so runs sharing a cache wait for each
other instead of racing.

Nothing here raises for a missing, truncated or altered file: :func:`status` and
:func:`unpack` return a :class:`CacheStatus` with the state, the reason and the command that
fetches the file, so a caller can show one row per release and go on with the others.

States: ``present`` (hash matches), ``missing`` (no file), ``partial`` (smaller than the
published file, or only a ``.part`` left by an interrupted fetch), ``tampered`` (the full size
or more, but another hash), ``unwritable`` (the file is right but cannot be unpacked here: a full
disk, a read-only folder; fetching again cannot help).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

from .. import environment
from ..errors import UserError
from .releases import RELEASES, Release

CACHE_ENV = environment.HISTORY_CACHE
# The command that fills the cache (``python -m attnscale.history.cache --fetch`` does the same).
FETCH_COMMAND = "attnscale history --fetch"
UNPACKED_FOLDER = "unpacked"
_DONE_MARKER = ".attnscale-unpacked"
STATES = ("present", "missing", "partial", "tampered", "unwritable")
LOCK_NAME = ".attnscale-cache.lock"
# errors of the disk, not of the file: the archive is fine, the place it is unpacked into is not
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


@dataclass(frozen=True)
class CacheStatus:
    """Where one release stands in the cache, and what to do if it is not usable."""

    release: Release
    state: str
    path: Path
    reason: str
    fetch_command: str

    @property
    def usable(self) -> bool:
        return self.state == "present"

    @property
    def advice(self) -> str:
        """What makes the release usable: fetching it, or room to unpack it (fetching again cannot help)."""
        if self.state == "unwritable":
            return f"make room in {self.path.parent} or set {CACHE_ENV} to a folder with room"
        return f"fetch with `{self.fetch_command}`"


@dataclass(frozen=True)
class Unpacked:
    """The result of :func:`unpack`: the status, and the folder that holds the import package (or None)."""

    status: CacheStatus
    root: Path | None


def default_cache_dir() -> Path:
    """``$ATTNSCALE_HISTORY_CACHE`` if set, else ``~/.cache/attnscale/history``; read at call time."""
    configured = environment.value(CACHE_ENV)
    if configured is not None:
        return Path(configured.strip()).expanduser().absolute()  # the probes run in another folder
    return Path.home() / ".cache" / "attnscale" / "history"


def resolve_cache_dir(cache_dir=None) -> Path:
    """``cache_dir`` as a Path (None: the default); ValueError for an empty name or a file."""
    if cache_dir is None:
        return default_cache_dir()
    if isinstance(cache_dir, str) and not cache_dir.strip():
        raise ValueError("cache_dir is empty; give a folder or None for the default")
    path = Path(cache_dir).expanduser().absolute()  # a relative folder would mean another one to the probes
    if path.exists() and not path.is_dir():
        raise ValueError(f"cache_dir {str(path)!r} is a file, not a folder")
    return path


def fetch_command_for(cache_dir: Path) -> str:
    """The shell command that fetches into ``cache_dir`` (names the folder when it is not the default)."""
    if Path(cache_dir) == default_cache_dir():
        return FETCH_COMMAND
    return f"{CACHE_ENV}={cache_dir} {FETCH_COMMAND}"


def archive_path(cache_dir, release: Release) -> Path:
    return resolve_cache_dir(cache_dir) / release.filename


def _partial_path(final: Path) -> Path:
    return final.with_name(final.name + ".part")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(cache_dir, release: Release) -> CacheStatus:
    """The state of one release's file in ``cache_dir``; reads and hashes it, changes nothing."""
    folder = resolve_cache_dir(cache_dir)
    path = folder / release.filename
    command = fetch_command_for(folder)

    def result(state: str, reason: str) -> CacheStatus:
        return CacheStatus(release, state, path, reason, command)

    if not path.exists():
        if _partial_path(path).exists():
            return result("partial", f"only an interrupted download {_partial_path(path).name} is there")
        return result("missing", f"{release.filename} is not in {folder}")
    if not path.is_file():
        return result("tampered", f"{path} is not a plain file")
    try:
        size = path.stat().st_size
        if size < release.size:
            return result("partial", f"{release.filename} has {size} of {release.size} bytes (truncated)")
        digest = sha256_of(path)
    except OSError as error:
        return result("missing", f"{release.filename} cannot be read: {error}")
    if digest != release.sha256:
        return result("tampered", f"{release.filename} has sha256 {digest[:16]}..., "
                                  f"published {release.sha256[:16]}... ({size} bytes, published {release.size})")
    return result("present", "sha256 matches the published file")


def status(cache_dir=None, releases: Iterable[Release] = RELEASES) -> list[CacheStatus]:
    """One :class:`CacheStatus` per release, in the order given."""
    return [check(cache_dir, release) for release in releases]


def default_pip() -> list[str]:
    """The pip of the running interpreter: the client this environment already trusts."""
    return [sys.executable, "-m", "pip"]


def pip_download_command(pip: Sequence[str], release: Release, dest: Path, requirements: Path) -> list[str]:
    """``pip download`` of exactly one distribution file of ``release``, without its dependencies, in pip's
    hash-checking mode: ``requirements`` (written by :func:`write_requirement`) pins the file's sha256, and pip
    refuses a download with another hash before it unpacks it or runs any of its code.

    A wheel is asked for with ``--only-binary :all:``, an sdist with ``--no-binary :all:``, so pip
    cannot pick the other kind of file for the same version.  (For an sdist whose hash matched, pip
    then runs the published sdist's metadata step in an isolated build environment; it installs nothing.)
    """
    binary = ["--only-binary", ":all:"] if release.kind == "wheel" else ["--no-binary", ":all:"]
    return [*pip, "download", "--no-deps", *binary, "--require-hashes", "--dest", str(dest), "-r", str(requirements)]


def write_requirement(release: Release, path: Path) -> Path:
    """A requirements file naming exactly ``release`` with its published sha256."""
    path.write_text(f"{release.requirement} --hash=sha256:{release.sha256}\n", encoding="utf-8")
    return path


class cache_lock:
    """The cache folder's lock, held while fetching or unpacking: another run sharing the cache waits for it
    (never refused: both want the same verified bytes).  Its file is opened as an output folder's is
    (:func:`attnscale.paths.open_lock_file`: never through a link, anything but a file refused)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_NAME

    def __enter__(self):
        from ..paths import open_lock_file

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = open_lock_file(self.path)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _fetch_one(folder: Path, release: Release, pip: Sequence[str], timeout_s: float) -> CacheStatus:
    """Download one release into a temporary folder inside ``folder``, verify it, move it in place."""
    final = folder / release.filename
    command = fetch_command_for(folder)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as scratch:
        scratch = Path(scratch)
        dest = scratch / "files"
        dest.mkdir()
        requirements = write_requirement(release, scratch / "requirement.txt")
        try:
            run = subprocess.run(pip_download_command(pip, release, dest, requirements), capture_output=True,
                                 text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as error:
            return CacheStatus(release, "missing", final, f"pip download failed to run: {error}", command)
        downloaded = dest / release.filename
        if run.returncode != 0 or not downloaded.exists():
            text = (run.stderr or run.stdout).strip()
            tail = text.splitlines()[-3:]
            got = ", ".join(p.name for p in dest.iterdir())
            if "DO NOT MATCH THE HASHES" in text:  # pip's own words for a refused download; nothing of it ran
                return CacheStatus(release, "tampered", final, f"pip refused the download of {release.filename}: "
                                   f"its sha256 is not the published {release.sha256[:16]}...; not kept", command)
            return CacheStatus(release, "missing", final,
                               f"pip download exited {run.returncode} and saved {got or 'nothing'}: {' | '.join(tail)}",
                               command)
        digest = sha256_of(downloaded)
        if digest != release.sha256:
            return CacheStatus(release, "tampered", final,
                               f"the downloaded {release.filename} has sha256 {digest[:16]}..., published "
                               f"{release.sha256[:16]}...; not kept", command)
        partial = _partial_path(final)
        shutil.copyfile(downloaded, partial)
        os.replace(partial, final)
    return check(folder, release)


def fetch(cache_dir=None, releases: Iterable[Release] = RELEASES, pip: Sequence[str] | None = None,
          timeout_s: float = 300.0) -> list[CacheStatus]:
    """Download every release that is not present (missing, partial or tampered) and verify it.

    Returns the status of each release after the attempt; a failed download is a status with
    the reason, never an exception, so one unreachable file does not stop the others.  A file
    with the wrong hash is replaced only by one with the right hash.
    """
    folder = resolve_cache_dir(cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    pip = list(pip) if pip is not None else default_pip()
    if not pip:
        raise ValueError("pip is an empty command; give e.g. [sys.executable, '-m', 'pip']")
    results = []
    with cache_lock(folder):
        for release in releases:
            current = check(folder, release)
            if current.usable:
                results.append(current)
                continue
            results.append(_fetch_one(folder, release, pip, timeout_s))
    return results


def _safe_member(name: str) -> bool:
    """Whether an archive member name stays inside the folder it is unpacked into."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return bool(parts) and not PurePosixPath(name).is_absolute() and ".." not in parts


def _extract(archive: Path, release: Release, into: Path) -> None:
    if release.kind == "wheel" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as bundle:
            unsafe = [n for n in bundle.namelist() if not _safe_member(n)]
            if unsafe:
                raise ValueError(f"{archive.name} has members outside its folder: {unsafe[:3]}")
            bundle.extractall(into)
        return
    with tarfile.open(archive) as bundle:
        unsafe = [m.name for m in bundle.getmembers() if not _safe_member(m.name)]
        if unsafe:
            raise ValueError(f"{archive.name} has members outside its folder: {unsafe[:3]}")
        if hasattr(tarfile, "data_filter"):
            bundle.extractall(into, filter="data")
        else:  # Python before 3.10.12 / 3.11.4: the names were checked above
            bundle.extractall(into)


def find_import_root(unpacked: Path, import_name: str) -> Path | None:
    """The folder that holds ``import_name/__init__.py``: the wheel's top, or the sdist's project folder."""
    candidates = sorted(unpacked.glob(f"{import_name}/__init__.py")) + sorted(
        unpacked.glob(f"*/{import_name}/__init__.py"))
    return candidates[0].parent.parent if candidates else None


def tree_digest(folder: Path) -> str:
    """sha256 over the relative path and bytes of every file under ``folder`` (the marker left out): what was
    unpacked, so a later edit of the copy, or a file added to it (a ``.pyc`` in a ``__pycache__``: the probe
    writes none), is noticed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        relative = path.relative_to(folder).as_posix()
        if relative == _DONE_MARKER:
            continue
        if path.is_symlink():  # an archive unpacked with tarfile's "data" filter holds no link that leaves it
            digest.update(relative.encode() + b"\0->" + os.readlink(path).encode() + b"\n")
            continue
        digest.update(relative.encode() + b"\0" + sha256_of(path).encode() + b"\n")
    return digest.hexdigest()


def _unpacked_is_intact(target: Path, release: Release) -> bool:
    """Whether ``target`` holds a finished unpack of this archive, unchanged since."""
    marker = target / _DONE_MARKER
    try:
        archive_hash, contents_hash = marker.read_text().split()
    except (OSError, ValueError):
        return False
    return archive_hash == release.sha256 and contents_hash == tree_digest(target)


def _unpack_into_place(archive: Path, release: Release, target: Path) -> None:
    """Extract into a temporary sibling folder, write the marker, and rename it to ``target``."""
    scratch = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        _extract(archive, release, scratch)
        (scratch / _DONE_MARKER).write_text(f"{release.sha256} {tree_digest(scratch)}\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def unpacked_copy(unpacked: Path, release: Release) -> Path:
    """Where ``release`` is unpacked, inside the cache's UNPACKED_FOLDER ``unpacked``."""
    return unpacked / f"{release.filename}-{release.sha256[:12]}"


def unpack(cache_dir, release: Release) -> Unpacked:
    """The release unpacked under ``<cache>/unpacked/``, verified first; root None if not usable.

    The archive's hash is checked on every call, and so is the unpacked copy (against the
    digest written when it was made): an edited or half-written copy is unpacked again, into
    a temporary folder renamed into place.
    """
    current = check(cache_dir, release)
    if not current.usable:
        return Unpacked(current, None)
    folder = resolve_cache_dir(cache_dir) / UNPACKED_FOLDER
    target = unpacked_copy(folder, release)
    if not _unpacked_is_intact(target, release):
        try:
            with cache_lock(folder.parent):
                if not _unpacked_is_intact(target, release):  # another run may have unpacked it while we waited
                    folder.mkdir(parents=True, exist_ok=True)
                    _unpack_into_place(current.path, release, target)
        except UserError:  # the cache's lock is not a file: nothing about this release
            raise
        except (OSError, ValueError, zipfile.BadZipFile, tarfile.TarError) as error:
            if isinstance(error, OSError) and error.errno in DISK_ERRORS:  # the archive is fine, the disk is not
                broken = CacheStatus(release, "unwritable", folder / release.filename,
                                     f"cannot unpack into {folder}: {error.strerror or error}", current.fetch_command)
            else:
                broken = CacheStatus(release, "tampered", current.path, f"cannot unpack: {error}", current.fetch_command)
            return Unpacked(broken, None)
    root = find_import_root(target, release.import_name)
    if root is None:
        missing = CacheStatus(release, "tampered", current.path,
                              f"no {release.import_name}/__init__.py inside {release.filename}", current.fetch_command)
        return Unpacked(missing, None)
    return Unpacked(current, root)


def check_can_unpack(cache_dir=None, releases: Iterable[Release] = RELEASES) -> None:
    """UserError, before any work, where releases present in the cache are not unpacked yet and the cache is a
    folder attnscale may not write (read-only, or owned by another user): the history lab would find every one of
    them unusable only when it reached them."""
    from ..paths import check_lock_file

    folder = resolve_cache_dir(cache_dir)
    check_lock_file(folder / LOCK_NAME)
    unpacked = folder / UNPACKED_FOLDER
    # unpacking writes the lock file and the unpacked folder into the cache, and the copies into the unpacked folder
    if not folder.is_dir() or all(os.access(place, os.W_OK | os.X_OK) for place in (folder, unpacked) if place.is_dir()):
        return
    waiting = [r for r in releases if check(folder, r).usable
               and not _unpacked_is_intact(unpacked_copy(unpacked, r), r)]
    if waiting:
        raise UserError(f"the history cache {str(folder)!r} is read-only and {len(waiting)} of its releases are not "
                        f"unpacked yet (the history lab unpacks them there); make it writable, or set {CACHE_ENV} to "
                        "a writable folder")


def _main(argv: Sequence[str]) -> int:
    """``--fetch`` downloads what is not present; without it, prints the status of each release."""
    unknown = [a for a in argv if a != "--fetch"]
    if unknown:
        print(f"unknown argument(s) {unknown}; use: {FETCH_COMMAND}  (or no argument for the status)")
        return 2
    results = fetch() if "--fetch" in argv else status()
    for item in results:
        print(f"{item.state:9} {item.release.label:32} {item.reason}")
    print(f"cache: {default_cache_dir()}")
    return 0 if all(item.usable for item in results) else 1


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
