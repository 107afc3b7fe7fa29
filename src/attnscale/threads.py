"""Torch's intra-op thread count, set for a block of work and restored after it."""

from __future__ import annotations

import contextlib

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
