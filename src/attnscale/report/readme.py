"""The README's table of verdicts, generated from a report, never typed.

    python -m attnscale.report.readme attnscale-report            # print the table
    python -m attnscale.report.readme attnscale-report --write    # put it into README.md between the markers

A test builds a fresh quick report and checks that README.md holds exactly this table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import jsonfile
from ..errors import UserError

START = "<!-- verdicts: python -m attnscale.report.readme REPORT_DIR --write (generated; do not edit) -->"
END = "<!-- /verdicts -->"


def verdict_table(report: dict) -> str:
    """One Markdown table: the 18 claims of the interview answer, then the statements beyond it."""
    lines = [f"Quick preset, base seed {report['seed']}, attnscale {report['attnscale_version']}:", "",
             "| ID | claim | verdict |", "|---|---|---|"]
    for claim in [*report["claims"], *report.get("statements", [])]:
        text = claim["claim"].replace("|", "\\|")
        verdict = claim.get("verdict_line") or claim["verdict"]
        lines.append(f"| {claim['id']} | {text} | {verdict.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def block_of(text: str) -> str:
    """What README.md holds between the markers (ValueError if they are missing)."""
    if START not in text or END not in text:
        raise ValueError(f"README.md has no verdict block: expected the lines {START!r} and {END!r}")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def with_block(text: str, table: str) -> str:
    block_of(text)  # the markers are there
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{START}\n{table}{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnscale.report.readme",
                                     description="Print (or write into README.md) the table of verdicts of a report.")
    parser.add_argument("report_dir", type=Path, help="a folder holding report.json (attnscale report --out)")
    parser.add_argument("--write", action="store_true", help="replace the table in README.md (the current folder's)")
    args = parser.parse_args(argv)
    path = args.report_dir / "report.json"
    try:
        report = jsonfile.read(path, repr(str(path)))
        table = verdict_table(report)
    except (OSError, ValueError, KeyError, TypeError, UserError) as error:
        print(f"attnscale: error: cannot read a report from {str(path)!r}: {error}", file=sys.stderr)
        return 2
    if not args.write:
        sys.stdout.write(table)
        return 0
    readme = Path("README.md")
    try:
        readme.write_text(with_block(readme.read_text(encoding="utf-8"), table), encoding="utf-8")
    except (OSError, ValueError) as error:
        print(f"attnscale: error: cannot write the table into {str(readme)!r}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
