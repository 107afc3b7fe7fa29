"""The CPU settings of the work: for a block of work, restored after it, torch's intra-op thread count
and whether subnormal floats are flushed to zero; for the whole process, glibc's malloc keeping the
memory a training step frees (:func:`keep_freed_heap`)."""

from __future__ import annotations

import contextlib
import threading

import torch

from .errors import UserError


@contextlib.contextmanager
def torch_threads(threads: int | None = 1):
    """Run with ``threads`` intra-op threads (None or 0: leave torch's setting), then restore.

    The labs are many small tensor ops: on a busy 2-core machine torch's default two
    threads spin waiting on each other and ran up to 20x slower; one thread is about as
    fast on an idle machine.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise UserError(f"threads must be an integer >= 0 (0: torch's default), got {threads!r}")
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_flushing = threading.local()  # how deep this thread is in flushed_denormals blocks


@contextlib.contextmanager
def flushed_denormals():
    """Run with subnormal float32/float64 results and inputs taken as zero (the CPU's FTZ/DAZ
    modes), then switch them off again (torch starts with them off and has no getter).

    Training under a saturated softmax fills the backward pass with subnormal probabilities
    and gradients (below 1.2e-38, far under float32's 1e-7 relative precision), each costing
    the CPU about a hundred cycles: with them, a run without scaling at d_head 256 took
    2.2-2.7x the CPU time of the same run flushed, to the same losses (``bench/subnormals.py``).
    The mode is per thread: with more than one intra-op thread, torch's other threads keep
    subnormals.  Half precision is unaffected (its conversions keep float16 subnormals).
    Yields whether the CPU supports it.
    """
    depth = getattr(_flushing, "depth", 0)
    supported = torch.set_flush_denormal(True)
    _flushing.depth = depth + 1
    try:
        yield supported
    finally:
        _flushing.depth = depth
        if depth == 0:
            torch.set_flush_denormal(False)


# glibc's malloc hands the top of its heap back to the kernel once more than M_TRIM_THRESHOLD of it is free
# (128 KiB at start, raised only as large mmapped blocks are freed), and serves blocks from M_MMAP_THRESHOLD
# up by mmap, returned on free.  A training step allocates and frees the same few MB of activations and
# gradients every step, so each step faulted its pages in again: 400-2,000 minor page faults a step at the
# quick preset's recall shapes, and 5-16% more CPU a step than with the freed memory kept (bench/query_rows.py
# --heap; the numbers are the same bit for bit, only where memory comes from changes).  Kept: up to 64 MiB of
# free heap a process, blocks up to 32 MiB (the largest glibc takes on 64-bit; 16 MiB on 32-bit) from it.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_FREE_HEAP = 64 << 20
HEAP_BLOCKS_UP_TO = (32 << 20, 16 << 20)


def keep_freed_heap() -> bool:
    """Have glibc's malloc keep freed memory for the next step instead of returning it to the kernel
    (see above), for the rest of the process; False where the C library is not glibc (nothing is
    changed there) or refuses the setting."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: another libc's mallopt takes other parameters
    except (OSError, AttributeError, TypeError):
        return False
    blocks = any(mallopt(M_MMAP_THRESHOLD, size) for size in HEAP_BLOCKS_UP_TO)
    return blocks and bool(mallopt(M_TRIM_THRESHOLD, KEEP_FREE_HEAP))
