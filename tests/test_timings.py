"""Every time the project quotes comes from one measured file (data/timings.json), and the text agrees with it."""

import re
from pathlib import Path

import pytest

from attnscale import timings

ROOT = Path(__file__).resolve().parents[1]


def test_the_file_holds_a_measurement_per_preset_with_its_machine_and_command():
    found = timings.load()
    for preset in ("quick", "full"):
        entry = found[preset]
        assert entry["seconds"] > 0 and entry["cores"] >= 1 and entry["command"].startswith("attnscale report")
        assert entry["measured"][:4].isdigit() and entry["training_runs"] > 0 and entry["labs"]["training"] > 0


@pytest.mark.parametrize("seconds, words", [(30, "about 0.5 minutes"), (60, "about 1 minute"), (199.7, "about 3.5 minutes"),
                                            (1557.4, "about 26 minutes")])
def test_minutes_are_rounded_to_the_half_minute_then_the_minute(seconds, words):
    assert timings.minutes(seconds) == words


def test_the_readme_and_report_help_quote_the_measured_times():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quick = timings.load()["quick"]
    assert f"The quick preset takes {timings.preset_phrase('quick')} ({quick['training_runs']} training runs" in readme
    assert timings.preset_phrase("full") in readme
    from typer.testing import CliRunner

    from attnscale.cli import app

    shown = " ".join(CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "300"}).output.split())
    assert f"quick ({timings.preset_phrase('quick')})" in shown and timings.preset_phrase("full") in shown


def test_the_labs_page_quotes_each_labs_measured_time():
    page = (ROOT / "docs" / "labs.md").read_text(encoding="utf-8")
    measured = timings.lab_seconds("quick")
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| ([^|]*) \|$", page, flags=re.M))
    assert set(rows) == set(measured)
    for lab, cell in rows.items():
        assert cell.startswith(f"{round(measured[lab])} s"), (lab, cell)
    assert f"{timings.load()['quick']['training_runs']} runs" in rows["training"]
