"""Statistics of attention distributions and their logits.

Every function works on a batch of rows: ``probs`` has shape (..., n) and each row sums to 1
over its valid keys.  ``mask`` (bool, True = valid key) broadcasts against it; masked keys
must carry probability 0.  Results have shape (...,).  Logs are natural.

Rows with fewer than two valid keys have no meaningful normalised entropy (log 1 = 0): it
is NaN there, and so is anything divided by it.
"""

from __future__ import annotations

import torch

from .softmax import check_float, check_mask


def _prepare(probs: torch.Tensor, mask: torch.Tensor | None):
    check_float(probs, "probs")
    if probs.dim() < 1 or probs.shape[-1] < 1:
        raise ValueError(f"probs must have shape (..., n) with n >= 1, got {tuple(probs.shape)}")
    mask = check_mask(mask, probs.shape)
    if mask is not None:
        probs = probs.masked_fill(~mask, 0.0)
    return probs, mask


def n_valid(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Number of valid keys per row."""
    if mask is None:
        return torch.full(probs.shape[:-1], probs.shape[-1], dtype=probs.dtype, device=probs.device)
    return mask.expand(probs.shape).sum(dim=-1).to(probs.dtype)


def entropy(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """H(p) = -sum p log p, with 0 log 0 = 0."""
    probs, _ = _prepare(probs, mask)
    return -torch.xlogy(probs, probs).sum(dim=-1)


def normalized_entropy(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """H(p) / log(n_valid): 1 for uniform, 0 for one-hot; NaN where n_valid < 2."""
    log_n = torch.log(n_valid(probs, mask))
    h = entropy(probs, mask)
    return torch.where(log_n > 0, h / log_n.clamp_min(1e-30), torch.full_like(h, float("nan")))


def effective_support(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """exp(H): the number of keys a row effectively spreads over (1 = one-hot, n = uniform)."""
    return torch.exp(entropy(probs, mask))


def max_prob(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    probs, _ = _prepare(probs, mask)
    return probs.amax(dim=-1)


def kl_to_uniform(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(p || uniform over the valid keys) = log(n_valid) - H(p)."""
    return torch.log(n_valid(probs, mask)) - entropy(probs, mask)


def softmax_jacobian(probs: torch.Tensor) -> torch.Tensor:
    """d softmax / d logits = diag(p) - p p^T, shape (..., n, n)."""
    check_float(probs, "probs")
    return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)


def jacobian_frobenius(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """||diag(p) - p p^T||_F without forming the matrix.

    Entries are p_i (1 - p_i) on the diagonal and -p_i p_j off it.  For a near one-hot row
    the textbook form sum p^2 - 2 sum p^3 + (sum p^2)^2 cancels catastrophically, so the
    largest probability p_t is kept apart and 1 - p_t is computed as the mass of the others.
    """
    probs, _ = _prepare(probs, mask)
    top = probs.argmax(dim=-1, keepdim=True)
    p_top = probs.gather(-1, top).squeeze(-1)
    others = probs.scatter(-1, top, 0.0)
    rest_mass = others.sum(dim=-1)  # = 1 - p_top, without cancellation
    others_sq = (others**2).sum(dim=-1)
    diagonal = (others**2 * (1 - others) ** 2).sum(dim=-1) + (p_top * rest_mass) ** 2
    off_diagonal = (others_sq**2 - (others**4).sum(dim=-1)) + 2 * p_top**2 * others_sq
    return (diagonal + off_diagonal).clamp_min(0).sqrt()


def jacobian_spectral(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Largest eigenvalue of diag(p) - p p^T (symmetric, positive semi-definite)."""
    probs, _ = _prepare(probs, mask)
    work = probs.to(torch.float64) if probs.dtype in (torch.float16, torch.bfloat16) else probs
    return torch.linalg.eigvalsh(softmax_jacobian(work))[..., -1].clamp_min(0).to(probs.dtype)


def jacobian_diagonal(probs: torch.Tensor) -> torch.Tensor:
    """p_i (1 - p_i): the diagonal of the softmax Jacobian, the seed's 'derivative'."""
    check_float(probs, "probs")
    return probs * (1 - probs)


def logit_moments(logits: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-row mean, std (population) and max |.| of the logits over the valid keys."""
    check_float(logits, "logits")
    mask = check_mask(mask, logits.shape)
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    mask = mask.expand(logits.shape)
    count = mask.sum(dim=-1).to(logits.dtype)
    safe = logits.masked_fill(~mask, 0.0)
    mean = safe.sum(dim=-1) / count
    var = ((safe - mean.unsqueeze(-1)).masked_fill(~mask, 0.0) ** 2).sum(dim=-1) / count
    max_abs = safe.abs().amax(dim=-1)
    return {"mean": mean, "std": var.sqrt(), "max_abs": max_abs}


def summarize(probs: torch.Tensor, mask: torch.Tensor | None = None, saturated_at: float = 0.99,
              uniform_kl_below: float = 0.01) -> dict[str, float]:
    """Means over all rows of the main statistics, plus the shares of saturated
    (max p > ``saturated_at``) and near-uniform (KL to uniform < ``uniform_kl_below``) rows.
    Rows with fewer than two valid keys are left out."""
    keep = n_valid(probs, mask) >= 2
    if not keep.any():
        raise ValueError("no row has two or more valid keys; nothing to summarise")
    ne = normalized_entropy(probs, mask)[keep]
    mp = max_prob(probs, mask)[keep]
    kl = kl_to_uniform(probs, mask)[keep]
    return {
        "normalized_entropy": float(ne.mean()),
        "effective_support": float(effective_support(probs, mask)[keep].mean()),
        "max_prob": float(mp.mean()),
        "kl_to_uniform": float(kl.mean()),
        "jacobian_frobenius": float(jacobian_frobenius(probs, mask)[keep].mean()),
        "saturated_share": float((mp > saturated_at).to(torch.float64).mean()),
        "uniform_share": float((kl < uniform_kl_below).to(torch.float64).mean()),
        "rows": int(keep.sum()),
    }

