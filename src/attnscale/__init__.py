"""attnscale: why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnscale")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"

from .attention import ScaledAttention, attention, capture  # noqa: E402
from .scaling import ScaleRule, parse  # noqa: E402

__all__ = ["ScaledAttention", "ScaleRule", "attention", "capture", "parse", "probe", "__version__"]


def __getattr__(name: str):
    if name == "probe":  # read when asked: the probing package imports more than the core needs
        from .probing.anymodule import probe

        return probe
    raise AttributeError(f"module 'attnscale' has no attribute {name!r}")
