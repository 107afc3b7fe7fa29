"""Survey: `attnscale audit FOLDER` on config folders saved from installed families, as a user would run it.

Each family's tiny config (a composite: every part at the tiny sizes) is saved to a folder of its own, then audited
in a fresh process (`attnscale audit FOLDER --json`): its verdict, exit code, declared and measured factors, and for
a composite whether each tower was measured inside the folder's audit.  Not a test: it prints what it finds.

    .venv/bin/python bench/folder_check.py qwen3,olmo2,llava           # these families
    .venv/bin/python bench/folder_check.py --composites                 # every composite the family audit covers
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tiny_or_whole(model_type: str):
    """The config of the tiny model the family audit runs (after its retries: MLA's sizes, tied widths), or a
    composite's whole config (every part at the tiny sizes) with its towers."""
    from attnscale.audit import families, measure

    try:
        return measure.tiny_model_fed(model_type, 0, {})[0].config, []
    except families.CannotAudit as reason:
        if not reason.towers:
            raise
        return families.whole_config(model_type), reason.towers


def save_config(model_type: str, folder: Path) -> str:
    """The family's config saved in ``folder``, or why it could not be made."""
    try:
        config, _ = tiny_or_whole(model_type)
        config.save_pretrained(folder)
    except Exception as error:  # noqa: BLE001 - any family whose config cannot be made is reported
        return f"no config: {type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    return ""


def is_composite(model_type: str) -> bool:
    try:
        return bool(tiny_or_whole(model_type)[1])
    except Exception:  # noqa: BLE001
        return False


def audit(folder: Path) -> tuple[int, dict | None, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attnscale", "audit", str(folder), "--json"], capture_output=True,
                          text=True, timeout=600)
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done.returncode, report, time.perf_counter() - start


def row_of(model_type: str, code: int, report: dict | None, seconds: float, why: str) -> dict:
    if report is None:
        return {"family": model_type, "exit": code, "verdict": why or "error", "declared": "", "measured": "",
                "towers": "", "seconds": round(seconds, 1)}
    main, towers = report["rows"][0], report["rows"][1:]
    return {"family": model_type, "exit": code, "verdict": report["verdict"], "declared": main["declared"],
            "measured": main["eager"], "row verdicts": ", ".join(r["verdict"] for r in report["rows"]),
            "towers": f"{sum(r['verdict'] == 'ok' for r in towers)} of {len(towers)} ok" if towers else "-",
            "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="?", default="", help="comma-separated model types")
    parser.add_argument("--composites", action="store_true", help="every composite the family audit covers by towers")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    from attnscale.audit import families

    names = [n for n in args.families.split(",") if n]
    if args.composites:
        names += [f.model_type for f in families.all_families() if is_composite(f.model_type)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in names:
            folder = Path(tmp) / model_type
            why = save_config(model_type, folder)
            code, report, seconds = audit(folder) if not why else (2, None, 0.0)
            rows.append(row_of(model_type, code, report, seconds, why))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    composites = [r for r in rows if r["towers"] not in ("", "-")]
    print(f"{len(rows)} folders: exit codes {sorted({r['exit'] for r in rows})}; "
          f"{sum(r['exit'] == 0 for r in rows)} ok, {sum(r['exit'] == 1 for r in rows)} mismatch, "
          f"{sum(r['exit'] == 3 for r in rows)} incomplete; composite folders with tower rows: {len(composites)}, "
          f"every tower ok in {sum(r['towers'].split(' of ')[0] == r['towers'].split(' of ')[1].split()[0] for r in composites)}")


if __name__ == "__main__":
    main()
