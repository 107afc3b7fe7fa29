"""The SQLite results store: a finished experiment is never run twice.

Each result is keyed by the lab, its code version and a hash of its full config (seed
included), so a rerun with the same settings reads the stored result, and any change of
config or code version computes afresh.  Writes are single transactions: a killed process
leaves either the whole row or none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import sqlite3
import time
import urllib.parse
from pathlib import Path

from .errors import UserError
from .paths import check_folder, what_is

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    config TEXT NOT NULL,
    result TEXT NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL,
    digest TEXT
)
"""

COMPANIONS = ("-wal", "-shm", "-journal")  # the files SQLite keeps beside a store


def name_max(folder: Path) -> int:
    """The longest file name ``folder``'s file system takes, in bytes (255 where it cannot be asked)."""
    for place in (folder, *folder.parents):
        if place.is_dir():
            try:
                return os.pathconf(place, "PC_NAME_MAX")
            except (OSError, ValueError):
                return 255
    return 255


# Digests of this format cover every column a store reads back (the timings too); an earlier
# format covered the key and JSON columns only, and its rows are read as rows without a digest.
DIGEST_FORMAT = "2:"


def row_digest(*values: str | float) -> str:
    """The digest a row is written with, over every column read back from it: a row edited by
    hand afterwards (a number set to NaN, a list emptied, a time changed) no longer matches it
    and is refused.  It guards against accidents and stale code, not against someone who can
    rewrite the file and recompute the digest."""
    texts = (repr(float(value)) if isinstance(value, float | int) and not isinstance(value, bool) else str(value)
             for value in values)
    return DIGEST_FORMAT + hashlib.sha256("\0".join(texts).encode()).hexdigest()[:32]


def digested(column: str = "digest") -> str:
    """SQL that is true for a row whose digest is of the current format (NULL where it has none)."""
    return f"{column} LIKE '{DIGEST_FORMAT}%'"


def config_key(kind: str, version: int | str, config) -> tuple[str, str]:
    """(key, canonical config JSON) for a dataclass or dict config."""
    data = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    text = json.dumps({"kind": kind, "version": version, "config": data}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32], text


class SQLiteTable:
    """One table in an SQLite file, created (with its folder) on first use; WAL mode so that
    readers and one writer from several processes do not block each other.

    Opening checks the file before anything is computed, and raises ValueError naming it
    when it is a folder, not an SQLite database (garbage, truncated, damaged), holds a table
    of this name with other columns, or holds a row whose JSON columns (:attr:`json_columns`)
    are not JSON objects; and, unless ``readonly``, when the file or its folder cannot be
    written (SQLite writes its journal next to the file).  ``readonly=True`` opens an
    existing store for reading only (FileNotFoundError if there is none).
    """

    schema = SCHEMA
    json_columns = ("config", "spec", "result")  # those of them that the table has hold JSON objects
    digest_columns = ("key", "kind", "config", "result", "seconds")  # what a row's digest covers, in this order

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self.table = self.table_name()
        self.digests = False  # whether the table has the digest column (set when it is checked)
        self._check_location()
        self._uri = self._read_uri() if readonly else None
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        made = not readonly and not self.path.exists()
        try:
            self._validate()
        except sqlite3.DatabaseError as error:
            self._remove_if_made(made)
            raise UserError(f"{self._name()} is not a usable SQLite store ({error}); move it away or use "
                             "another file") from None
        except BaseException:
            self._remove_if_made(made)
            raise

    def _remove_if_made(self, made: bool) -> None:
        """A store this opening created and could not finish leaves nothing behind (nor its companions)."""
        if made:
            for path in (self.path, *(Path(f"{self.path}{suffix}") for suffix in COMPANIONS)):
                if path.is_file() and not path.is_symlink():
                    path.unlink(missing_ok=True)

    @classmethod
    def check(cls, path: str | Path) -> None:
        """Every check of opening ``path`` for writing, creating nothing: a command that opens two
        stores checks both before it makes either."""
        probe = cls.__new__(cls)
        probe.path, probe.readonly, probe.table = Path(path), False, cls.table_name()
        probe._check_location()
        if probe.path.exists():
            cls(path, readonly=True)
            probe._check_unlocked()

    def _check_unlocked(self) -> None:
        """Refuse a store another process is writing now (a report or sweep on the same file): found before the
        work, not after it, when the first write would wait and give up."""
        with contextlib.closing(sqlite3.connect(self.path, timeout=0, isolation_level=None)) as db:
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute("ROLLBACK")
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) and "busy" not in str(error):
                    raise
                raise UserError(f"{self._name()} is locked: another process is writing it (a report or a sweep on "
                                "the same file); wait for it to finish, or use another file") from None

    @classmethod
    def table_name(cls) -> str:
        return re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", cls.schema).group(1)

    def _read_uri(self) -> str:
        """Read-only opening: a read-write connection where the file and folder allow it (so that
        SQLite removes its -wal and -shm files on closing), else a read-only one."""
        path = self.path.resolve()
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
        return f"file:{urllib.parse.quote(str(path))}?mode={'rw' if writable else 'ro'}"

    def _name(self) -> str:
        return f"store {str(self.path)!r}"

    def _check_location(self) -> None:
        kind = what_is(self.path)
        if kind == "a folder":
            raise UserError(f"{self._name()} is a folder, not an SQLite file; give a file path")
        if kind not in ("a file", "missing"):  # a pipe or a device would hang SQLite or read as garbage
            raise UserError(f"{self._name()} is {kind}, not an SQLite file; give a file path")
        if self.readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"no {self._name()}")
            return
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise UserError(f"{self._name()} is read-only; make it writable or use another file")
        self._check_companions()
        folder = self.path.parent
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(f"{self._name()} is in a read-only folder (SQLite writes its journal next to the "
                             "file); use a writable folder")
        check_folder(folder, "store folder")

    def _check_companions(self) -> None:
        """SQLite keeps files beside the store (``-wal``, ``-shm``, ``-journal``): each must be a plain file (not a
        link, which SQLite would write through) or absent, and its name must fit in the folder's longest name."""
        longest = name_max(self.path.parent)
        for suffix in COMPANIONS:
            companion = Path(f"{self.path}{suffix}")
            if len(companion.name.encode()) > longest:
                raise UserError(f"{self._name()} has a name of {len(self.path.name.encode())} bytes; SQLite keeps a "
                                f"{suffix} file beside it, and names here are at most {longest} bytes: use a name of at "
                                f"most {longest - max(map(len, COMPANIONS))} bytes")
            kind = "a symbolic link (SQLite would write through it)" if companion.is_symlink() else what_is(companion)
            if kind not in ("a file", "missing"):
                raise UserError(f"{self._name()}: {str(companion)!r}, where SQLite keeps its {suffix} file, is {kind}; "
                                "move it away or use another file")

    def _expected_columns(self) -> list[str]:
        with contextlib.closing(sqlite3.connect(":memory:")) as db:
            db.execute(self.schema)
            return [row[1] for row in db.execute(f"PRAGMA table_info({self.table})")]

    def _validate(self) -> None:
        if self.readonly:
            try:
                self._check_contents()
                return
            except sqlite3.OperationalError:
                if "mode=ro" not in self._uri:  # a writer's lock outlasting the wait, say: not a read-only folder
                    raise
                self._read_without_wal()  # a WAL store in a read-only folder
        self._check_contents()

    def _read_without_wal(self) -> None:
        """Read a WAL store SQLite cannot open read-only (no -shm file, a folder it cannot write) as the file
        alone: whole when its -wal file is empty or gone, refused when the last writes sit there."""
        wal = Path(f"{self.path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise UserError(f"{self._name()} is in a read-only folder and its last writes are still in {str(wal)!r}, "
                            "which SQLite can only fold in where it may write; copy both files to a writable folder "
                            "(or let the writer finish), then read the copy")
        self._uri = self._uri.replace("mode=ro", "immutable=1")

    def _check_contents(self) -> None:
        db = self._open()
        try:
            damage = db.execute("PRAGMA quick_check").fetchone()[0]
            if damage != "ok":
                raise UserError(f"{self._name()} is damaged ({damage}); move it away or use another file")
            expected = self._expected_columns()
            found = [row[1] for row in db.execute(f"PRAGMA table_info({self.table})")]
            if not found:
                if self.readonly:
                    raise UserError(f"{self._name()} has no {self.table!r} table; it is not this kind of attnscale store")
                db.execute(self.schema)
            elif sorted(found + ["digest"]) == sorted(expected):
                # written before rows carried a digest: its rows are read as they are, new rows get one
                if not self.readonly:
                    db.execute(f"ALTER TABLE {self.table} ADD COLUMN digest TEXT")
                    found.append("digest")
            elif sorted(found) != sorted(expected):
                raise UserError(f"{self._name()} has a {self.table!r} table with columns {', '.join(found)}; expected "
                                 f"{', '.join(expected)}")
            label = "key" if "key" in expected else "rowid"
            for column in (c for c in self.json_columns if c in expected):
                bad = self._first_non_object(db, label, column)
                if bad is not None:
                    raise UserError(f"{self._name()} holds a row that is not a result ({label} {bad[0]!r}: its {column} "
                                     "is not a JSON object); remove that row or use another file")
            self.digests = not found or "digest" in found  # a table just made has the column
            if self.digests:
                self._check_digests(db)
            if not self.readonly:
                db.execute("PRAGMA journal_mode=WAL")
            db.commit()
        finally:
            db.close()

    def _check_digests(self, db: sqlite3.Connection) -> None:
        columns = ", ".join(self.digest_columns)
        for *values, digest in db.execute(f"SELECT {columns}, digest FROM {self.table} WHERE {digested()}"):
            if row_digest(*values) != digest:
                raise UserError(f"{self._name()}: the row of key {values[0]!r} was changed after attnscale wrote it (it "
                                "no longer matches its digest); remove that row, or the file, to have it recomputed")

    def _first_non_object(self, db: sqlite3.Connection, label: str, column: str):
        """The label of the first row whose ``column`` is not a JSON object, or None.

        SQLite's json_valid rejects NaN and Infinity, which results may hold (``put`` writes
        them, as Python's json does); rows it rejects are parsed here before being called bad."""
        valid_non_object = db.execute(f"SELECT {label} FROM {self.table} WHERE json_valid({column}) = 1 AND "
                                      f"json_type({column}) != 'object' LIMIT 1").fetchone()
        if valid_non_object is not None:
            return valid_non_object[0]
        for row_label, text in db.execute(f"SELECT {label}, {column} FROM {self.table} WHERE {column} IS NULL "
                                          f"OR json_valid({column}) = 0"):
            try:
                if not isinstance(json.loads(text), dict):
                    return row_label
            except (TypeError, ValueError, RecursionError):
                return row_label
        return None

    def _open(self) -> sqlite3.Connection:
        if self._uri is not None:
            return sqlite3.connect(self._uri, uri=True, timeout=60)
        return sqlite3.connect(self.path, timeout=60)

    def _connect(self) -> sqlite3.Connection:
        db = self._open()
        if not self.readonly:
            db.execute("PRAGMA journal_mode=WAL")
        return db


class Store(SQLiteTable):
    """The report's results table: one row per (lab, version, config)."""

    def get(self, key: str) -> tuple[dict, float] | None:
        """The stored (result, seconds it took), or None."""
        with self._connect() as db:
            row = db.execute("SELECT result, seconds FROM results WHERE key = ?", (key,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def has_digest(self, key: str) -> bool:
        """Whether the row was written with a digest (by this attnscale; checked when the store was
        opened), as opposed to a row of an older store or one inserted by hand."""
        if not self.digests:
            return False
        with contextlib.closing(self._connect()) as db:
            row = db.execute(f"SELECT {digested()} FROM results WHERE key = ?", (key,)).fetchone()
        return bool(row and row[0])

    def put(self, key: str, kind: str, config_text: str, result: dict, seconds: float) -> None:
        payload, seconds = json.dumps(result, allow_nan=True), float(seconds)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO results (key, kind, config, result, seconds, created, digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, kind, config_text, payload, seconds, time.time(),
                 row_digest(key, kind, config_text, payload, seconds)),
            )

    def keys(self, kind: str | None = None) -> list[str]:
        with self._connect() as db:
            if kind is None:
                rows = db.execute("SELECT key FROM results").fetchall()
            else:
                rows = db.execute("SELECT key FROM results WHERE kind = ?", (kind,)).fetchall()
        return [r[0] for r in rows]
