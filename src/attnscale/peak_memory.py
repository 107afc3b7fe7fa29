"""Peak memory of the tensors a computation creates, counted exactly.

:func:`peak_tensor_bytes` runs a function under a :class:`torch.overrides.TorchFunctionMode`
that sees every tensor a torch function or tensor method returns.  A storage not seen
before (and not one of the inputs') counts its bytes from then until it is freed (a
finalizer on the storage, whose Python object torch keeps as long as the storage lives,
so views keep it counted).  The peak of that running total is what the computation needed
beyond its inputs: the same on every machine and device, unlike the process's resident
memory, and blind only to scratch space a single kernel allocates and frees inside itself.
"""

from __future__ import annotations

import weakref

import torch
from torch.overrides import TorchFunctionMode


class TensorMemory(TorchFunctionMode):
    """Counts the bytes of live storages created inside the ``with`` block (``live``, ``peak``)."""

    def __init__(self, inputs=()):
        super().__init__()
        self.live = self.peak = 0
        self.counted: set[int] = set()
        self.known = {id(t.untyped_storage()) for t in inputs if isinstance(t, torch.Tensor)}
        self._input_storages = [t.untyped_storage() for t in inputs if isinstance(t, torch.Tensor)]

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.counted.discard(key)

    def _add(self, value) -> None:
        if isinstance(value, (tuple, list)):
            for item in value:
                self._add(item)
            return
        if not isinstance(value, torch.Tensor):
            return
        storage = value.untyped_storage()
        key = id(storage)
        if key in self.known or key in self.counted:
            return
        self.counted.add(key)
        self.live += storage.nbytes()
        weakref.finalize(storage, self._freed, key, storage.nbytes())
        self.peak = max(self.peak, self.live)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._add(out)
        return out


def peak_tensor_bytes(fn, *inputs: torch.Tensor, **kwargs) -> tuple[object, int]:
    """``(fn(*inputs, **kwargs), peak bytes of the tensors it created)``, under torch.no_grad."""
    with torch.no_grad(), TensorMemory(inputs) as memory:
        result = fn(*inputs, **kwargs)
    return result, memory.peak
