"""What one attention call saw: q, k, logits and probabilities (the record :func:`attnscale.capture` fills, whether
the call is a ScaledAttention's or read from the operations of any module by :mod:`attnscale.probing.anymodule`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Observation:
    """What one attention call saw: tensors of shape (B, H, T, d) or (B, H, T, T).

    ``logits`` holds every (query, key) pair, masked ones included (NaN from a ScaledAttention, -inf
    from any other module), so ``logits.std()`` of a causal call is NaN; :attr:`allowed_logits` and
    :meth:`logit_std` leave the masked pairs out.
    """

    q: torch.Tensor
    k: torch.Tensor
    logits: torch.Tensor
    probs: torch.Tensor
    factor: float
    mask: torch.Tensor | None = None  # True where the query may attend the key; None: read from the logits

    @property
    def allowed(self) -> torch.Tensor:
        """True where the query may attend the key, shaped as ``logits``."""
        if self.mask is not None:
            return self.mask.expand_as(self.logits)
        return ~(torch.isnan(self.logits) | (self.logits == -math.inf))

    @property
    def allowed_logits(self) -> torch.Tensor:
        """The logits of the pairs that may attend, flattened (masked pairs left out)."""
        return self.logits[self.allowed]

    def logit_std(self) -> float:
        """The standard deviation of the logits over the pairs that may attend."""
        return float(self.allowed_logits.double().std())
