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


def test_a_bug_is_an_internal_error_not_bad_input(tmp_path, monkeypatch, capsys):
    """A ValueError that no input check raised (here a sentence builder calling max([]) on purpose)
    is a bug: exit code 1, a line that says so, and the traceback; a UserError is bad input: exit 2."""
    import json

    from attnscale import answer, cli, claims
    from attnscale.errors import UserError

    report = tmp_path / "report.json"
    report.write_text(json.dumps({"preset": "quick", "seed": 0, "claims": claims.evaluate({})}))

    def broken(ev, lang):
        return str(max([]))

    monkeypatch.setattr(answer, "variance", broken)
    with pytest.raises(SystemExit) as stop:
        cli.main(["answer", "--report", str(report)])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    assert err.startswith("attnscale: internal error (a bug in attnscale, not your input): ValueError: max()")
    assert "Traceback" in err and "broken" in err

    def refuses(ev, lang):
        raise UserError("the report's C02 number 'max_d_k' is 'x', not what attnscale writes")

    monkeypatch.setattr(answer, "variance", refuses)
    with pytest.raises(SystemExit) as stop:
        cli.main(["answer", "--report", str(report)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.splitlines() == [
        "attnscale: error: the report's C02 number 'max_d_k' is 'x', not what attnscale writes"]


def test_user_errors_are_value_errors_and_input_checks_raise_them():
    from attnscale import checks, scaling
    from attnscale.errors import UserError

    assert issubclass(UserError, ValueError)
    for call in (lambda: scaling.parse("bogus"), lambda: checks.positive_int("n", 0), lambda: checks.seed(-1)):
        with pytest.raises(UserError):
            call()
