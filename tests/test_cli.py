import subprocess
import sys

import pytest

import attnscale


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "attnscale", *args], capture_output=True, text=True, timeout=300)


def test_version_and_help():
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"attnscale {attnscale.__version__}"
    done = run_cli("--help")
    assert done.returncode == 0 and "report" in done.stdout


@pytest.mark.parametrize("args, needle", [
    (["--bogus"], "--bogus"),
    (["no-such-command"], "no-such-command"),
    (["report", "--preset", "huge"], "'huge'"),
    (["report", "--device", "tpu"], "'tpu'"),
    (["report", "--labs", "astrology"], "'astrology'"),
    (["report", "--seed", "abc"], "--seed"),
])
def test_bad_input_prints_one_line_and_exits_2(args, needle, tmp_path):
    done = run_cli(*args, *(["--out", str(tmp_path)] if args[0] == "report" else []))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscale: error:"), done.stderr
    assert needle in lines[0]
    assert "Traceback" not in done.stderr
