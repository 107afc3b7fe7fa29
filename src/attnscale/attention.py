"""Scaled dot-product attention with a pluggable scale rule.

``attention(q, k, v, scale="sqrt")`` computes softmax(q k^T * factor) v, where the factor
comes from a scale rule (:mod:`attnscale.scaling`).  Four implementations:

* ``sdpa``: torch's fused kernel; the rule's factor goes in through its ``scale=``
  argument (learnable factors are folded into q instead, so their gradient flows);
* ``naive`` and ``stable``: the plain math, logits then a softmax from
  :mod:`attnscale.softmax`, one (T_q, T_k) matrix in memory.  ``naive`` computes all of it
  in the inputs' dtype and without max subtraction: the baseline that overflows, on
  purpose.  ``stable`` subtracts the row max and, for float16/bfloat16 inputs, computes the
  scores, the softmax and the output in float32 (as SDPA's CPU kernel and ``online`` do), so
  that q k^T beyond 65504 does not overflow float16; its output and weights are cast back;
* ``online``: FlashAttention-2's forward recurrence, tiled over keys: a running max, a
  running sum and a running output, never the full (T_q, T_k) matrix.

``ScaledAttention`` is a multi-head self-attention ``nn.Module`` built on the same code,
and :func:`capture` records its q, k, logits and probabilities without touching the
normal (fused) path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import memory, scaling
from .errors import UserError
from .observation import Observation
from .softmax import check_block_size, check_float, check_mask, naive_softmax, stable_softmax, stats_dtype

IMPLS = ("auto", "sdpa", "naive", "stable", "online")
ROPE_BASE = 10000.0
WEIGHT_IMPLS = ("naive", "stable")


def check_impl(impl: str) -> str:
    if impl not in IMPLS:
        raise UserError(f"unknown attention impl {impl!r}; accepted: {', '.join(IMPLS)}")
    return impl


def causal_mask(t_q: int, t_k: int, device=None) -> torch.Tensor:
    """Bool (t_q, t_k) mask, True where key j <= query i (top-left aligned, as torch SDPA)."""
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril()


def combined_mask(mask, causal: bool, t_q: int, t_k: int, device) -> torch.Tensor | None:
    if not causal:
        return mask
    tri = causal_mask(t_q, t_k, device)
    return tri if mask is None else mask & tri


def keys_per_query(t_q: int, t_k: int, mask: torch.Tensor | None, causal: bool, device=None) -> torch.Tensor:
    """How many keys each query row may attend to, under :func:`combined_mask`: (..., t_q) with a mask,
    (t_q,) without one (all t_k)."""
    allowed = combined_mask(mask, causal, t_q, t_k, device)
    if allowed is None:
        return torch.full((t_q,), t_k, device=device)
    return allowed.expand(*allowed.shape[:-2], t_q, t_k).sum(dim=-1)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(t, name)
        if t.dim() < 2:
            raise UserError(f"{name} must have shape (..., T, d), got {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise UserError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise UserError(f"q and k must share the last dimension d_k, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise UserError(f"k and v must have the same number of keys, got {k.shape[-2]} and {v.shape[-2]}")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise UserError(
            f"q, k, v must share leading dimensions, got {tuple(q.shape[:-2])}, {tuple(k.shape[:-2])}, {tuple(v.shape[:-2])}"
        )
    if q.shape[-1] < 1:
        raise UserError("d_k must be >= 1, got a q with last dimension 0")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not torch.isfinite(t).all():
            raise UserError(f"{name} contains NaN or inf; attention needs finite inputs")


def prepare_qk(q, k, rule: scaling.ScaleRule):
    """Apply the rule's preprocessing (qknorm normalises q and k) and return (q, k, factor)."""
    d_k = q.shape[-1]
    if rule.normalizes_qk:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    return q, k, rule.factor(d_k)


def with_length_term(q: torch.Tensor, rule: scaling.ScaleRule, n_keys: torch.Tensor, s=None) -> torch.Tensor:
    """q with each query row multiplied by the rule's length term m(n) (unchanged without one).

    ``n_keys``: the keys each row may attend to, broadcastable to q's (..., T_q); ``s``: a learned
    SSMax s per head, shape (H, 1), or None for the rule's initial s."""
    if rule.length is None:
        return q
    multiplier = rule.length.multiplier(n_keys.to(torch.float64 if q.dtype == torch.float64 else torch.float32), s)
    return q * multiplier.to(q.dtype).unsqueeze(-1)


def rotate(x: torch.Tensor, positions: torch.Tensor, base: float = ROPE_BASE) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) on (..., T, d), d even, in the rotate-half
    layout: dimension i and i + d/2 turn by the angle position x base^(-2i/d)."""
    half = x.shape[-1] // 2
    inverse = base ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2 / x.shape[-1])
    angles = positions.to(torch.float64).unsqueeze(-1) * inverse
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def scores(q: torch.Tensor, k: torch.Tensor, factor) -> torch.Tensor:
    """The softmax input: (q k^T) * factor, the factor applied after the product."""
    products = q @ k.transpose(-2, -1)
    if isinstance(factor, torch.Tensor):  # a learnable factor needs the out-of-place product for its gradient
        return products * factor
    return products.mul_(factor)


def dense_attention(q, k, v, factor, mask, method: str):
    """Logits, then a full softmax; returns (output, probabilities) in the inputs' dtype.

    ``naive``: everything in the inputs' dtype, no max subtraction.  ``stable``: max-subtracted,
    computed in float32 for half inputs (see the module docstring)."""
    if method == "naive":
        probs = naive_softmax(scores(q, k, factor), mask)
        return probs @ v, probs
    acc = stats_dtype(q.dtype)
    probs = stable_softmax(scores(q.to(acc), k.to(acc), factor), mask)
    return (probs @ v.to(acc)).to(q.dtype), probs.to(q.dtype)


def online_attention(q, k, v, factor, mask=None, block_size: int = 128):
    """FlashAttention-2 forward: queries in tiles; for each, keys in blocks with a running
    max m, sum l and output o.

    For each key block j:  s = q k_j^T * factor;  m' = max(m, rowmax s);
    l = l e^(m - m') + rowsum e^(s - m');  o = o e^(m - m') + e^(s - m') v_j.
    Finally o / l and the logsumexp m + log l.  Only a (block_size x block_size) tile of
    scores exists at a time.  Statistics and accumulation are kept in float32 for half
    inputs (as FlashAttention does); the output is cast back.  Returns (output, logsumexp).
    """
    check_block_size(block_size)
    acc = stats_dtype(q.dtype)
    q_acc, k_acc, v_acc = q.to(acc), k.to(acc), v.to(acc)
    if mask is not None:
        mask = mask.expand(*q.shape[:-1], k.shape[-2])
    if q.shape[-2] == 0:  # no queries: empty output and logsumexp
        return q.new_zeros(*q.shape[:-1], v.shape[-1]), q_acc.new_zeros(q.shape[:-1])
    outs, lses = [], []
    for start in range(0, q.shape[-2], block_size):
        rows = slice(start, start + block_size)
        out, lse = _online_rows(q_acc[..., rows, :], k_acc, v_acc, factor,
                                None if mask is None else mask[..., rows, :], block_size)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=-2).to(q.dtype), torch.cat(lses, dim=-1)


def _online_rows(q, k, v, factor, mask, block_size: int):
    batch = q.shape[:-1]
    running_max = torch.full(batch, float("-inf"), dtype=q.dtype, device=q.device)
    running_sum = torch.zeros(batch, dtype=q.dtype, device=q.device)
    out = torch.zeros(*batch, v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[-2], block_size):
        cols = slice(start, start + block_size)
        block = scores(q, k[..., cols, :], factor)
        if mask is not None:
            block = block.masked_fill(~mask[..., cols], float("-inf"))
        # The max only keeps exp in range; softmax does not depend on it, so no gradient flows through it.
        new_max = torch.maximum(running_max, block.detach().amax(dim=-1))
        safe_max = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
        rescale = torch.exp(running_max - safe_max)
        block_exp = block.sub_(safe_max.unsqueeze(-1)).exp_()
        running_sum = running_sum * rescale + block_exp.sum(dim=-1)
        out = out * rescale.unsqueeze(-1) + block_exp @ v[..., cols, :]
        running_max = new_max
    tiny = torch.finfo(q.dtype).tiny
    has_keys = running_sum > 0
    out = torch.where(has_keys.unsqueeze(-1), out / running_sum.clamp_min(tiny).unsqueeze(-1), 0.0)
    safe_max = torch.where(torch.isneginf(running_max), torch.zeros_like(running_max), running_max)
    lse = torch.where(has_keys, safe_max + torch.log(running_sum.clamp_min(tiny)), running_max)
    return out, lse


def sdpa_attention(q, k, v, factor, mask, causal: bool = False):
    """torch's fused kernel; a tensor factor (learnable) is folded into q so gradients reach it.

    A causal pattern with no other mask goes in as ``is_causal``: an explicit mask would
    keep torch off its fastest kernels.
    """
    if isinstance(factor, torch.Tensor):
        q, factor = q * factor, 1.0
    if causal and mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=float(factor))
    mask = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=float(factor))
    if mask is not None:
        # Rows with no key allowed: torch returns NaN for some backends; the contract is zeros.
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out


def _attend(q, k, v, factor, mask, causal: bool, impl: str, return_weights: bool, block_size: int):
    if impl == "auto":
        impl = "stable" if return_weights else "sdpa"
    if return_weights and impl not in WEIGHT_IMPLS:
        raise UserError(f"return_weights=True needs impl in {WEIGHT_IMPLS} or 'auto', got {impl!r}")
    if impl == "sdpa":
        return sdpa_attention(q, k, v, factor, mask, causal)
    mask = combined_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
    if impl == "online":
        return online_attention(q, k, v, factor, mask, block_size)[0]
    check_dense_memory(q, k, impl)
    out, probs = dense_attention(q, k, v, factor, mask, impl)
    return (out, probs) if return_weights else out


DENSE_COPIES = 3  # the (T_q, T_k) logits, their exponentials and the probabilities are alive at once
SURELY_FITS = 64 * 2**20  # score matrices this small are not checked: reading the free memory would cost more


def check_dense_memory(q: torch.Tensor, k: torch.Tensor, impl: str) -> None:
    """ValueError before a dense impl allocates score matrices that cannot fit (100,000 queries and keys would need
    120 GB in float32), naming the size and the tiled impl that needs none."""
    q_batch, k_batch = tuple(q.shape[:-2]), tuple(k.shape[:-2])  # broadcast by hand: torch's takes 0.2 ms
    width = max(len(q_batch), len(k_batch))
    q_batch, k_batch = (1,) * (width - len(q_batch)) + q_batch, (1,) * (width - len(k_batch)) + k_batch
    scores = (*(max(a, b) for a, b in zip(q_batch, k_batch)), q.shape[-2], k.shape[-2])
    dtype = q.dtype if impl == "naive" else stats_dtype(q.dtype)  # the dtype dense_attention computes them in
    needed = DENSE_COPIES * memory.tensor_bytes(scores, dtype)
    if needed <= SURELY_FITS:
        return
    memory.require_memory(needed,
                          f"impl={impl!r} on {q.shape[-2]} queries and {k.shape[-2]} keys ({DENSE_COPIES} score "
                          f"matrices of shape {tuple(scores)})",
                          "use impl='online' (tiled: no T_q x T_k matrix) or fewer queries or keys", q.device)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: str | scaling.ScaleRule = "sqrt",
    mask: torch.Tensor | None = None,
    causal: bool = False,
    impl: str = "auto",
    return_weights: bool = False,
    block_size: int = 128,
):
    """softmax(q k^T * factor) v on (..., T, d) tensors.

    ``scale`` is a spec string or a :class:`~attnscale.scaling.ScaleRule` (learnable rules use
    their initial factor; a length term multiplies each query row by m(n), n the keys it may
    attend to); ``mask`` is bool, True where a key may be attended, broadcast to
    (..., T_q, T_k); ``causal`` masks keys after the query (top-left aligned).  ``impl`` is one
    of ``auto`` (``sdpa``, or ``stable`` when weights are asked for), ``sdpa``, ``naive``,
    ``stable``, ``online``.  With ``return_weights=True`` returns (output, probabilities).
    Rows with no key allowed give zeros; so does every row when there are no keys (T_k = 0);
    no queries (T_q = 0) give an empty output.  Every impl gives the same result for these.
    """
    check_impl(impl)
    rule = scaling.parse(scale)
    check_qkv(q, k, v)
    t_k = k.shape[-2]
    mask = check_mask(mask, (*q.shape[:-1], t_k))
    if mask is not None and mask.dim() < 2:  # a scalar or one row of keys: (T_q, T_k) from here on
        mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
    q, k, factor = prepare_qk(q, k, rule)
    q = with_length_term(q, rule, keys_per_query(q.shape[-2], t_k, mask, causal, q.device))
    return _attend(q, k, v, factor, mask, causal, impl, return_weights, block_size)


@dataclass
class Capture(Mapping):
    """Filled by :func:`capture`: a mapping of module name -> the last :class:`Observation`
    (``.keys()``, ``.items()``, ``in``, ``len`` as for a dict)."""

    observations: dict[str, Observation] = field(default_factory=dict)
    detach: bool = True

    def __getitem__(self, name: str) -> Observation:
        try:
            return self.observations[name]
        except KeyError:
            raise KeyError(f"no attention call recorded under {name!r}; recorded: "
                           f"{', '.join(self.observations) or 'none'}") from None

    def __iter__(self):
        return iter(self.observations)

    def __len__(self) -> int:
        return len(self.observations)


class ScaledAttention(nn.Module):
    """Multi-head self-attention with a pluggable scale rule; a drop-in attention block.

    ``forward(x, mask=None)`` maps (B, T, d_model) to (B, T, d_model).  ``d_head`` need not
    equal d_model / n_heads.  ``scale`` is a spec (see :mod:`attnscale.scaling`); ``learned``
    adds a parameter ``log_factor``, ``qknorm`` a parameter ``gain``, a ``+ssmax`` term a
    parameter ``ssmax_s`` (one s per head).  ``init`` is an init scheme for the q/k/v
    projections.  ``impl`` as in :func:`attention`.  ``rope=True`` rotates q and k by their
    positions (0..T-1) before the product, so the module needs no position embedding and runs
    at any length.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int | None = None,
        *,
        scale: str | scaling.ScaleRule = "sqrt",
        init: str = "torch",
        impl: str = "auto",
        bias: bool = False,
        causal: bool = False,
        block_size: int = 128,
        rope: bool = False,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be an integer >= 1, got {value!r}")
        if d_head is None:
            if d_model % n_heads:
                raise UserError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pass d_head")
            d_head = d_model // n_heads
        scaling.check_d_k(d_head)
        check_impl(impl)
        if not isinstance(rope, bool) or (rope and d_head % 2):
            raise UserError(f"rope needs True/False and an even d_head, got rope={rope!r} with d_head={d_head}")
        self.rope = rope
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.rule = scaling.parse(scale)
        self.init_scheme = scaling.check_init(init)
        self.impl, self.causal, self.block_size = impl, causal, check_block_size(block_size)
        inner = n_heads * d_head
        weights = memory.tensor_bytes((4 * d_model, inner), torch.get_default_dtype())
        memory.require_memory(weights, f"the weights of ScaledAttention(d_model={d_model}, n_heads={n_heads}, "
                              f"d_head={d_head})", "use a smaller d_model, n_heads or d_head")
        self.w_q = nn.Linear(d_model, inner, bias=bias)
        self.w_k = nn.Linear(d_model, inner, bias=bias)
        self.w_v = nn.Linear(d_model, inner, bias=bias)
        self.w_o = nn.Linear(inner, d_model, bias=bias)
        scaling.init_qkv(self.w_q, self.w_k, self.w_v, init, d_head, generator=generator)
        if self.rule.kind == "learned":
            self.log_factor = nn.Parameter(torch.tensor(math.log(self.rule.factor(d_head))))
        elif self.rule.kind == "qknorm":
            self.gain = nn.Parameter(torch.tensor(float(self.rule.factor(d_head))))
        if self.rule.length is not None and self.rule.length.learnable:
            self.ssmax_s = nn.Parameter(torch.full((n_heads, 1), float(self.rule.length.coef)))
        self._capture: Capture | None = None
        self._capture_name = ""

    def factor(self) -> float | torch.Tensor:
        """The factor multiplying q k^T now (a tensor for learnable rules)."""
        if self.rule.kind == "learned":
            return self.log_factor.exp()
        if self.rule.kind == "qknorm":
            return self.gain
        return self.rule.factor(self.d_head)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, _ = x.shape
        return x.view(batch, time, self.n_heads, self.d_head).transpose(1, 2)

    def project(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool):
        """q, k, v as (B, H, T, d_head), q with the rule's length term applied, and the factor."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise UserError(f"expected input (B, T, d_model={self.d_model}), got {tuple(getattr(x, 'shape', ())) or x!r}")
        if x.dtype != self.w_q.weight.dtype:
            raise UserError(f"input has dtype {x.dtype} but the module's weights {self.w_q.weight.dtype}; convert "
                             "one of them with .to()")
        time = x.shape[1]
        q, k, v = (self.split_heads(w(x)) for w in (self.w_q, self.w_k, self.w_v))
        if self.rule.normalizes_qk:
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        if self.rope:
            positions = torch.arange(time, device=x.device)
            q, k = rotate(q, positions), rotate(k, positions)
        if self.rule.length is not None:
            n_keys = keys_per_query(time, time, mask, causal, x.device)
            q = with_length_term(q, self.rule, n_keys, getattr(self, "ssmax_s", None))
        return q, k, v, self.factor()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool | None = None) -> torch.Tensor:
        causal = self.causal if causal is None else causal
        q, k, v, factor = self.project(x, mask, causal)
        batch, time, _ = x.shape
        if self._capture is not None:
            mask = combined_mask(mask, causal, time, time, x.device)
            out, probs = dense_attention(q, k, v, factor, mask, "stable")
            self._record(q, k, factor, mask, probs)
        else:
            out = _attend(q, k, v, factor, mask, causal, self.impl, False, self.block_size)
        return self.w_o(out.transpose(1, 2).reshape(batch, time, self.n_heads * self.d_head))

    @torch.no_grad()
    def row_weights(self, x: torch.Tensor, rows: slice, mask: torch.Tensor | None = None,
                    causal: bool | None = None) -> torch.Tensor:
        """The attention probabilities of the query rows ``rows`` only, (B, H, R, T): what the
        forward pass computes for them, without the (T, T) matrix of every row."""
        return self._rows(x, rows, mask, causal)[0]

    def row_output(self, x: torch.Tensor, rows: slice, mask: torch.Tensor | None = None,
                   causal: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The module's output at the query rows ``rows`` only, (B, R, d_model), and their attention
        probabilities (B, H, R, T): the forward pass's rows, with R rows of scores, softmax and output
        projection, not T (q, k and v are still projected at every position), and with gradients, so a
        loss scored on those rows alone trains through it."""
        probs, v = self._rows(x, rows, mask, causal)
        out = probs @ v
        batch, _, picked_rows, _ = out.shape
        return self.w_o(out.transpose(1, 2).reshape(batch, picked_rows, self.n_heads * self.d_head)), probs

    def _rows(self, x, rows: slice, mask, causal: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The probabilities of the query rows ``rows`` and every position's v."""
        causal = self.causal if causal is None else causal
        q, k, v, factor = self.project(x, mask, causal)
        time = x.shape[1]
        full = combined_mask(mask, causal, time, time, x.device)
        picked = None if full is None else full[..., rows, :]
        return stable_softmax(scores(q[..., rows, :], k, factor), picked), v

    def _record(self, q, k, factor, mask, probs) -> None:
        logits = scores(q, k, factor)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("nan"))
        keep = (lambda t: t.detach()) if self._capture.detach else (lambda t: t)
        self._capture.observations[self._capture_name] = Observation(
            q=keep(q), k=keep(k), logits=keep(logits), probs=keep(probs),
            factor=float(factor.detach() if isinstance(factor, torch.Tensor) else factor), mask=mask)


@contextlib.contextmanager
def capture(model: nn.Module, detach: bool = True):
    """Record q, k, logits (masked entries NaN) and probabilities of every ScaledAttention
    inside ``model`` during the ``with`` block.  Outside it the modules run their normal path.

    A model with no ScaledAttention inside (a transformers model, ``nn.MultiheadAttention``, any
    module) is read from the operations it runs (:mod:`attnscale.probing.anymodule`): each
    attention call is kept under the name of the module that made it ("#2" for its second call),
    with q and k as the call received them, the logits (the call's own factor times q·k, masked
    entries -inf) and the probabilities, all filled in when the block ends.

    >>> with capture(model) as seen:
    ...     model(x)
    >>> seen["blocks.0.attn"].probs.shape
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"capture needs an nn.Module, got {type(model).__name__}")
    record = Capture(detach=detach)
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, ScaledAttention)]
    if not modules:
        yield from _capture_any(model, record)
        return
    for name, module in modules:
        module._capture, module._capture_name = record, name or "attn"
    try:
        yield record
    finally:
        for _, module in modules:
            module._capture = None


def _capture_any(model: nn.Module, record: Capture):
    from .probing.anymodule import RecordingTooLarge, recording

    with recording(model, keep_tensors=True) as recorder:
        try:
            yield record
        except RecordingTooLarge as error:
            raise UserError(str(error)) from None
    probed = recorder.finished()
    if not probed.tensors:
        raise UserError(f"{type(model).__name__} made no attention call to capture: " + "; ".join(probed.unread))
    for module, seen in probed.tensors:
        name, count = module or "attn", 1
        while name in record.observations:
            count += 1
            name = f"{module or 'attn'}#{count}"
        record.observations[name] = seen
