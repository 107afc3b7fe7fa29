"""A small decoder Transformer with named observation points, and the tasks it trains on."""

from .model import IGNORE_INDEX, ModelConfig, Transformer, targets_at

__all__ = ["IGNORE_INDEX", "ModelConfig", "Transformer", "targets_at"]
