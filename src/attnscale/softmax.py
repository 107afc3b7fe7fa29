"""Softmax, three ways, in any floating dtype.

* ``naive``: exp(x) / sum(exp(x)).  No max subtraction, so exp overflows once x passes
  ln(finfo.max) (about 11.09 in float16, 88.7 in float32).  Kept on purpose: the numerics
  lab studies exactly that overflow.
* ``stable``: exp(x - max(x)) / sum(...).  The textbook fix: every exponent is <= 0.
* ``online``: tiled over the last axis with a running max and a running sum, the
  recurrence FlashAttention-2 uses in its forward pass.  It returns the logsumexp too.

Masks are boolean, True where a key may be attended (torch SDPA's convention), and must
broadcast to the input's shape (a mask never makes the output bigger).  A fully masked row
gives all zeros, never NaN.  The input needs at least one dimension; a last dimension of
size 0 (no keys) gives an empty result, as does an input with no rows.  Every method
computes in the input's own dtype, except that ``online`` keeps its running statistics in
float32 for float16/bfloat16 inputs, as FlashAttention does.
"""

from __future__ import annotations

import torch

from .errors import UserError

METHODS = ("naive", "stable", "online")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_method(method: str) -> str:
    if method not in METHODS:
        raise UserError(f"unknown softmax method {method!r}; accepted: {', '.join(METHODS)}")
    return method


def check_float(x: torch.Tensor, name: str = "input") -> None:
    if not isinstance(x, torch.Tensor):
        raise UserError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise UserError(f"{name} has dtype {x.dtype}; accepted: float16, bfloat16, float32, float64")
    if x.is_meta:
        raise UserError(f"{name} is on the meta device (a shape without values); accepted: a tensor on cpu or cuda")


def check_mask(mask: torch.Tensor | None, shape: torch.Size, name: str = "mask") -> torch.Tensor | None:
    """Validate a boolean mask that must broadcast to ``shape`` (not beyond it); return it or None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise UserError(f"{name} must be a bool tensor (True = may attend), got {getattr(mask, 'dtype', type(mask))}")
    try:
        fits = torch.broadcast_shapes(mask.shape, shape) == torch.Size(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise UserError(f"{name} of shape {tuple(mask.shape)} does not broadcast to {tuple(shape)}")
    return mask


def check_rows(x: torch.Tensor, name: str = "input") -> None:
    """A float tensor of shape (..., n): at least one dimension, the last one over keys."""
    check_float(x, name)
    if x.dim() < 1:
        raise UserError(f"{name} must have at least one dimension (..., n), got a 0-d tensor")


def naive_softmax(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    check_rows(x)
    mask = check_mask(mask, x.shape)
    e = torch.exp(x)
    if mask is not None:
        e = e.masked_fill(~mask, 0.0)
    total = e.sum(dim=-1, keepdim=True)
    p = e / total
    if mask is not None:
        p = p.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return p


def stable_softmax(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    check_rows(x)
    mask = check_mask(mask, x.shape)
    if x.shape[-1] == 0:
        return x.clone()  # no keys: an empty result, as the other methods give
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf"))
    row_max = x.amax(dim=-1, keepdim=True)
    e = torch.exp(x - _finite_or_zero(row_max))
    total = e.sum(dim=-1, keepdim=True)
    # Only a fully masked row sums to 0; a NaN (e.g. from a +inf logit) must stay visible.
    return torch.where(total == 0, torch.zeros_like(e), e / total)


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype running statistics are kept in: float32 for half types, else the input's."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def online_max_and_sum(x: torch.Tensor, mask: torch.Tensor | None = None, block_size: int = 128):
    """Visit the last axis in blocks with a running max m and a running sum l of exp(x - m).

    Returns (m, l) in :func:`stats_dtype` of the input; a fully masked row has m = -inf, l = 0.
    """
    check_rows(x)
    mask = check_mask(mask, x.shape)
    check_block_size(block_size)
    acc = stats_dtype(x.dtype)
    if mask is not None:
        mask = mask.expand(x.shape)
    running_max = torch.full(x.shape[:-1], float("-inf"), dtype=acc, device=x.device)
    running_sum = torch.zeros(x.shape[:-1], dtype=acc, device=x.device)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size].to(acc)
        if mask is not None:
            block = block.masked_fill(~mask[..., start : start + block_size], float("-inf"))
        new_max = torch.maximum(running_max, block.amax(dim=-1))
        safe_max = _finite_or_zero(new_max)
        # Rescale the old sum to the new max, then add this block's terms.
        running_sum = running_sum * torch.exp(running_max - safe_max) + torch.exp(
            block - safe_max.unsqueeze(-1)
        ).sum(dim=-1)
        running_max = new_max
    return running_max, running_sum


def _finite_or_zero(row_max: torch.Tensor) -> torch.Tensor:
    """A fully masked row's max is -inf; shifting by 0 instead keeps its exps at exactly 0."""
    return torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)


def online_logsumexp(x: torch.Tensor, mask: torch.Tensor | None = None, block_size: int = 128) -> torch.Tensor:
    """logsumexp over the last axis by the online recurrence; -inf for fully masked rows."""
    running_max, running_sum = online_max_and_sum(x, mask, block_size)
    return torch.where(running_sum > 0, _finite_or_zero(running_max) + torch.log(running_sum), running_max)


def online_softmax(
    x: torch.Tensor, mask: torch.Tensor | None = None, block_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax by the online (running max + running sum) recurrence; returns (p, logsumexp).

    p = exp(x - m) / l with the final max m and sum l, not exp(x - logsumexp): for huge
    logits, m + log l would round away the small log l.
    """
    running_max, running_sum = online_max_and_sum(x, mask, block_size)
    safe_max = _finite_or_zero(running_max)
    e = torch.exp(x.to(running_max.dtype) - safe_max.unsqueeze(-1))
    if mask is not None:
        e = e.masked_fill(~mask, 0.0)
    total = running_sum.unsqueeze(-1)
    p = torch.where(total == 0, torch.zeros_like(e), e / total)
    lse = torch.where(running_sum > 0, safe_max + torch.log(running_sum), running_max)
    return p.to(x.dtype), lse


def check_block_size(block_size: int) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise UserError(f"block_size must be an integer >= 1, got {block_size!r}")
    return block_size


def softmax(
    x: torch.Tensor, mask: torch.Tensor | None = None, method: str = "stable", block_size: int = 128
) -> torch.Tensor:
    """Softmax over the last axis by ``method`` (naive, stable or online)."""
    check_method(method)
    if method == "naive":
        return naive_softmax(x, mask)
    if method == "stable":
        return stable_softmax(x, mask)
    return online_softmax(x, mask, block_size)[0]
