"""attnscale: why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment."""

import sys
import types
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnscale")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"

__all__ = ["ScaledAttention", "ScaleRule", "assert_scaled", "attention", "capture", "parse", "probe", "__version__"]

# Read when first asked for: importing attnscale (and so `attnscale --help`) does not import torch.
_LAZY = {"ScaledAttention": "attention", "attention": "attention", "capture": "attention",
         "ScaleRule": "scaling", "parse": "scaling", "probe": "probing.anymodule",
         "assert_scaled": "probing.anymodule"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnscale' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])


class _Package(types.ModuleType):
    """The package's ``attention`` is the function, as it always was, even after ``attnscale.attention`` (the
    module, which the import system would set here) is imported."""

    def __setattr__(self, name, value):
        if name == "attention" and isinstance(value, types.ModuleType) and hasattr(value, "attention"):
            value = value.attention
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
