"""The history cache as a supply chain: nothing from a download runs before its hash is checked, no bytecode
found in the cache runs in place of the verified source, a full disk is not called tampering, runs sharing a
cache wait for each other, a probe worker never outlives its run, and a failed probe is never stored for reuse."""

from __future__ import annotations

import errno
import hashlib
import importlib._bootstrap_external as bootstrap
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from attnscale.history import cache
from attnscale.history.cache import check, fetch, unpack
from attnscale.history.probe import probe_release, run_worker
from attnscale.history.releases import Release
from test_history import bert_source, fake_bert_wheel, write_sdist

INV_D = "attention_scores = attention_scores / self.attention_head_size"


def sdist_release(folder: Path, setup_py: str) -> tuple[Release, Path]:
    """tensor2tensor-1.0.tar.gz holding ``setup_py``, and the Release pinned to its bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = write_sdist(folder / "tensor2tensor-1.0.tar.gz", "tensor2tensor-1.0", {
        "setup.py": setup_py, "tensor2tensor/__init__.py": "", "PKG-INFO": "Metadata-Version: 1.0\nName: tensor2tensor\n"
                                                                         "Version: 1.0\n"})
    data = archive.read_bytes()
    return Release("tensor2tensor", "1.0", archive.name, hashlib.sha256(data).hexdigest(), "sdist", "2017-06",
                   "tensorflow", len(data)), archive


def test_a_download_with_another_hash_is_refused_before_any_of_its_code_runs(tmp_path, monkeypatch):
    """A local index serves an sdist whose setup.py writes a file; the release pins another sdist's hash. pip, in
    hash-checking mode, refuses the file before preparing it: its setup.py never runs, nothing is kept."""
    ran = tmp_path / "setup-py-ran"
    release, _ = sdist_release(tmp_path / "published", "from setuptools import setup\nsetup(name='tensor2tensor', "
                                                       "version='1.0')\n")
    sdist_release(tmp_path / "index", f"open({str(ran)!r}, 'w').write('ran')\nfrom setuptools import setup\n"
                                      "setup(name='tensor2tensor', version='1.0')\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # pip's spelling of --no-build-isolation: setup.py could run

    refused, = fetch(tmp_path / "cache", [release])

    assert not ran.exists()
    assert refused.state == "tampered" and "not kept" in refused.reason and "pip refused" in refused.reason
    assert not (tmp_path / "cache" / release.filename).exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache.LOCK_NAME]  # no download folder left


def test_pip_is_asked_for_the_pinned_hash(tmp_path):
    release, _ = sdist_release(tmp_path, "")
    requirement = cache.write_requirement(release, tmp_path / "r.txt")
    command = cache.pip_download_command(["pip"], release, tmp_path / "d", requirement)
    assert "--require-hashes" in command and command[command.index("-r") + 1] == str(requirement)
    assert requirement.read_text() == f"tensor2tensor==1.0 --hash=sha256:{release.sha256}\n"


def inv_d_bytecode(source_file: Path) -> bytes:
    """A .pyc of the 1/d_k variant of ``source_file`` that claims to be the bytecode of ``source_file`` itself
    (its header carries that file's mtime and size, so a plain import would use it)."""
    altered = source_file.read_text().replace("attention_scores = attention_scores / math.sqrt("
                                              "self.attention_head_size)", INV_D)
    code = compile(altered, str(source_file), "exec")
    stat = source_file.stat()
    return bytes(bootstrap._code_to_timestamp_pyc(code, int(stat.st_mtime), stat.st_size))


def test_bytecode_planted_in_the_unpacked_copy_never_runs(tmp_path):
    """A 1/d_k .pyc in the copy's __pycache__: the copy no longer matches what was unpacked (it is unpacked again,
    the .pyc gone), and the worker reads bytecode only from its own scratch folder (a copy given to it directly
    still measures its source's 1/sqrt(d_k))."""
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    root = unpack(tmp_path / "cache", release).root
    modeling = root / "pytorch_pretrained_bert" / "modeling.py"
    planted = root / "pytorch_pretrained_bert" / "__pycache__" / f"modeling.{sys.implementation.cache_tag}.pyc"
    planted.parent.mkdir()
    planted.write_bytes(inv_d_bytecode(modeling))

    spec = {"root": str(root), "module": "pytorch_pretrained_bert.modeling", "class": "BertSelfAttention",
            "config_class": "BertConfig", "head_dims": [16, 64], "num_heads": 2}
    answer, = run_worker([spec], timeout_s=120)
    factors = {d: samples[0]["per_head"][0] for d, samples in answer["measurements"].items()}
    assert factors == {"16": pytest.approx(16 ** -0.5), "64": pytest.approx(64 ** -0.5)}, answer

    again = unpack(tmp_path / "cache", release).root
    assert not (again / "pytorch_pretrained_bert" / "__pycache__").exists()
    assert probe_release(tmp_path / "cache", release).rule == "1/sqrt(d_k)"


def test_a_full_disk_while_unpacking_is_not_called_tampering(tmp_path, monkeypatch):
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})

    def no_space(*_):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache, "_extract", no_space)
    unpacked = unpack(tmp_path / "cache", release)
    assert unpacked.root is None and unpacked.status.state == "unwritable"
    assert "No space left on device" in unpacked.status.reason
    assert "ATTNSCALE_HISTORY_CACHE" in unpacked.status.advice and "fetch" not in unpacked.status.advice
    assert check(tmp_path / "cache", release).usable  # the archive itself is fine
    probed = probe_release(tmp_path / "cache", release)
    assert probed.state == "unavailable" and "fetch" not in probed.reason and "make room" in probed.reason


def test_runs_sharing_a_cache_wait_for_each_other(tmp_path):
    """Three processes unpacking the same release at once (the lock held by the first): each ends with the same
    intact copy, none with an error."""
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    script = ("import sys, json; from attnscale.history.cache import unpack; from attnscale.history.releases import "
              "Release; r = Release(**json.loads(sys.argv[2])); u = unpack(sys.argv[1], r); "
              "print(u.status.state, u.root)")
    fields = json.dumps({k: getattr(release, k) for k in ("package", "version", "filename", "sha256", "kind", "date",
                                                          "language", "size")})
    with cache.cache_lock(tmp_path / "cache"):
        runs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cache"), fields],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
        time.sleep(1.0)
        assert all(run.poll() is None for run in runs)  # waiting for the lock, not failing
    outputs = [run.communicate(timeout=60) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    assert len({out for out, _ in outputs}) == 1 and outputs[0][0].startswith("present ")


def test_a_probe_worker_leaves_when_its_run_is_killed(tmp_path):
    """A run probing a release that hangs is killed with kill -9: its worker (re-parented) exits within seconds
    instead of running on."""
    release = fake_bert_wheel(tmp_path / "cache", "0.1.8", {"pytorch_pretrained_bert/modeling.py":
                                                             "import time\ntime.sleep(600)\n" + bert_source()})
    pid_file = tmp_path / "worker.pid"
    script = ("import sys, json, subprocess\n"
              "from attnscale.history import probe\n"
              "real = subprocess.Popen\n"
              "def spy(*a, **k):\n"
              "    p = real(*a, **k); open(sys.argv[2], 'w').write(str(p.pid)); return p\n"
              "probe.subprocess.Popen = spy\n"
              "from attnscale.history.releases import Release\n"
              "probe.probe_release(sys.argv[1], Release(**json.loads(sys.argv[3])), timeout_s=600)\n")
    fields = json.dumps({k: getattr(release, k) for k in ("package", "version", "filename", "sha256", "kind", "date",
                                                          "language", "size")})
    run = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cache"), str(pid_file), fields])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    time.sleep(2.0)  # the worker is inside the release's sleep
    assert alive(worker)
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, already dead, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_history_result_with_a_failed_probe_is_used_once_and_not_stored(tmp_path, monkeypatch):
    """The report keeps a lab's result only if it would be reproduced: a failed probe (here a release whose
    import fails) is reported, not stored; a healthy result is stored."""
    from attnscale import lab
    from attnscale.lab.history import unrepeatable
    from attnscale.report.build import run_labs
    from attnscale.store import Store

    monkeypatch.setenv("ATTNSCALE_HISTORY_CACHE", str(tmp_path / "cache"))
    broken = fake_bert_wheel(tmp_path / "cache", "0.0.6", {"pytorch_pretrained_bert/modeling.py":
                                                            "import no_such_module_here\n" + bert_source()})
    healthy = fake_bert_wheel(tmp_path / "cache", "0.0.4", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    store = Store(tmp_path / "results.sqlite")
    monkeypatch.setattr("attnscale.history.RELEASES", (broken,))
    messages = []
    failed = run_labs("quick", 0, "cpu", store, ("history",),
                      progress=lambda name, fraction, message: messages.append(message))["history"]["result"]
    assert "pytorch-pretrained-bert 0.0.6" in unrepeatable(failed) and lab.REGISTRY["history"].unrepeatable(failed)
    assert any("not stored: 1 release(s) could not be probed" in m for m in messages), messages
    assert store.keys() == []
    monkeypatch.setattr("attnscale.history.RELEASES", (healthy,))
    stored = run_labs("quick", 0, "cpu", store, ("history",))["history"]["result"]
    assert unrepeatable(stored) == "" and len(store.keys()) == 1


READ_ONLY_CACHE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from cli_batch import drop_file_capabilities
try:
    drop_file_capabilities()
except (OSError, AttributeError):
    print("cannot drop"); raise SystemExit(0)
from attnscale.history.cache import check_can_unpack, unpack
from attnscale.history.releases import Release
release = Release(**json.loads(sys.argv[3]))
try:
    check_can_unpack(sys.argv[2], [release])
    print("allowed", unpack(sys.argv[2], release).status.state)
except ValueError as error:
    print("refused:", error)
"""


def test_a_read_only_cache_is_refused_before_any_work_unless_its_copies_are_unpacked(tmp_path):
    """A cache attnscale may not write (the file permissions apply to root too, its file capabilities dropped): with
    a release not unpacked yet, refused up front naming the variable; with every copy unpacked, read as it is."""
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    fields = json.dumps({k: getattr(release, k) for k in ("package", "version", "filename", "sha256", "kind", "date",
                                                          "language", "size")})

    def as_unprivileged() -> str:
        run = subprocess.run([sys.executable, "-c", READ_ONLY_CACHE, str(Path(__file__).parent), str(tmp_path / "cache"),
                              fields], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    (tmp_path / "cache").chmod(0o555)
    try:
        first = as_unprivileged()
        if first == "cannot drop":
            pytest.skip("file permissions cannot be made to apply to this process")
        assert first.startswith("refused: the history cache") and "1 of its releases are not unpacked" in first
        assert "ATTNSCALE_HISTORY_CACHE" in first
        (tmp_path / "cache").chmod(0o755)
        assert unpack(tmp_path / "cache", release).root is not None
        for folder in (tmp_path / "cache", tmp_path / "cache" / cache.UNPACKED_FOLDER):
            folder.chmod(0o555)
        assert as_unprivileged() == "allowed present"
    finally:
        for folder in (tmp_path / "cache", tmp_path / "cache" / cache.UNPACKED_FOLDER):
            if folder.exists():
                folder.chmod(0o755)


def test_the_cache_lock_is_opened_as_an_output_folders_is(tmp_path):
    """The same opening as an output folder's lock (paths.open_lock_file): a symbolic link where the lock file goes
    is refused in one line, never read as every release being tampered; a folder there too."""
    release = fake_bert_wheel(tmp_path / "cache", "0.0.1", {"pytorch_pretrained_bert/modeling.py": bert_source()})
    lock = tmp_path / "cache" / cache.LOCK_NAME
    lock.symlink_to(tmp_path / "elsewhere")
    for attempt in (lambda: unpack(tmp_path / "cache", release), lambda: cache.check_can_unpack(tmp_path / "cache")):
        with pytest.raises(ValueError, match="is a symbolic link"):
            attempt()
    assert not (tmp_path / "elsewhere").exists()
    lock.unlink()
    lock.mkdir()
    with pytest.raises(ValueError, match="is a folder, not a file"):
        unpack(tmp_path / "cache", release)
