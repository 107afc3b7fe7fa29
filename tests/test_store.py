"""The SQLite stores check their file when they open it, before anything is computed.

The checks live in store.SQLiteTable, so the report's Store and the sweep's RunStore both
have them.  (Read-only files are tested through the command line in test_misuse.py, where
file permissions can be made to apply even to root.)
"""

import hashlib
import json
import os
import random
import math
import sqlite3

import pytest

from attnscale.runs import RunStore
from attnscale.store import SCHEMA, Store

STORES = [Store, RunStore]


def filled_store(path, cls=Store):
    store = cls(path)
    if cls is Store:
        store.put("k", "variance", "{}", {"x": list(range(20000))}, 1.0)
    else:
        store.put("k", {"seed": 0}, {"status": "finished", "x": list(range(20000))}, 1.0)
    return store


def rollback_store(path, result: str) -> None:
    """A results store with a rollback journal: the file alone holds it (no -wal file beside it)."""
    db = sqlite3.connect(path)
    db.execute(SCHEMA)
    db.execute("INSERT INTO results VALUES ('k', 'variance', '{}', ?, 1.0, 0.0, NULL)", (result,))
    db.commit()
    db.close()
    assert not os.path.exists(f"{path}-wal")


@pytest.mark.parametrize("cls", STORES)
def test_a_good_store_opens_and_keeps_its_rows(cls, tmp_path):
    filled_store(tmp_path / "s.sqlite", cls)
    reopened = cls(tmp_path / "s.sqlite")
    assert reopened.get("k") is not None and cls(tmp_path / "s.sqlite", readonly=True).get("k") == reopened.get("k")


@pytest.mark.parametrize("cls", STORES)
def test_garbage_is_refused_naming_the_file(cls, tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(random.Random(0).randbytes(5000))
    with pytest.raises(ValueError, match=r"s\.sqlite' is not a usable SQLite store \(file is not a database\)"):
        cls(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]


@pytest.mark.parametrize("keep", [0.1, 0.5])
def test_a_truncated_store_is_refused(keep, tmp_path):
    path = tmp_path / "s.sqlite"
    rollback_store(path, json.dumps({"x": list(range(20000))}))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match="malformed|not a database"):
        Store(path)


@pytest.mark.parametrize("cls", STORES)
def test_a_folder_is_refused(cls, tmp_path):
    (tmp_path / "s.sqlite").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        cls(tmp_path / "s.sqlite")


def test_a_store_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        Store(tmp_path / "f" / "s.sqlite")


def test_a_table_with_other_columns_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (key TEXT, spec TEXT)")
    db.close()
    with pytest.raises(ValueError, match="'runs' table with columns key, spec; expected key, spec, status"):
        RunStore(path)


def test_a_result_holding_nan_or_infinity_is_read_back_after_reopening(tmp_path):
    """SQLite's json_valid rejects NaN; a stored result that holds one (a probe that could not
    read a path) must still open, as a rerun reuses it."""
    path = tmp_path / "s.sqlite"
    Store(path).put("k", "audit", "{}", {"path": math.nan, "limit": math.inf, "rows": [{"x": -math.inf}]}, 1.0)
    result, _ = Store(path).get("k")
    assert math.isnan(result["path"]) and result["limit"] == math.inf and result["rows"] == [{"x": -math.inf}]


@pytest.mark.parametrize("text", ["[1, 2]", "not json", '"a string"', "null", "[NaN]", "NaN"])
def test_a_row_that_is_not_a_result_is_refused(text, tmp_path):
    path = tmp_path / "s.sqlite"
    rollback_store(path, text)
    with pytest.raises(ValueError, match="row that is not a result \\(key 'k': its result is not a JSON object\\)"):
        Store(path)


def test_read_only_opening_needs_an_existing_store_of_its_kind(tmp_path):
    with pytest.raises(FileNotFoundError):
        RunStore(tmp_path / "none.sqlite", readonly=True)
    assert not (tmp_path / "none.sqlite").exists()
    filled_store(tmp_path / "results.sqlite")
    with pytest.raises(ValueError, match="no 'runs' table"):
        RunStore(tmp_path / "results.sqlite", readonly=True)


def test_opening_a_new_store_creates_it_and_its_folder(tmp_path):
    Store(tmp_path / "a" / "b" / "s.sqlite").put("k", "variance", "{}", {"x": 1}, 1.0)
    assert Store(tmp_path / "a" / "b" / "s.sqlite").get("k") == ({"x": 1}, 1.0)


@pytest.mark.parametrize("cls", STORES)
def test_a_row_edited_after_it_was_written_is_refused_naming_it(cls, tmp_path):
    """A hand-edited number (NaN where the lab wrote a value) no longer matches the row's digest."""
    filled_store(tmp_path / "s.sqlite", cls)
    table = "results" if cls is Store else "runs"
    db = sqlite3.connect(tmp_path / "s.sqlite")
    db.execute(f"UPDATE {table} SET result = replace(result, '[0, 1,', '[NaN, 1,')")
    db.commit()
    db.close()
    for readonly in (False, True):
        with pytest.raises(ValueError, match=r"key 'k' was changed after attnscale wrote it"):
            cls(tmp_path / "s.sqlite", readonly=readonly)


@pytest.mark.parametrize("cls", STORES)
@pytest.mark.parametrize("column", ["seconds", "created"])
def test_every_column_read_back_is_covered_by_the_digest(cls, column, tmp_path):
    """The seconds a row took (shown in the report) and when a run was stored (which decides
    whether a sweep reuses it) are read back, so an edit of either is refused like one of the result."""
    filled_store(tmp_path / "s.sqlite", cls)
    table = "results" if cls is Store else "runs"
    read_back = set(cls.digest_columns)
    if column == "created" and cls is Store:
        assert "created" not in read_back  # never read back from the results table
        return
    assert column in read_back
    db = sqlite3.connect(tmp_path / "s.sqlite")
    db.execute(f"UPDATE {table} SET {column} = {column} + 0.5")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match=r"key 'k' was changed after attnscale wrote it"):
        cls(tmp_path / "s.sqlite", readonly=True)


@pytest.mark.parametrize("cls", STORES)
def test_a_row_with_a_digest_of_the_earlier_format_is_not_trusted(cls, tmp_path):
    """Digests once covered the key and JSON columns only: such a row's timing is not vouched for, so it is
    read as a row without a digest (the report refuses it, a sweep trains the run again)."""
    filled_store(tmp_path / "s.sqlite", cls)
    table = "results" if cls is Store else "runs"
    old_columns = ("key", "kind", "config", "result") if cls is Store else ("key", "spec", "status", "result")
    db = sqlite3.connect(tmp_path / "s.sqlite")
    texts = db.execute(f"SELECT {', '.join(old_columns)} FROM {table}").fetchone()
    old_digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:32]
    db.execute(f"UPDATE {table} SET digest = ?", (old_digest,))
    db.commit()
    db.close()
    store = cls(tmp_path / "s.sqlite")
    if cls is Store:
        assert store.get("k") is not None and not store.has_digest("k")
    else:
        assert store.get("k") is None and store.keys() == set() and store.unverified() == 1
        store.put("k", {"seed": 0}, {"status": "finished", "x": [1]}, 2.0)  # trained again: the row is replaced
        assert store.get("k") == {"status": "finished", "x": [1]} and store.unverified() == 0


def test_a_digest_reads_the_stored_number_not_its_spelling(tmp_path):
    """SQLite stores the seconds as a float whatever was handed to it (an int, a numpy float): the digest is
    written over the value as read back, so the row opens again."""
    import numpy as np

    for number, seconds in enumerate([3, np.float64(0.1), 1e-300, 7.0]):
        Store(tmp_path / "s.sqlite").put(f"k{number}", "variance", "{}", {"x": 1}, seconds)
    assert [Store(tmp_path / "s.sqlite", readonly=True).get(f"k{n}")[1] for n in range(4)] == [3.0, 0.1, 1e-300, 7.0]


@pytest.mark.parametrize("cls", STORES)
def test_a_store_written_before_rows_had_digests_is_read_and_upgraded(cls, tmp_path):
    old_schema = cls.schema.replace(",\n    digest TEXT", "")
    db = sqlite3.connect(tmp_path / "s.sqlite")
    db.execute(old_schema)
    row = ("k", "variance", "{}", '{"x": 1}', 1.0, 0.0) if cls is Store else ("k", "{}", "finished", '{"status": "finished"}', 1.0, 0.0)
    db.execute(f"INSERT INTO {'results' if cls is Store else 'runs'} VALUES (?, ?, ?, ?, ?, ?)", row)
    db.commit()
    db.close()
    store = cls(tmp_path / "s.sqlite")
    if cls is Store:  # read as stored; the report refuses a row without a digest (test_report)
        assert store.get("k") is not None and not store.has_digest("k")
    else:  # not known to be a run's output: left out, so the run is trained again
        assert store.get("k") is None and store.keys() == set() and store.unverified() == 1
    columns = [r[1] for r in sqlite3.connect(tmp_path / "s.sqlite").execute(
        f"PRAGMA table_info({'results' if cls is Store else 'runs'})")]
    assert columns[-1] == "digest"
