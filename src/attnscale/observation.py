"""What one attention call saw: q, k, logits and probabilities (the record :func:`attnscale.capture` fills, whether
the call is a ScaledAttention's or read from the operations of any module by :mod:`attnscale.probing.anymodule`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Observation:
    """What one ScaledAttention forward saw: tensors of shape (B, H, T, d) or (B, H, T, T)."""

    q: torch.Tensor
    k: torch.Tensor
    logits: torch.Tensor
    probs: torch.Tensor
    factor: float
