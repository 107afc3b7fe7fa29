"""The SQLite results store: a finished experiment is never run twice.

Each result is keyed by the lab, its code version and a hash of its full config (seed
included), so a rerun with the same settings reads the stored result, and any change of
config or code version computes afresh.  Writes are single transactions: a killed process
leaves either the whole row or none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    config TEXT NOT NULL,
    result TEXT NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL
)
"""


def config_key(kind: str, version: int, config) -> tuple[str, str]:
    """(key, canonical config JSON) for a dataclass or dict config."""
    data = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    text = json.dumps({"kind": kind, "version": version, "config": data}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32], text


class SQLiteTable:
    """One table in an SQLite file, created (with its folder) on first use; WAL mode so that
    readers and one writer from several processes do not block each other."""

    schema = SCHEMA

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(self.schema)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60)
        db.execute("PRAGMA journal_mode=WAL")
        return db


class Store(SQLiteTable):
    """The report's results table: one row per (lab, version, config)."""

    def get(self, key: str) -> tuple[dict, float] | None:
        """The stored (result, seconds it took), or None."""
        with self._connect() as db:
            row = db.execute("SELECT result, seconds FROM results WHERE key = ?", (key,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def put(self, key: str, kind: str, config_text: str, result: dict, seconds: float) -> None:
        payload = json.dumps(result, allow_nan=True)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO results (key, kind, config, result, seconds, created) VALUES (?, ?, ?, ?, ?, ?)",
                (key, kind, config_text, payload, seconds, time.time()),
            )

    def keys(self, kind: str | None = None) -> list[str]:
        with self._connect() as db:
            if kind is None:
                rows = db.execute("SELECT key FROM results").fetchall()
            else:
                rows = db.execute("SELECT key FROM results WHERE kind = ?", (kind,)).fetchall()
        return [r[0] for r in rows]
