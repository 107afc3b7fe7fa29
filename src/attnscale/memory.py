"""Free memory, and a clear refusal for work that will not fit in it.

A command that allocates what its user sized (T x T matrices, a model of any width) first
estimates how many bytes it will need and calls :func:`require_memory`, which raises a
one-line ValueError instead of letting the kernel kill the process part-way:

    >>> need = tensor_bytes((t_q, t_k), torch.float64) * 6
    >>> require_memory(need, "the audit's (T_q, T_k) matrices", "audit fewer tokens")
    ValueError: the audit's (T_q, T_k) matrices would need 19.2 GB, but only 11.5 GB is free; audit fewer tokens

Free memory on the CPU is MemAvailable of /proc/meminfo, capped by the process's cgroup
limit (a container's memory limit) minus what the cgroup already uses; elsewhere the free
physical pages (``os.sysconf``).  On a CUDA device it is ``torch.cuda.mem_get_info``.
The environment variable ``ATTNSCALE_MEMORY_LIMIT`` (bytes, or a number with K/M/G/T,
e.g. ``2G``) caps the free memory seen on every device: to keep attnscale within a budget,
and for tests.
"""

from __future__ import annotations

import math
import operator
import os
from pathlib import Path

import torch

from . import environment
from .errors import UserError
from .runtime import torch_device

LIMIT_VARIABLE = environment.MEMORY_LIMIT
USABLE_SHARE = 0.9  # of the free memory: the rest stays for the interpreter, torch and other processes
UNITS = environment.UNITS
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def format_bytes(count: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as people read sizes)."""
    if isinstance(count, bool) or not isinstance(count, (int, float)):
        raise TypeError(f"a byte count must be a number, got {type(count).__name__}")
    if not math.isfinite(count):
        raise UserError(f"a byte count must be finite, got {count!r}")
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


def parse_bytes(text: str) -> int:
    """'2G' -> 2147483648, '512M', '1000' (bytes); ValueError naming the bad text."""
    return environment.parse_bytes(text, LIMIT_VARIABLE)


def tensor_bytes(shape, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of a dense tensor of ``shape`` and ``dtype`` (no allocation)."""
    count = 1
    for size in shape:
        if isinstance(size, bool) or operator.index(size) < 0:  # operator.index: TypeError unless an integer
            raise UserError(f"a shape holds sizes >= 0, got {size!r}")
        count *= operator.index(size)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    return count * torch.empty((), dtype=dtype).element_size()


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """Limit minus usage of this process's memory cgroup (v2, then v1); None without a limit."""
    for limit_file, usage_file in ((CGROUP_V2 / "memory.max", CGROUP_V2 / "memory.current"),
                                   (CGROUP_V1 / "memory.limit_in_bytes", CGROUP_V1 / "memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 2**60:  # v1 writes ~2^63 for no limit
            return max(0, limit - usage)
    return None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(device: str | torch.device = "cpu") -> int | None:
    """Memory free for new allocations on ``device`` now, in bytes (None if it cannot be told).

    CPU: /proc/meminfo's MemAvailable, capped by the cgroup's limit minus its usage; without
    /proc, the free physical pages.  CUDA: the device's free memory.  Either way capped by
    ``ATTNSCALE_MEMORY_LIMIT`` when set.
    """
    device = torch_device(device)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = _meminfo_available()
        room = _cgroup_room()
        if free is None:
            free = _sysconf_available()
        if room is not None:
            free = room if free is None else min(free, room)
    limit = environment.value(LIMIT_VARIABLE)
    if limit:
        cap = parse_bytes(limit)
        free = cap if free is None else min(free, cap)
    return free


def fits(bytes_needed: int, device: str | torch.device = "cpu") -> bool:
    """Whether ``bytes_needed`` fit in the usable share of the free memory (True when unknown)."""
    free = available_bytes(device)
    return free is None or bytes_needed <= USABLE_SHARE * free


# What one spawned worker process costs before its work: its interpreter, torch and attnscale (149 MB of private
# memory measured after importing torch and the training code, torch 2.13 on CPU), with room for its allocator.
WORKER_PROCESS_BYTES = 200 * 10**6


def workers_that_fit(wanted: int, work_bytes=(), per_worker: int = WORKER_PROCESS_BYTES,
                     device: str | torch.device = "cpu") -> int:
    """The most worker processes, up to ``wanted``, whose own cost (``per_worker`` each) and work (the
    ``work_bytes`` of the first k jobs in flight, largest first) fit in the free memory together; 0 when not
    even one does.  Memory that cannot be told refuses nothing (``wanted``)."""
    work = sorted(work_bytes, reverse=True)
    for count in range(wanted, 0, -1):
        if all(fits(needed, where) for needed, where in placed(count * per_worker, sum(work[:count]), device)):
            return count
    return 0


def placed(process_bytes: int, work_bytes: int, device: str | torch.device = "cpu") -> list[tuple[int, str]]:
    """(bytes, device) to check for worker processes and their work: the processes live in CPU memory and their
    work on ``device``, one sum where that is the CPU too."""
    if torch_device(device).type == "cpu":
        return [(process_bytes + work_bytes, "cpu")]
    return [(process_bytes, "cpu"), (work_bytes, str(device))]


def require_memory(bytes_needed: int, what: str, shrink_hint: str, device: str | torch.device = "cpu") -> None:
    """Raise ValueError unless ``bytes_needed`` fit in the free memory of ``device``.

    ``what`` names the allocation ("the (T, T) matrices of the audit"), ``shrink_hint`` says
    how to make it smaller ("save fewer tokens"); the message reads
    "<what> would need 3.2 GB, but only 1.1 GB is free; <shrink_hint>".  Usable is 90% of
    the free memory; when the free memory cannot be told, nothing is refused.
    """
    if isinstance(bytes_needed, bool) or not isinstance(bytes_needed, int) or bytes_needed < 0:
        raise UserError(f"bytes_needed must be an integer >= 0, got {bytes_needed!r}")
    free = available_bytes(device)
    if free is not None and bytes_needed > USABLE_SHARE * free:
        where = "" if torch_device(device).type == "cpu" else f" on {device}"
        raise UserError(f"{what} would need {format_bytes(bytes_needed)}, but only {format_bytes(free)} is "
                         f"free{where}; {shrink_hint}")
