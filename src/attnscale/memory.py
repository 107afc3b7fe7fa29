"""Free memory, and a clear refusal for work that will not fit in it.

A command that allocates what its user sized (T x T matrices, a model of any width) first
estimates how many bytes it will need and calls :func:`require_memory`, which raises a
one-line ValueError instead of letting the kernel kill the process part-way:

    >>> need = tensor_bytes((t_q, t_k), torch.float64) * 6
    >>> require_memory(need, "the audit's (T_q, T_k) matrices", "audit fewer tokens")
    ValueError: the audit's (T_q, T_k) matrices would need 19.2 GB, but only 11.5 GB is free; audit fewer tokens

Free memory on the CPU is MemAvailable of /proc/meminfo, capped by the memory limit of the
process's own cgroup and of each cgroup above it (a container's or a job's limit, v2 or v1) minus
what that cgroup already uses, and by the process's address-space and data limits (``ulimit -v``,
RLIMIT_AS and RLIMIT_DATA) minus what it has mapped; elsewhere the free physical pages
(``os.sysconf``).  On a CUDA device it is ``torch.cuda.mem_get_info``.
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


def _kb_field(path: str, field: str) -> int | None:
    """A "Field:  N kB" line of a /proc file (/proc/meminfo's MemAvailable, /proc/self/status's VmSize) in bytes."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


CGROUP_FILES = {CGROUP_V2: ("memory.max", "memory.current"), CGROUP_V1: ("memory.limit_in_bytes", "memory.usage_in_bytes")}


def _cgroup_folders(proc_cgroup: Path = Path("/proc/self/cgroup")) -> list[Path]:
    """This process's memory cgroup folders, its own first, then each one above it up to the mount (v2's unified
    hierarchy, "0::/path", and v1's memory controller, "N:memory:/path"); the mount itself where
    /proc/self/cgroup cannot be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    folders = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        base = CGROUP_V2 if hierarchy == "0" and controllers == "" else (
            CGROUP_V1 if "memory" in controllers.split(",") else None)
        if base is None:
            continue
        own = base / path.lstrip("/")
        folders += [own, *[parent for parent in own.parents if parent.is_relative_to(base)]]
    return folders or [CGROUP_V2, CGROUP_V1]


def _cgroup_room() -> int | None:
    """The least room (limit minus usage) of this process's memory cgroup and those above it; None without a
    limit anywhere."""
    rooms = []
    for folder in _cgroup_folders():
        base = CGROUP_V1 if folder.is_relative_to(CGROUP_V1) else CGROUP_V2
        limit_name, usage_name = CGROUP_FILES[base]
        limit, usage = _read_int(folder / limit_name), _read_int(folder / usage_name)
        if limit is not None and usage is not None and limit < 2**60:  # v1 writes ~2^63 for no limit
            rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


def resident_bytes() -> int | None:
    """This process's resident memory now (/proc/self/statm), or None where it cannot be told."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _rlimit_room() -> int | None:
    """The least room under this process's address-space (RLIMIT_AS, against what it has mapped) and data
    (RLIMIT_DATA, against its data segment and private mappings) limits; None without a limit.  Under such a
    limit a large allocation fails however much memory the machine has free."""
    try:
        import resource
    except ImportError:  # not on this system
        return None
    rooms = []
    for limit_name, field in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft = resource.getrlimit(getattr(resource, limit_name))[0]
        used = _kb_field("/proc/self/status", field)
        if soft != resource.RLIM_INFINITY and used is not None:
            rooms.append(max(0, soft - used))
    return min(rooms) if rooms else None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(device: str | torch.device = "cpu") -> int | None:
    """Memory free for new allocations on ``device`` now, in bytes (None if it cannot be told).

    CPU: /proc/meminfo's MemAvailable, capped by the cgroups' limits minus their usage and by the
    process's address-space and data limits; without /proc, the free physical pages.  CUDA: the
    device's free memory.  Either way capped by ``ATTNSCALE_MEMORY_LIMIT`` when set.
    """
    device = torch_device(device)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = _kb_field("/proc/meminfo", "MemAvailable")
        if free is None:
            free = _sysconf_available()
        for room in (_cgroup_room(), _rlimit_room()):
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
