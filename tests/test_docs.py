"""The README and docs/ say what the code does: the README's verdicts are a fresh report's, every Python
snippet runs, every command named in them exists, and the cheap ones run to exit 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnscale.report import readme

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
SYNOPSIS = ("[", "|", "...", "<", "DIR", "FILE", "MODEL", "FAMILIES", "PATH", "CLAIM", "TARGET")
# run as written (seconds each); every other command is checked to exist with --help
CHEAP = ("--version", "explain", "explore", "answer", "history --status", "audit gemma3_text", "numerics --from-file",
         "diagnose")


def commands() -> list[tuple[str, str]]:
    """(page, command) for every concrete attnscale command in a code block or inline code of the docs."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        lines = [line.split("  #")[0].strip() for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
                 for line in block.splitlines()]
        lines += [span.strip() for span in re.findall(r"`([^`\n]+)`", text)]
        for line in lines:
            if re.match(r"(\.venv/bin/)?attnscale( |$)", line) and not any(mark in line for mark in SYNOPSIS):
                found.append((page.name, re.sub(r"^\.venv/bin/", "", line)))
    return sorted(set(found))


def snippets() -> list[tuple[str, str]]:
    return [(page.name, block) for page in PAGES
            for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    first = text.split("```", 2)[1].strip().splitlines()
    assert first[1:] == ["bash scripts/setup.sh && .venv/bin/attnscale report --preset quick    # set up, run every lab, write the report",
                         "bash scripts/setup.sh --dev && .venv/bin/python -m pytest -q          # set up (plus test tools, headless Chromium), run the tests"]
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)", text):
        assert (ROOT / link).is_file(), link


def test_every_docs_link_points_at_a_page(tmp_path):
    for page in PAGES:
        for link in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]+)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).is_file(), (page.name, link)


def test_the_readme_verdicts_are_a_fresh_reports(quick_report):
    _, report = quick_report
    assert readme.block_of((ROOT / "README.md").read_text(encoding="utf-8")) == readme.verdict_table(report)


def test_the_readme_table_tool_writes_and_refuses(quick_report, tmp_path, capsys):
    out, report = quick_report
    (tmp_path / "README.md").write_text(f"top\n{readme.START}\nSTALE-TABLE\n{readme.END}\nbottom\n", encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert readme.main([str(out), "--write"]) == 0
        assert readme.main([str(tmp_path / "missing")]) == 2
    finally:
        os.chdir(cwd)
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert text.startswith("top\n") and text.endswith("bottom\n") and "STALE-TABLE" not in text
    assert readme.block_of(text) == readme.verdict_table(report)
    assert "cannot read a report" in capsys.readouterr().err


@pytest.mark.parametrize("page, code", snippets(), ids=lambda x: x if len(x) < 30 else "")
def test_every_python_snippet_runs(page, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    q, k, v = torch.randn(3, 1, 2, 16, 8).unbind(0)  # snippets that use the q, k, v the page's text defines
    exec(compile(code, f"{page} snippet", "exec"), {"q": q, "k": k, "v": v})


def test_every_command_exists_and_the_cheap_ones_run(quick_report, tmp_path):
    out, _ = quick_report
    (tmp_path / "attnscale-report").symlink_to(out)
    from safetensors.torch import save_file
    save_file({"q": torch.randn(1, 2, 16, 8), "k": torch.randn(1, 2, 16, 8)}, str(tmp_path / "q_k.safetensors"))
    env = {**os.environ, "BROWSER": "true", "HF_HUB_OFFLINE": "1"}
    found = commands()
    assert len(found) >= 20
    ran, checked = [], set()
    for page, command in found:
        words = command.split()[1:]
        if any(" ".join(words).startswith(cheap) for cheap in CHEAP):
            args = words
            ran.append(command)
        elif words and words[0] not in checked:
            checked.add(words[0])
            args = [words[0], "--help"]
        else:
            continue
        done = subprocess.run([sys.executable, "-m", "attnscale", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (page, command, done.stderr[-2000:])
    assert {"explain", "explore", "answer", "diagnose"} <= {c.split()[1] for c in ran}
    assert json.loads((out / "report.json").read_text())["preset"] == "quick"
