"""Kill what a process started once that process is gone: ``python -m attnscale.reaper PID``.

A local Ray instance starts processes (its dashboard and runtime-env agents) that outlive a
sweep killed with kill -9.  The sweep starts this watcher in a session of its own; the
watcher keeps the list of the sweep's descendants up to date while the sweep lives and,
once it is gone, kills those still running (each checked by its start time, so that a
reused process id is never hit).  Linux only (/proc); elsewhere it exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

POLL_SECONDS = 0.5


def stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (None if fields[0] == "Z" else (int(fields[1]), int(fields[19])))


def descendants(root: int) -> dict[int, int]:
    """{pid: start time} of every live descendant of ``root``."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := stat(int(entry.name))):
            parents[int(entry.name)] = info
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, start) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def watch(parent: int) -> None:
    known: dict[int, int] = {}
    while stat(parent) is not None:
        known.update(descendants(parent))
        known.pop(os.getpid(), None)
        time.sleep(POLL_SECONDS)
    for pid, start in known.items():
        info = stat(pid)
        if info is not None and info[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    if Path("/proc").is_dir() and len(sys.argv) == 2:
        watch(int(sys.argv[1]))
