"""`attnscale explain`: generated from the registry and the code, so it stays current: every
claim's judge is found at the file and line where it is defined, every threshold it names is
the constant the code compares with, and the numbers are the lab's declared ones."""

import importlib
import json
from pathlib import Path

import pytest

from attnscale import claims, cli, explain
from attnscale.errors import UserError

PACKAGE = Path(explain.__file__).resolve().parent


@pytest.mark.parametrize("claim_id", list(claims.BY_ID))
def test_every_claim_points_at_its_judges_thresholds_and_numbers(claim_id):
    found = explain.explain(claim_id)
    assert [entry["lab"] for entry in found["labs"]] == list(claims.BY_ID[claim_id].labs)
    for entry in found["labs"]:
        path, line = entry["judge"]["where"].rsplit(":", 1)
        source = (PACKAGE / path).read_text().splitlines()
        assert source[int(line) - 1].startswith(f"def judge_{claim_id.lower()}(")
        verdicts = importlib.import_module(f"attnscale.lab.{entry['lab']}.verdicts")
        assert entry["numbers"] == list(verdicts.NUMBER_KEYS[claim_id])
        experiment = importlib.import_module(f"attnscale.lab.{entry['lab']}.experiment")
        for name, value in entry["thresholds"].items():
            assert getattr(verdicts, name, getattr(experiment, name, None)) == value, name
        for helper in entry["helpers"]:
            path, line = helper["where"].rsplit(":", 1)
            assert (PACKAGE / path).read_text().splitlines()[int(line) - 1].startswith(f"def {helper['name']}(")
        assert entry["reproduce"] == f"attnscale {entry['lab']} --preset quick --seed 0"


def test_the_stall_claims_name_the_rates_that_decide_them():
    training = next(e for e in explain.explain("c06")["labs"] if e["lab"] == "training")
    assert {"STALL_BELOW", "DECIDED_RATE", "SOLVED_ACC"} <= set(training["thresholds"])
    assert {"stall_state", "stall_part", "stall_rate", "classify"} <= {h["name"] for h in training["helpers"]}
    assert {"no_scaling", "short_no_scaling"} <= set(explain.explain("C06")["answer_sentences"])


def test_cli_explain_with_a_report_and_bad_ids(tmp_path, capsys):
    c02 = {"id": "C02", "verdict": "supported", "verdict_line": "supported", "numbers": {},
           "figures": ["figures/variance_c02.png"]}
    rest = [{"id": c.id, "verdict": "pending", "numbers": {}} for c in claims.CLAIMS if c.id != "C02"]
    (tmp_path / "report.json").write_text(json.dumps({"claims": [c02, *rest]}))
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "C02", "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "Verdict: supported" in out and "figures/variance_c02.png" in out
    assert "judge_c02" not in out and "attnscale explain C02 --verbose" in out  # the code is one flag away
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "C02", "--report", str(tmp_path), "--verbose"])
    out = capsys.readouterr().out
    assert "verdict in the report: supported" in out
    assert "judge: judge_c02 at attnscale/lab/variance/verdicts.py:" in out  # relative to the package
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "C19"])
    assert done.value.code == 2 and capsys.readouterr().err.startswith("attnscale: error: unknown claim 'C19'")
    with pytest.raises(UserError):
        explain.explain("nonsense")


def test_explain_finds_the_report_folder_and_shows_evidence_values_and_paths_that_exist(quick_report, tmp_path,
                                                                                      monkeypatch, capsys):
    import re

    out_dir, report = quick_report
    (tmp_path / "attnscale-report").symlink_to(out_dir)
    monkeypatch.chdir(tmp_path)  # not the source tree: paths are printed where they are
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "C05"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    c05 = next(c for c in report["claims"] if c["id"] == "C05")
    assert f"Verdict: {c05['verdict_line']}" in out and "from the report in attnscale-report" in out
    for part in c05["parts"]:  # every part with its state and what was measured
        assert f"  - {part['text']} ({part['role']}, read by the {part['lab']} lab): {part['state']}" in out
        assert f"      measured: {part['measured']}" in out
    for lab, sentences in explain.evidence_blocks(c05["evidence"]):  # the evidence, sentence by sentence
        assert all(f"    {sentence}" in out for sentence in sentences) and sentences
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "C05", "--verbose"])
    out = capsys.readouterr().out
    name, value = next(iter(explain.number_values(["min_normalized_entropy"], c05["numbers"], "saturation").items()))
    assert f"{name} = {value:.4g}" in out
    paths = re.findall(r"(?:\bat|experiment:) (\S+\.py)", out) + re.findall(r"\((\S+\.py):\d+\)", out)
    assert paths and all((PACKAGE.parent / path).is_file() for path in paths), paths
    with pytest.raises(SystemExit) as done:
        cli.main(["explain", "L2", "--json"])
    found = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and found["id"] == "L2" and found["labs"][0]["values"]
    assert found["verdict"] == next(s for s in report["statements"] if s["id"] == "L2")["verdict_line"]
    with pytest.raises(SystemExit) as done:
        cli.main(["answer", "--json", "--lang", "zh"])
    composed = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and composed["lang"] == "zh" and composed["short"]


def test_a_repeated_quote_is_quoted_once_with_its_count():
    text = "a: `x = y / 2`; b: `x = y / 2`; c: `x = y / 2`; d: `z`."
    assert explain.quote_once(text) == "a: `x = y / 2` (the same line in all 3); b: the same line; c: the same line; d: `z`."


def test_explain_before_any_run_reads_the_shipped_reference(tmp_path):
    import subprocess
    import sys

    from attnscale import reference

    done = subprocess.run([sys.executable, "-m", "attnscale", "explain", "C17"], cwd=tmp_path, capture_output=True,
                          text=True)
    c17 = next(c for c in reference.load()["claims"] if c["id"] == "C17")
    assert done.returncode == 0 and f"Verdict: {c17['verdict_line']}" in done.stdout
    assert "from the reference report shipped with attnscale" in done.stdout and "Figures" not in done.stdout
