"""Statistics of attention distributions and their logits.

Every function works on a batch of rows: ``probs`` has shape (..., n) and each row sums to 1
over its valid keys.  ``mask`` (bool, True = valid key) broadcasts to it; probabilities on
masked keys are ignored.  Results have shape (...,).  Logs are natural.

Probabilities are checked: a negative entry, or a row whose sum over its valid keys is
neither 1 (within the dtype's rounding, :data:`SUM_TOLERANCE`) nor 0, raises ValueError.

One convention for rows that hold no distribution: a row with no valid key (fully masked,
all zeros as the softmax gives for a fully masked row, or n = 0) and a row with a NaN or
inf entry give NaN for every statistic (entropy, normalised entropy, effective support,
max probability, KL to uniform, the Jacobian norms; and the logit moments of a row with no
valid key).  A row with one valid key is a distribution: entropy 0, effective support 1,
max p 1, KL 0, Jacobian norms 0; only its normalised entropy is NaN (log 1 = 0), and so is
anything divided by it.  :func:`summarize` leaves out every row with fewer than two valid
keys or no distribution.
"""

from __future__ import annotations

import torch

from .errors import UserError
from .softmax import check_mask, check_rows

# How far a row's sum may be from 1: a few roundings of the dtype (half types store each
# probability with a relative error of eps/2, and softmax kernels add a few more).
SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def _check_probs(probs: torch.Tensor) -> torch.Tensor:
    """Per row: True where the row holds no distribution (no mass, or a NaN/inf entry).

    Raises ValueError for negative entries and for finite rows whose sum is neither 1 nor 0."""
    finite = torch.isfinite(probs).all(dim=-1)
    negative = probs < 0
    if negative.any():
        raise UserError(f"probs has {int(negative.sum())} negative entries (lowest {float(probs[negative].min()):.4g}); "
                         "statistics need probabilities (a softmax output)")
    total = probs.sum(dim=-1, dtype=torch.float64)
    off = finite & (total != 0) & ((total - 1).abs() > SUM_TOLERANCE[probs.dtype])
    if off.any():
        raise UserError(f"probs must sum to 1 over each row's valid keys; {int(off.sum())} rows do not (one sums to "
                         f"{float(total[off][0]):.6g}); give softmax outputs, not logits or weights")
    return ~finite | (total == 0)


def _prepare(probs: torch.Tensor, mask: torch.Tensor | None):
    """(probs with masked keys and undefined rows zeroed, mask, undefined rows)."""
    check_rows(probs, "probs")
    mask = check_mask(mask, probs.shape)
    if mask is not None:
        probs = probs.masked_fill(~mask, 0.0)
    undefined = _check_probs(probs)
    return probs.masked_fill(undefined.unsqueeze(-1), 0.0), mask, undefined


def _per_row(probs: torch.Tensor, mask: torch.Tensor | None, compute) -> torch.Tensor:
    """``compute(probs, mask)`` on the prepared rows, NaN on rows that hold no distribution."""
    probs, mask, undefined = _prepare(probs, mask)
    if probs.shape[-1] == 0:
        return torch.full(probs.shape[:-1], float("nan"), dtype=probs.dtype, device=probs.device)
    return compute(probs, mask).masked_fill(undefined, float("nan"))


def n_valid(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Number of valid keys per row."""
    check_rows(probs, "probs")
    mask = check_mask(mask, probs.shape)
    if mask is None:
        return torch.full(probs.shape[:-1], probs.shape[-1], dtype=probs.dtype, device=probs.device)
    return mask.expand(probs.shape).sum(dim=-1).to(probs.dtype)


def entropy(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """H(p) = -sum p log p, with 0 log 0 = 0."""
    return _per_row(probs, mask, lambda p, m: -torch.xlogy(p, p).sum(dim=-1))


def normalized_entropy(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """H(p) / log(n_valid): 1 for uniform, 0 for one-hot; NaN where n_valid < 2."""
    log_n = torch.log(n_valid(probs, mask))
    h = entropy(probs, mask)
    return torch.where(log_n > 0, h / log_n.clamp_min(1e-30), torch.full_like(h, float("nan")))


def effective_support(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """exp(H): the number of keys a row effectively spreads over (1 = one-hot, n = uniform)."""
    return torch.exp(entropy(probs, mask))


def max_prob(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    return _per_row(probs, mask, lambda p, m: p.amax(dim=-1))


def kl_to_uniform(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(p || uniform over the valid keys) = log(n_valid) - H(p)."""
    return torch.log(n_valid(probs, mask)) - entropy(probs, mask)


def softmax_jacobian(probs: torch.Tensor) -> torch.Tensor:
    """d softmax / d logits = diag(p) - p p^T, shape (..., n, n) (the plain formula: zeros
    for an all-zero row, NaN where a row has NaN)."""
    check_rows(probs, "probs")
    _require_jacobians(probs, copies=2)
    _check_probs(probs)
    return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)


def _require_jacobians(probs: torch.Tensor, copies: int) -> None:
    """The (..., n, n) Jacobians of every row must fit in memory (300,000 keys would be 720 GB)."""
    from .memory import require_memory

    n = probs.shape[-1]
    rows = probs.numel() // max(n, 1)
    require_memory(copies * rows * n * n * 8, f"the softmax Jacobians of {rows} rows of {n} keys ({n} x {n} each)",
                   "use fewer keys or jacobian_frobenius / jacobian_diagonal, which form no matrix", probs.device)


def jacobian_frobenius(probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """||diag(p) - p p^T||_F without forming the matrix.

    Entries are p_i (1 - p_i) on the diagonal and -p_i p_j off it.  For a near one-hot row
    the textbook form sum p^2 - 2 sum p^3 + (sum p^2)^2 cancels catastrophically, so the
    largest probability p_t is kept apart and 1 - p_t is computed as the mass of the others.
    """
    return _per_row(probs, mask, lambda p, m: _frobenius(p))


def _frobenius(probs: torch.Tensor) -> torch.Tensor:
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
    check_rows(probs, "probs")
    _require_jacobians(probs, copies=3)  # the matrix, its float64 copy and the eigensolver's workspace
    return _per_row(probs, mask, lambda p, m: _spectral(p))


def _spectral(probs: torch.Tensor) -> torch.Tensor:
    work = probs.to(torch.float64) if probs.dtype in (torch.float16, torch.bfloat16) else probs
    jacobian = torch.diag_embed(work) - work.unsqueeze(-1) * work.unsqueeze(-2)
    return torch.linalg.eigvalsh(jacobian)[..., -1].clamp_min(0).to(probs.dtype)


def jacobian_diagonal(probs: torch.Tensor) -> torch.Tensor:
    """p_i (1 - p_i): the diagonal of the softmax Jacobian, the source's 'derivative'."""
    check_rows(probs, "probs")
    _check_probs(probs)
    return probs * (1 - probs)


def logit_moments(logits: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-row mean, std (population) and max |.| of the logits over the valid keys; NaN for a
    row with no valid key (and for every row when n = 0)."""
    check_rows(logits, "logits")
    mask = check_mask(mask, logits.shape)
    if mask is None:
        mask = torch.ones_like(logits, dtype=torch.bool)
    mask = mask.expand(logits.shape)
    count = mask.sum(dim=-1).to(logits.dtype)
    empty = count == 0
    if logits.shape[-1] == 0:
        nan = torch.full(logits.shape[:-1], float("nan"), dtype=logits.dtype, device=logits.device)
        return {"mean": nan, "std": nan.clone(), "max_abs": nan.clone()}
    safe = logits.masked_fill(~mask, 0.0)
    mean = safe.sum(dim=-1) / count
    var = ((safe - mean.unsqueeze(-1)).masked_fill(~mask, 0.0) ** 2).sum(dim=-1) / count
    max_abs = safe.abs().amax(dim=-1).masked_fill(empty, float("nan"))
    return {"mean": mean, "std": var.sqrt(), "max_abs": max_abs}


def row_table(probs: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Every per-row statistic at once, from one check of the rows: ``entropy``,
    ``normalized_entropy``, ``effective_support``, ``max_prob``, ``kl_to_uniform``,
    ``jacobian_frobenius`` and ``n_valid``, each of shape (...,), with the same values (and NaN
    conventions) as the functions of the same names."""
    prepared, prepared_mask, undefined = _prepare(probs, mask)
    valid = n_valid(probs, mask)
    if prepared.shape[-1] == 0:
        nan = torch.full(prepared.shape[:-1], float("nan"), dtype=prepared.dtype, device=prepared.device)
        h, top, frobenius = nan, nan.clone(), nan.clone()
    else:
        h = (-torch.xlogy(prepared, prepared).sum(dim=-1)).masked_fill(undefined, float("nan"))
        top = prepared.amax(dim=-1).masked_fill(undefined, float("nan"))
        frobenius = _frobenius(prepared).masked_fill(undefined, float("nan"))
    log_n = torch.log(valid)
    return {"entropy": h,
            "normalized_entropy": torch.where(log_n > 0, h / log_n.clamp_min(1e-30), torch.full_like(h, float("nan"))),
            "effective_support": torch.exp(h), "max_prob": top, "kl_to_uniform": log_n - h,
            "jacobian_frobenius": frobenius, "n_valid": valid}


def summarize(probs: torch.Tensor, mask: torch.Tensor | None = None, saturated_at: float = 0.99,
              uniform_kl_below: float = 0.01, table: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Means over all rows of the main statistics, plus the shares of saturated
    (max p > ``saturated_at``) and near-uniform (KL to uniform < ``uniform_kl_below``) rows.
    Rows with fewer than two valid keys, or no distribution (see the module docstring), are left out.
    ``table``: :func:`row_table` of the same probs and mask, where the caller has it already."""
    table = row_table(probs, mask) if table is None else table
    keep = (table["n_valid"] >= 2) & ~torch.isnan(table["entropy"])
    if not keep.any():
        raise UserError("no row has two or more valid keys and a distribution over them; nothing to summarise")
    mp = table["max_prob"][keep]
    kl = table["kl_to_uniform"][keep]
    return {
        "normalized_entropy": float(table["normalized_entropy"][keep].mean()),
        "effective_support": float(table["effective_support"][keep].mean()),
        "max_prob": float(mp.mean()),
        "kl_to_uniform": float(kl.mean()),
        "jacobian_frobenius": float(table["jacobian_frobenius"][keep].mean()),
        "saturated_share": float((mp > saturated_at).to(torch.float64).mean()),
        "uniform_share": float((kl < uniform_kl_below).to(torch.float64).mean()),
        "rows": int(keep.sum()),
    }


