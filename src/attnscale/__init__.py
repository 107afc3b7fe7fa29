"""attnscale: why attention uses softmax(QK^T / sqrt(d_k)), tested by experiment."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("attnscale")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+src"

from .attention import ScaledAttention, attention, capture  # noqa: E402
from .scaling import ScaleRule, parse  # noqa: E402

__all__ = ["ScaledAttention", "ScaleRule", "attention", "capture", "parse", "__version__"]
