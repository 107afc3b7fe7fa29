"""Sweep execution: the SQLite run store, the local process pool (resume, skip finished runs,
a killed worker, a killed sweep), the sweep summary, and the Ray executor."""

import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from attnscale import runs
from attnscale import train as T

ATTNSCALE = [str(Path(sys.executable).parent / "attnscale")]


def tiny(**kw):
    base = dict(task="recall", d_head=8, d_model=16, steps=10, log_every=5, batch_size=8)
    base.update(kw)
    return T.RunSpec(**base)


def fake_result(status="finished"):
    return {"status": status, "initial_val_loss": 3.0, "final_val_loss": 2.0, "final_val_acc": 0.5, "chance_acc": 0.1}


def test_store_one_row_per_key_and_keys(tmp_path):
    store = runs.RunStore(tmp_path / "r.sqlite")
    spec = dataclasses.asdict(tiny())
    key = runs.run_key(spec)
    store.put(key, spec, fake_result(), 1.0)
    store.put(key, spec, fake_result("diverged"), 2.0)  # a second write of the same run is ignored
    rows = store.rows()
    assert len(rows) == 1 and rows[0]["status"] == "finished" and rows[0]["seconds"] == 1.0
    assert store.keys() == {key} and store.get(key)["final_val_loss"] == 2.0


def test_run_key_depends_on_every_field_and_validates():
    a = runs.run_key(tiny())
    assert a == runs.run_key(dataclasses.asdict(tiny()))
    assert a != runs.run_key(tiny(lr=1e-2)) and a != runs.run_key(tiny(seed=1))
    with pytest.raises(ValueError, match="optimiser"):
        runs.run_key(dict(dataclasses.asdict(tiny()), optimiser="rmsprop"))


def test_execute_pool_matches_in_process_training_and_skips_stored_runs(tmp_path):
    specs = [tiny(rule=r) for r in ("sqrt", "none")] + [tiny(rule="sqrt")]  # a duplicate runs once
    db = tmp_path / "runs.sqlite"
    seen = []
    results = runs.execute(specs, db, workers=2, progress=lambda d, t, m: seen.append((d, t)))
    assert len(results) == 2 and seen[-1] == (2, 2)
    store = runs.RunStore(db)
    created = {r["key"]: r for r in store.rows()}
    direct = T.train(tiny(rule="none"))
    assert results[runs.run_key(tiny(rule="none"))]["log"]["val_loss"] == pytest.approx(direct["log"]["val_loss"], rel=1e-5)
    again = []
    runs.execute(specs, db, workers=2, progress=lambda d, t, m: again.append(m))
    assert again == ["2/2 runs already stored"]
    assert {r["key"]: r for r in store.rows()} == created


def test_execute_rejects_bad_options():
    with pytest.raises(ValueError, match="executor"):
        runs.execute([tiny()], executor="slurm")
    with pytest.raises(ValueError, match="workers"):
        runs.execute([tiny()], workers=0)


def test_checkpoint_is_safetensors(tmp_path):
    from safetensors.torch import load_file

    spec = dataclasses.asdict(tiny())
    runs.run_one(spec, str(tmp_path))
    tensors = load_file(str(tmp_path / f"{runs.run_key(spec)}.safetensors"))
    assert "blocks.0.attn.w_q.weight" in tensors


def test_summary_folds_the_lr_grid_with_wortsman_sensitivity():
    rows = []
    for lr, final in ((1e-3, 2.0), (1e-2, 1.0), (1e-1, None)):
        result = {"status": "finished" if final else "diverged", "initial_val_loss": 3.0, "final_val_loss": final,
                  "final_val_acc": None, "chance_acc": None}
        rows.append({"spec": dataclasses.asdict(tiny(lr=lr)), "result": result})
    (line,) = runs.summary(rows)
    assert line["best_lr"] == 1e-2 and line["best_final_loss"] == 1.0 and line["diverged"] == 1
    assert line["lr_sensitivity"] == pytest.approx((2.0 + 1.0 + 3.0) / 3 - 1.0)


# --------------------------------------------------------------------------- killing things

SWEEP = ["sweep", "--task", "recall", "--rules", "sqrt,inv_d,none", "--d-heads", "8", "--lrs", "1e-3,3e-3",
         "--steps", "120", "--d-model", "16", "--log-every", "40", "--workers", "2"]


def sweep_keys():
    return {runs.run_key(tiny(rule=r, lr=lr, steps=120, log_every=40, batch_size=64))
            for r in ("sqrt", "inv_d", "none") for lr in (1e-3, 3e-3)}


def row_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=30) as con:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def workers_of(pid: int) -> list[int]:
    found = []
    for child in children(pid):
        cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            found.append(child)
    return found


def start_sweep(db: Path) -> subprocess.Popen:
    return subprocess.Popen(ATTNSCALE + SWEEP + ["--db", str(db)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "200"})


def wait_for(condition, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def check_rows(db: Path, expected: set | None = None) -> None:
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = [k for (k,) in con.execute("SELECT key FROM runs")]
        for (text,) in con.execute("SELECT result FROM runs"):
            assert json.loads(text)["status"] in ("finished", "diverged")
    assert len(keys) == len(set(keys))
    assert set(keys) == (sweep_keys() if expected is None else expected)


@pytest.mark.slow
def test_sweep_survives_a_killed_worker_and_a_rerun_adds_nothing(tmp_path):
    db = tmp_path / "runs.sqlite"
    proc = start_sweep(db)
    assert wait_for(lambda: workers_of(proc.pid) and row_count(db) >= 1), proc.stderr.read().decode()[-2000:]
    victims = workers_of(proc.pid)
    os.kill(victims[0], signal.SIGKILL)
    assert proc.wait(timeout=600) == 0, proc.stderr.read().decode()[-2000:]
    check_rows(db)
    with sqlite3.connect(db) as con:
        before = con.execute("SELECT key, created FROM runs ORDER BY key").fetchall()
    rerun = subprocess.run(ATTNSCALE + SWEEP + ["--db", str(db)], capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT key, created FROM runs ORDER BY key").fetchall() == before


@pytest.mark.slow
def test_sweep_killed_with_kill_9_resumes_without_loss_or_duplicates(tmp_path):
    db = tmp_path / "runs.sqlite"
    proc = start_sweep(db)
    assert wait_for(lambda: row_count(db) >= 2), proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    kept = row_count(db)
    assert 2 <= kept <= 6
    rerun = subprocess.run(ATTNSCALE + SWEEP + ["--db", str(db)], capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    check_rows(db)


def test_cli_sweep_summary_and_errors(tmp_path):
    missing = subprocess.run(ATTNSCALE + ["sweep", "--summary", "--db", str(tmp_path / "none.sqlite")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no run store" in missing.stderr
    bad = subprocess.run(ATTNSCALE + ["sweep", "--lrs", "fast", "--db", str(tmp_path / "x.sqlite")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "'fast'" in bad.stderr
    db = tmp_path / "s.sqlite"
    store = runs.RunStore(db)
    spec = dataclasses.asdict(tiny())
    store.put(runs.run_key(spec), spec, fake_result(), 1.0)
    shown = subprocess.run(ATTNSCALE + ["sweep", "--summary", "--db", str(db)], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "250"})
    assert shown.returncode == 0 and "lr_sensitivity" in shown.stdout


# --------------------------------------------------------------------------- Ray

@pytest.mark.slow
def test_ray_executor_gives_the_same_rows_as_the_local_pool(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        print("Ray is not installed (pip install 'attnscale[ray]'); skipping the Ray executor test")
        pytest.skip("Ray is not installed: pip install 'attnscale[ray]'")
    specs = [tiny(rule="sqrt"), tiny(rule="inv_d")]
    local = runs.execute(specs, tmp_path / "local.sqlite", workers=2)
    ray_dir = tempfile.mkdtemp(prefix="ar", dir="/tmp")  # Ray's socket paths must stay short
    home_ray = Path.home() / ".ray"
    had_home_ray = home_ray.exists()
    try:
        on_ray = runs.execute(specs, tmp_path / "ray.sqlite", workers=2, executor="ray", ray_dir=ray_dir)
    except Exception as error:  # noqa: BLE001 - a machine where Ray cannot start is a skip, with the reason
        print(f"Ray could not start here: {error!r}")
        pytest.skip(f"Ray could not start on this machine: {error!r}")
    assert set(on_ray) == set(local)
    for key in local:
        assert on_ray[key]["status"] == local[key]["status"]
        assert on_ray[key]["log"]["step"] == local[key]["log"]["step"]
        assert on_ray[key]["log"]["val_loss"] == pytest.approx(local[key]["log"]["val_loss"], rel=1e-5)
    assert runs.RunStore(tmp_path / "ray.sqlite").keys() == runs.RunStore(tmp_path / "local.sqlite").keys()
    shutil.rmtree(ray_dir, ignore_errors=True)
    assert had_home_ray or not home_ray.exists(), "Ray wrote into HOME"


def test_ray_missing_is_a_clear_value_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'attnscale\[ray\]'"):
        runs.execute([tiny()], tmp_path / "r.sqlite", executor="ray")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_no_worker_outlives_a_sweep_killed_with_kill_9(tmp_path):
    db = tmp_path / "runs.sqlite"
    proc = start_sweep(db)
    assert wait_for(lambda: len(workers_of(proc.pid)) >= 2), proc.stderr.read().decode()[-2000:]
    spawned = children(proc.pid)  # the workers and multiprocessing's resource tracker
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert wait_for(lambda: not any(alive(pid) for pid in spawned), timeout=10), \
        [Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in spawned if alive(pid)]


def test_runs_stored_since_a_fresh_start_replace_older_ones(tmp_path):
    spec = dataclasses.asdict(tiny())
    key = runs.run_key(spec)
    old = runs.RunStore(tmp_path / "r.sqlite")
    old.put(key, spec, fake_result(), 1.0)
    time.sleep(0.01)
    fresh = runs.RunStore(tmp_path / "r.sqlite", since=time.time())
    assert fresh.keys() == set() and fresh.get(key) is None
    fresh.put(key, spec, fake_result("diverged"), 2.0)
    fresh.put(key, spec, fake_result(), 3.0)  # stored since: kept as it is
    assert runs.RunStore(tmp_path / "r.sqlite").get(key)["status"] == "diverged"


def test_a_run_row_without_a_digest_is_trained_again_and_replaced(tmp_path):
    """A row put in by hand (no digest) holding a made-up result is not reused: execute trains
    the run, the trained result replaces the row, and the summary leaves such rows out."""
    spec = dataclasses.asdict(tiny())
    key = runs.run_key(spec)
    db = tmp_path / "r.sqlite"
    runs.RunStore(db)  # the table, with its digest column
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO runs (key, spec, status, result, seconds, created) VALUES (?, ?, ?, ?, ?, ?)",
                           (key, json.dumps(spec), "finished", json.dumps(fake_result()), 1.0, 0.0))
    store = runs.RunStore(db)
    assert store.keys() == set() and store.get(key) is None and store.rows() == [] and store.unverified() == 1
    trained = runs.execute([tiny()], db, workers=1)[key]
    assert trained["final_val_loss"] != fake_result()["final_val_loss"]
    assert trained == T.train(tiny())  # the run itself, not the hand-made row
    assert store.unverified() == 0 and store.get(key) == trained


def test_the_sweep_summary_names_rows_left_out_for_want_of_a_digest(tmp_path):
    spec = dataclasses.asdict(tiny())
    db = tmp_path / "r.sqlite"
    runs.RunStore(db).put(runs.run_key(spec), spec, fake_result(), 1.0)
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO runs (key, spec, status, result, seconds, created) VALUES (?, ?, ?, ?, ?, ?)",
                           ("other", json.dumps(spec), "finished", json.dumps(fake_result()), 1.0, 0.0))
    out = subprocess.run(ATTNSCALE + ["sweep", "--summary", "--db", str(db)], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    assert "1 runs in" in out.stdout and "(1 rows without a digest left out" in out.stdout


LAB_SCRIPT = """
import sys, torch
from attnscale.lab import training as T
from attnscale.runs import RunStore
torch.set_num_threads(1)
config = T.Config(d_heads=(8,), seeds=2, d_model=16, log_every=5, lr_widen=0, recall_steps=30, recall_batch=16,
                  recall_lrs=(3e-3, 1e-2), lm_steps=10, lm_batch=8, lm_context=16, lm_lrs=(3e-3,), deep_layers=2,
                  deep_d_head=8, deep_steps=10, t5_recall_d_head=16, t5_lm_d_head=16)
T.run(config, store=RunStore(sys.argv[1]), workers=2, batch_runs=4)
"""


@pytest.mark.slow
def test_training_lab_killed_with_kill_9_keeps_finished_groups_and_resumes(tmp_path):
    db = tmp_path / "runs.sqlite"
    command = [sys.executable, "-c", LAB_SCRIPT, str(db)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert wait_for(lambda: row_count(db) >= 4), proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with sqlite3.connect(db) as con:
        before = dict(con.execute("SELECT key, created FROM runs").fetchall())
    check_rows(db, set(before))
    rerun = subprocess.run(command, capture_output=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    with sqlite3.connect(db) as con:
        after = dict(con.execute("SELECT key, created FROM runs").fetchall())
    check_rows(db, set(after))
    assert len(after) > len(before)
    assert {k: after[k] for k in before} == before  # stored groups were reused, not retrained


def test_progress_counts_steps_and_never_goes_back():
    specs = [tiny(rule=r, seed=s, steps=30) for r in ("sqrt", "none") for s in range(2)] + [tiny(d_head=16, steps=30)]
    seen = []
    runs.execute(specs, workers=1, batch_runs=2, progress=lambda done, total, msg: seen.append((done, total)))
    counts = [done for done, _ in seen]
    assert counts == sorted(counts) and counts[-1] == len(specs) == seen[-1][1]
    assert any(0 < c < len(specs) and c != int(c) for c in counts)  # steps inside a group are counted as they go


@pytest.mark.slow
def test_no_ray_process_outlives_a_sweep_killed_with_kill_9(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'attnscale[ray]'")
    from attnscale.reaper import descendants

    command = ATTNSCALE + ["sweep", "--executor", "ray", "--task", "recall", "--rules", "sqrt,none", "--d-heads", "8",
                           "--lrs", "1e-3", "--steps", "20000", "--d-model", "16", "--workers", "2",
                           "--db", "runs.sqlite"]
    short = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    proc = subprocess.Popen(command, cwd=short, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def ray_workers():
        return [pid for pid in descendants(proc.pid)
                if b"ray_run_group" in Path(f"/proc/{pid}/cmdline").read_bytes()] if alive(proc.pid) else []

    assert wait_for(lambda: ray_workers(), timeout=180), proc.stderr.read().decode()[-2000:]
    time.sleep(2)  # let Ray's agents start too
    spawned = [pid for pid in descendants(proc.pid) if b"attnscale.reaper" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    try:
        assert wait_for(lambda: not any(alive(pid) for pid in spawned), timeout=10), \
            [Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in spawned if alive(pid)]
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_plan_groups_shares_work_evenly_caps_by_shape_and_puts_the_costliest_first():
    recall = dict(task="recall", batch_size=64, n_pairs=3, n_queries=3, n_heads=2, d_model=32, steps=50)
    # QK-norm at d_head 256: projected heads (its activations allow one run a group, and each costs its width)
    specs = [T.RunSpec(d_head=d, seed=s, rule="sqrt" if d == 16 else "qknorm", **recall) for d in (16, 256)
             for s in range(6)]
    todo = {T.run_key(s): dataclasses.asdict(s) for s in specs}
    groups = runs.plan_groups(todo, batch_runs=24, workers=2)
    shapes = [todo[g[0]]["d_head"] for g in groups]
    assert sorted(len(g) for g in groups if todo[g[0]]["d_head"] == 16) == [6]  # under its cache cap (8) and 12/2
    assert [len(g) for g in groups if todo[g[0]]["d_head"] == 256] == [1] * 6  # its activations allow one run
    assert shapes[:6] == [256] * 6  # by width: one run of d_head 256 (32 + 2 x 256) outweighs six of 16 (32 + 2 x 16)
    assert sorted(k for g in groups for k in g) == sorted(todo)
    # sqrt at d_head 256: computed through the heads' bilinear forms, at d_model's width (cap 6, cost 32 + 2 x 32)
    wide = {T.run_key(s): dataclasses.asdict(s) for s in (dataclasses.replace(s, rule="sqrt") for s in specs)}
    planned = runs.plan_groups(wide, batch_runs=24, workers=2)
    assert [(wide[g[0]]["d_head"], len(g)) for g in planned] == [(256, 6), (16, 6)]
    four = runs.plan_groups(todo, batch_runs=24, workers=4)
    assert [len(g) for g in four if todo[g[0]]["d_head"] == 16] == [3, 3]  # at most 12 runs / 4 workers per group
    with pytest.raises(ValueError, match="batch_runs"):
        runs.plan_groups(todo, batch_runs=0, workers=2)


def test_a_pool_whose_worker_never_leaves_is_still_shut_down():
    # a worker that never takes its stop signal (here: a task that sleeps for an hour; in the
    # wild: a peer killed while holding the task queue's lock) is terminated after the grace
    context = multiprocessing.get_context("spawn")
    outcome = {}

    def use_pool():
        with runs.worker_pool(context, 1, 1, context.Queue(), grace=0.5) as pool:
            sleeping = pool.submit(time.sleep, 3600)
            while not sleeping.running():
                time.sleep(0.05)
            outcome["workers"] = list(pool._processes.values())

    thread = threading.Thread(target=use_pool, daemon=True)
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "the pool's shutdown waited for a worker that never leaves"
    assert outcome["workers"] and not any(w.is_alive() for w in outcome["workers"])


def test_a_kept_pool_serves_several_calls_with_the_same_workers_and_numbers():
    """A lab's rounds share one KeptPool: its workers start once, the results equal a fresh pool's,
    and leaving the pool stops every worker."""
    first, second = [tiny(seed=s) for s in range(2)], [tiny(seed=s) for s in range(2, 4)]
    with runs.KeptPool(2, threads=1) as kept:
        got = runs.execute(first, None, workers=2, pool=kept)
        workers = {w.pid for w in kept.pool._processes.values()}
        got |= runs.execute(second, None, workers=2, pool=kept)
        assert {w.pid for w in kept.pool._processes.values()} == workers
        processes = list(kept.pool._processes.values())
    assert not any(p.is_alive() for p in processes) and kept.pool is None
    here = runs.execute(first + second, None, workers=1, batch_runs=1, threads=1)  # the same one-run path, in process
    assert {k: v["final_val_loss"] for k, v in got.items()} == {k: v["final_val_loss"] for k, v in here.items()}
