"""How long the presets take, measured: the one file every time the project quotes comes from.

``data/timings.json`` holds, per preset, the wall time of a fresh report, the machine it was measured
on, the training runs and each lab's own clock, with the command and the date.  ``report --help``,
the README and docs/labs.md quote it through :func:`preset_phrase` and :func:`lab_seconds`; a test
checks the text against it.  ``python -m attnscale.timings quick FOLDER`` records a fresh quick
report's times (``attnscale report --fresh --out FOLDER``, nothing else running).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PATH = Path(__file__).parent / "data" / "timings.json"


def load() -> dict:
    return json.loads(PATH.read_text(encoding="utf-8"))


def minutes(seconds: float) -> str:
    """'about 3 minutes', to the half minute below 10 minutes, the minute above."""
    value = round(seconds / 30) / 2 if seconds < 600 else round(seconds / 60)
    return f"about {value:g} minute{'s' if value != 1 else ''}"


def preset_phrase(preset: str, timings: dict | None = None) -> str:
    """'about 3.5 minutes on 2 CPU cores': the preset's measured wall time and where it was measured."""
    measured = (timings or load())[preset]
    return f"{minutes(measured['seconds'])} on {measured['cores']} CPU cores"


def lab_seconds(preset: str = "quick", timings: dict | None = None) -> dict[str, float]:
    return dict((timings or load())[preset]["labs"])


def record(preset: str, folder: str | Path) -> dict:
    """The times of the fresh report in ``folder`` written into the timings file for ``preset``."""
    import os
    import platform

    report = json.loads((Path(folder) / "report.json").read_text(encoding="utf-8"))
    if report["preset"] != preset or any(info.get("cached") for info in report["labs"].values()):
        raise ValueError(f"{folder} holds a {report['preset']} report with stored results reused; record a fresh "
                         f"{preset} report (attnscale report --preset {preset} --fresh)")
    timings = load() if PATH.exists() else {}
    timings[preset] = {
        "seconds": report["seconds"], "cores": os.cpu_count(), "machine": report.get("machine", platform.platform()),
        "measured": report["started"][:10], "version": report["attnscale_version"], "seed": report["seed"],
        "training_runs": report["labs"].get("training", {}).get("runs"),
        "labs": {name: info["seconds"] for name, info in report["labs"].items()},
        "command": f"attnscale report --preset {preset} --fresh --out DIR, nothing else running",
    }
    PATH.write_text(json.dumps(timings, indent=1) + "\n", encoding="utf-8")
    return timings


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m attnscale.timings quick|full REPORT_FOLDER  (a fresh report)")
    print(json.dumps(record(sys.argv[1], sys.argv[2])[sys.argv[1]], indent=1))
