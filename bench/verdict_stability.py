"""Do the verdicts survive another base seed?

Runs every lab of a preset at several base seeds (each seed's report in its own folder under
``--out``, results stored there, so a rerun only reads them back) and prints, per claim, each
seed's verdict line and how many seeds agree with the most common verdict; then the wall time of
each seed's report and the training lab's run count.  The target: every claim's verdict the same
at every base seed.

    python bench/verdict_stability.py [--preset quick] [--seeds 0,1,2,3,4] [--out bench-out/stability]
                                      [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from attnscale.report import build_report


def seeds_arg(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes comma-separated integers, got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds takes one or more integers >= 0, got {text!r}")
    return seeds


def stability(preset: str, seeds: list[int], out: Path) -> dict:
    """{"verdicts": {claim: {seed: verdict line}}, "seconds": {seed: s}, "runs": {seed: n}}."""
    verdicts: dict[str, dict[int, str]] = collections.defaultdict(dict)
    seconds, runs = {}, {}
    for seed in seeds:
        started = time.perf_counter()
        report = build_report(preset=preset, seed=seed, out=out / preset / f"seed{seed}")
        seconds[seed] = time.perf_counter() - started
        runs[seed] = report["labs"].get("training", {}).get("runs")
        for claim in report["claims"] + report.get("statements", []):  # the source's 18 and the statements beyond it
            verdicts[claim["id"]][seed] = claim["verdict_line"]
    return {"preset": preset, "seeds": seeds, "verdicts": dict(verdicts), "seconds": seconds, "runs": runs}


def agreement(lines: dict[int, str]) -> tuple[str, int]:
    """The most common verdict (the line's first words, before any bracket) and how many seeds give it."""
    heads = collections.Counter(line.split(" (")[0] for line in lines.values())
    return heads.most_common(1)[0]


def print_table(data: dict) -> None:
    seeds = data["seeds"]
    print(f"preset {data['preset']}, base seeds {', '.join(map(str, seeds))}")
    print(f"{'claim':<6}{'agree':>7}  " + "  |  ".join(f"seed {s}" for s in seeds))
    stable = 0
    for claim, lines in sorted(data["verdicts"].items()):
        _, count = agreement(lines)
        stable += count == len(seeds)
        print(f"{claim:<6}{count:>4}/{len(seeds)}  " + "  |  ".join(lines[s] for s in seeds))
    print(f"{stable} of {len(data['verdicts'])} claims give the same verdict at every base seed")
    for s in seeds:
        print(f"seed {s}: report {data['seconds'][s]:.1f} s (results reused where stored), "
              f"{data['runs'][s]} training runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick", choices=("quick", "full"))
    parser.add_argument("--seeds", type=seeds_arg, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, default=Path("bench-out/stability"))
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON here")
    args = parser.parse_args()
    data = stability(args.preset, args.seeds, args.out)
    print_table(data)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
