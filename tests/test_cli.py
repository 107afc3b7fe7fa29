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


@pytest.mark.parametrize("command, flag", [("report", "--fresh"), ("answer", "--json"), ("audit", "--json")])
def test_a_flag_shows_no_value_in_help(command, flag):
    """A flag takes no value (`--json true` is refused), so the help must not show `--json <bool>`."""
    done = run_cli(command, "--help")
    assert done.returncode == 0 and flag in done.stdout and "<bool>" not in done.stdout
    if command != "audit":  # audit takes family names, so a stray word would be one
        refused = run_cli(command, flag, "true")
        assert refused.returncode == 2 and "(true)" in refused.stderr


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

    def broken(ev):
        return str(max([]))

    monkeypatch.setattr(answer, "FULL_SENTENCES", (broken, *answer.FULL_SENTENCES[1:]))
    with pytest.raises(SystemExit) as stop:
        cli.main(["answer", "--report", str(report)])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    assert err.startswith("attnscale: internal error (a bug in attnscale, not your input): ValueError: max()")
    assert "Traceback" in err and "broken" in err

    def refuses(ev):
        raise UserError("the report's C02 number 'max_d_k' is 'x', not what attnscale writes")

    monkeypatch.setattr(answer, "FULL_SENTENCES", (refuses, *answer.FULL_SENTENCES[1:]))
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


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}])
def test_a_terminal_that_cannot_show_a_character_gets_a_replacement_not_a_codec_error(env, tmp_path):
    """The Chinese answer and a table on a latin-1 or ASCII terminal: exit 0, every line printed,
    characters the terminal cannot show replaced."""
    import json
    import os

    from attnscale import claims

    (tmp_path / "report.json").write_text(json.dumps({"preset": "quick", "seed": 0, "claims": claims.evaluate({})}))
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LC_ALL", "LANG", "PYTHONUTF8")}
    done = subprocess.run([sys.executable, "-m", "attnscale", "answer", "--lang", "zh", "--report", str(tmp_path)],
                          capture_output=True, timeout=120, env={**base, **env})
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("latin-1")
    assert "?" in out and "C02" in out and "attnscale report" in out  # the pending sentences, degraded
    assert b"UnicodeEncodeError" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "attnscale", "explain", "C06"], capture_output=True, timeout=120,
                          env={**base, **env})
    # the learner's view quotes the original sentence (Chinese) and "±": replaced, not a codec error
    assert done.returncode == 0 and b"Verdict: " in done.stdout and b"UnicodeEncodeError" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "attnscale", "explain", "C06", "--verbose"], capture_output=True,
                          timeout=120, env={**base, **env})
    assert done.returncode == 0 and b"judge_c06" in done.stdout and b"UnicodeEncodeError" not in done.stderr


def test_help_answers_without_importing_torch_and_takes_h():
    import subprocess
    import sys

    check = "import sys, attnscale.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", check]).returncode == 0
    done = subprocess.run([sys.executable, "-m", "attnscale", "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "Usage: attnscale" in done.stdout and "--install-completion" in done.stdout
    done = subprocess.run([sys.executable, "-m", "attnscale", "report", "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "--preset" in done.stdout


def test_the_package_attention_is_the_function_after_its_module_is_imported():
    import attnscale
    import attnscale.attention  # noqa: F401 - the module, imported by name
    from attnscale import attention

    assert callable(attention) and attnscale.attention is attention and attention.__name__ == "attention"


@pytest.mark.parametrize("args, asks", [
    (["--help"], True), (["-h"], True), (["--version"], True), (["report", "--help"], True),
    (["report", "--fresh", "--help"], True),       # after a flag: help
    (["report", "--out", "--help"], False),         # the value of --out: the report runs into "--help"
    (["report", "--out=x", "--help"], True),
    (["diagnose", "--text", "-h"], False), (["train", "--checkpoint=--help"], False),
    (["explain", "C01", "--help"], True), (["report", "--", "--help"], False), (["report"], False),
])
def test_help_is_asked_for_only_in_the_place_of_an_option(args, asks):
    from attnscale.cli import asks_for_help

    assert asks_for_help(args) is asks
