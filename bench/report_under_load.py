"""Benchmark: the quick report's wall time quiet, beside one busy process at nice 0, and beside one at nice 19.

Side by side in one run (issue 43, class 7): a fair share of 2 cores beside one CPU-bound process is about 1.5x the
quiet time; much more says the report waits for the machine to go idle.  Each report is a fresh one (--fresh) in a
temporary folder; the busy process is a Python loop started before the report and killed after it.

    .venv/bin/python bench/report_under_load.py [--labs LAB,...] [--repeats 1]

Not a test: it prints what it measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONDITIONS = (("quiet", None), ("beside a busy process at nice 0", 0), ("beside a busy process at nice 19", 19))
BUSY = "while True: pass"


def busy(niceness: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=lambda: os.nice(niceness))


def report_seconds(labs: str | None) -> float:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "attnscale", "report", "--out", os.path.join(folder, "r"), "--fresh"]
        if labs:
            command += ["--labs", labs]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", default=None, help="comma-separated labs (default: all, the quick preset)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    seconds = {}
    for name, niceness in CONDITIONS:
        runs = []
        for _ in range(args.repeats):
            load = busy(niceness) if niceness is not None else None
            try:
                runs.append(report_seconds(args.labs))
            finally:
                if load is not None:
                    load.kill()
                    load.wait()
        seconds[name] = statistics.median(runs)
        print(f"{name:34s} {seconds[name]:7.1f} s  ({seconds[name] / seconds['quiet']:.2f}x quiet)", flush=True)


if __name__ == "__main__":
    main()
