"""The command line, the lab and the report: ``attnscale audit`` (commands/audit.py), its targets and
workers, and the audit lab with its section of the report (lab/audit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnscale.audit import pipeline
from attnscale.lab import audit as lab

from audit_helpers import FACTOR_REL, run_cli


@pytest.mark.parametrize("args, message", [
    (["audit", "no_such_family"], "unknown model family 'no_such_family'"),
    (["audit", "gpt2", "--backends", "eager,warp"], "unknown attention backend 'warp'"),
    (["audit", "gpt2", "--callable", "no_colon"], "is not module:function"),
    (["audit", "gpt2", "--callable", "no_such_module_xyz:attn"], "cannot import"),
    (["audit", "./missing-folder"], "does not exist"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 2 and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_cli_out_must_be_a_folder(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    code, _, err = run_cli(["audit", "gpt2", "--out", str(target)], capsys)
    assert code == 2 and "is a file" in err


def test_a_second_audit_writing_the_same_folder_is_refused_while_the_first_holds_it(tmp_path, capsys):
    from attnscale.paths import FolderLock

    with FolderLock(tmp_path, "--out"):
        code, out, err = run_cli(["audit", "gpt2", "--out", str(tmp_path)], capsys)
    assert code == 2 and "another attnscale run is writing --out" in err and not (tmp_path / "audit.json").exists()
    code, _, _ = run_cli(["audit", "gpt2", "--out", str(tmp_path)], capsys)  # released with the block
    assert code == 0 and (tmp_path / "audit.json").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "audit.json"]  # no lock file left


def test_cli_json_table_and_out(tmp_path, capsys):
    code, out, _ = run_cli(["audit", "gpt2,t5", "--backends", "eager,sdpa", "--json", "--out", str(tmp_path)], capsys)
    assert code == 0
    payload = json.loads(out)
    assert [row["family"] for row in payload["rows"]] == ["gpt2", "t5"]
    assert payload["rows"][1]["eager"] == "1" and payload["counts"]["ok"] == 2
    assert json.loads((tmp_path / "audit.json").read_text())["rows"] == payload["rows"]
    code, out, _ = run_cli(["audit", "gemma2", "--backends", "eager,sdpa"], capsys)
    assert code == 0 and "soft cap 50" in out and "refused" in out and "1 families in" in out


def test_cli_folder_without_weights_is_random_init(tmp_path, capsys):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                intermediate_size=128, vocab_size=100).save_pretrained(tmp_path)
    code, out, _ = run_cli(["audit", str(tmp_path), "--backends", "eager", "--json"], capsys)
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["family"].endswith("(llama, random init)") and row["eager"] == "0.25" and row["verdict"] == "ok"


def test_cli_callable(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_port.py").write_text(
        "import torch\n\ndef attention(q, k, v, mask=None):\n"
        "    return torch.softmax(q @ k.transpose(-1, -2) / 16.0, dim=-1) @ v\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["audit", "gemma2", "--backends", "eager", "--callable", "my_port:attention", "--json"], capsys)
    assert code == 1  # the port's mismatch fails the check
    port = json.loads(out)["callable"]
    assert port["function"]["factor"] == pytest.approx(1 / 16, rel=FACTOR_REL) and port["verdict"] == "mismatch"


def test_cli_callable_alone_tests_the_function_at_head_dim(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_port_alone.py").write_text(
        "import torch\n\ndef attention(q, k, v, mask=None):\n"
        "    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["audit", "--callable", "my_port_alone:attention", "--head-dim", "16", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    assert "rows" not in report  # no family audited
    port = report["callable"]
    assert port["d_k"] == 16 and port["function"]["factor"] == pytest.approx(0.25, rel=FACTOR_REL)
    assert port["verdict"] == "ok"
    code, out, _ = run_cli(["audit", "--callable", "my_port_alone:attention", "--head-dim", "16"], capsys)
    assert code == 0 and "callable my_port_alone:attention: factor 0.25" in out


def test_lab_run_tables_figures(tmp_path):
    config = lab.Config(families=("gpt2", "gpt_neo"), backends=("eager", "sdpa"))
    result = lab.run(config)
    assert json.loads(json.dumps(result)) == result
    assert lab.judge(result) == {}
    found = lab.tables(result)
    mismatches = next(rows for title, rows in found.items() if title.startswith("mismatches"))
    assert [row["family"] for row in mismatches] == ["gpt_neo", "gpt_neo", "gpt_neo", "gpt_neo"]
    assert lab.run(config) == result  # same seed, same numbers (no timings in the result)
    drawn = lab.figures(result, tmp_path)
    assert (tmp_path / drawn["audit"][0]).read_bytes()[:4] == b"\x89PNG"


def test_report_renders_a_lab_without_claims(tmp_path, monkeypatch):
    from attnscale.report import build_report

    monkeypatch.setitem(lab.PRESETS, "quick", lab.Config(families=("gpt_neo",), backends=("eager",)))
    report = build_report(out=tmp_path, labs=("audit",))
    assert all(claim["verdict"] == "pending" for claim in report["claims"])
    assert any(title.startswith("mismatches") for title in report["tables"]["audit"])
    markdown, page = (tmp_path / "report.md").read_text(), (tmp_path / "index.html").read_text()
    assert "audit: mismatches and backend disagreements" in markdown  # named there; the table is in the JSON and page
    assert "audit: mismatches and backend disagreements" in page and "gpt_neo" in page
    assert "audit_factors.png" in (tmp_path / "index.html").read_text() or "data:image/png" in \
        (tmp_path / "index.html").read_text()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_killing_the_audit_leaves_no_worker(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "HF_HUB_OFFLINE": "1"}
    parent = subprocess.Popen([sys.executable, "-m", "attnscale", "audit", "--workers", "2", "--backends", "eager"],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, workers = time.time() + 180, []
    while time.time() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = children_of(parent.pid)
    assert len(workers) >= 2, "the audit started no worker processes"
    time.sleep(3)  # the workers are auditing families now
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    time.sleep(10)
    assert [pid for pid in workers if running(pid)] == []


def test_a_list_of_families_too_long_for_a_path_is_read_as_families():
    names = ",".join(["llama"] * 60)
    assert pipeline.plan(names) == [("family", "llama")]
