"""The scale probe: the factor an attention implementation applies to QK^T, measured.

``infer_scale(attn_fn, d_k)``
    finds the factor a black-box ``attn_fn(q, k, v, mask=None)`` applies to QK^T.  The probe
    puts two keys whose dot products with the query differ by a known gap g, and values that
    read out their probabilities (v_0 = e_0, v_1 = e_1, so out_0 / out_1 = p_0 / p_1):

        log(out_0 / out_1) = factor * g + (b_0 - b_1),

    where b is whatever the implementation adds to the logits (a mask, a position bias).
    Measuring at g = 0, G and 2G cancels b and checks that the logits are linear in q.k.
    Max subtraction, other keys and masks do not change the ratio p_0 / p_1, so the probe
    is blind to them; rows where a mask hides one of the two keys are skipped.  A softmax
    over one key ignores any factor, which is why there are always two.

``probe_model(model)``
    does the same inside a Hugging Face model (BERT-, GPT-2-, T5- and Llama-like, and
    any model whose attention goes through transformers' ``eager_attention_forward``):
    during one forward pass every attention call is intercepted and the model's own eager
    function is called again, with the same module, mask and keyword arguments (scaling,
    position bias, ...), on the designed q, k, v.  So the factor is measured on the code
    that runs, not read from an attribute.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from .. import scaling
from ..errors import UserError
from ..threads import torch_threads
from .intercept import AttentionCall, model_inputs, run_attention
from .loading import quiet_transformers
from .thresholds import THRESHOLDS

PROBE_TOKENS = 7  # odd, so that it cannot be mistaken for a head count in (B, T, H, d)


@dataclass
class ScaleEstimate:
    """The factor an attention implementation applies to QK^T, as measured."""

    factor: float
    d_k: int
    expected: float  # 1/sqrt(d_k)
    label: str
    linear: bool  # logits linear in q.k (the factor does not depend on the gap)
    spread: float  # (max - min) / |median| of the per-row (and per-head) estimates
    rows: int

    @property
    def exponent(self) -> float | None:
        """A with factor = d_k^-A (None when d_k = 1 or the factor is not positive)."""
        if self.d_k < 2 or not self.factor > 0:
            return None
        return -math.log(self.factor) / math.log(self.d_k)

    def to_dict(self) -> dict:
        return {**asdict(self), "exponent": self.exponent}


NO_SCALING = "no scaling"  # the label of a factor of 1


def label_factor(factor: float, d_k: int, linear: bool = True, rel_tol: float = THRESHOLDS["factor_rel_tol"]) -> str:
    """Name the factor: "matches 1/sqrt(d_k)", "looks like 1/d_k", "no scaling", or "other"."""
    if not math.isfinite(factor):
        return "not measurable"
    if not linear:
        return "not a fixed factor (logits not linear in q.k)"
    for name, reference in (("matches 1/sqrt(d_k)", d_k**-0.5), ("looks like 1/d_k", 1.0 / d_k), (NO_SCALING, 1.0)):
        if abs(factor - reference) <= rel_tol * reference:
            return name
    if factor > 0 and d_k > 1:
        return f"other: {factor:.4g} = d_k^-{-math.log(factor) / math.log(d_k):.3g}"
    return f"other: {factor:.4g}"


def probe_tensors(q_shape, k_shape, v_shape, gap: float, dtype=torch.float64, device="cpu"):
    """q = e_0 on every row; key 0 = +gap/2 e_0, key 1 = -gap/2 e_0, other keys 0; v_0 = e_0,
    v_1 = e_1 (or v_1 = 0 when d_v = 1), other values 0.  So q.k_0 - q.k_1 = gap."""
    q = torch.zeros(q_shape, dtype=dtype, device=device)
    q[..., 0] = 1.0
    k = torch.zeros(k_shape, dtype=dtype, device=device)
    k[..., 0, 0] = gap / 2
    k[..., 1, 0] = -gap / 2
    v = torch.zeros(v_shape, dtype=dtype, device=device)
    v[..., 0, 0] = 1.0
    if v_shape[-1] > 1:
        v[..., 1, 1] = 1.0
    return q, k, v


def log_ratio(out: torch.Tensor, two_keys_only: bool) -> torch.Tensor:
    """log(p_0 / p_1) per output row (NaN where either probability is not readable)."""
    p0 = out[..., 0]
    p1 = (1.0 - p0) if two_keys_only else out[..., 1]
    tiny = 1e-30
    ok = (p0 > tiny) & (p1 > tiny) & torch.isfinite(p0) & torch.isfinite(p1)
    return torch.where(ok, torch.log(p0.clamp_min(tiny)) - torch.log(p1.clamp_min(tiny)), torch.full_like(p0, float("nan")))


def estimate_factor(measure: Callable[[float], torch.Tensor] | None, d_k: int, max_tries: int = 12,
                    measure_gaps: Callable[[list], list] | None = None) -> ScaleEstimate:
    """The factor from ``measure(gap) -> log(p_0/p_1)`` per row, at gaps 0, G, 2G
    (``measure_gaps([g, ...]) -> [rows, ...]`` instead measures the three gaps in one go).

    G adapts until factor * G is about 2 (probabilities far from 0, 1 and from each other).
    """
    if measure_gaps is None:
        measure_gaps = lambda gaps: [measure(g) for g in gaps]  # noqa: E731
    gap = 2.0 * math.sqrt(d_k)
    nan = float("nan")
    for _ in range(max_tries):
        base, one, two = (rows.double().flatten() for rows in measure_gaps([0.0, gap, 2 * gap]))
        f1, f2 = (one - base) / gap, (two - base) / (2 * gap)
        valid = torch.isfinite(f1) & torch.isfinite(f2)
        if not valid.any():
            gap /= 16.0  # a saturated softmax hides one key: probe with a smaller gap
            continue
        f1, f2 = f1[valid], f2[valid]
        factor = float(f1.median())
        if factor != 0 and not 0.25 <= abs(factor * gap) <= 8:
            gap = 2.0 / abs(factor)
            continue
        if factor == 0:
            gap *= 1e3
            if gap < 1e12:
                continue
        scale_ref = max(abs(factor), 1e-300)
        linear = bool(((f1 - f2).abs() <= 1e-3 * scale_ref + 1e-9).all())
        spread = float((f1.max() - f1.min()) / scale_ref)
        label = label_factor(factor, d_k, linear and spread <= THRESHOLDS["factor_rel_tol"])
        if linear and spread > THRESHOLDS["factor_rel_tol"]:
            label = "varies by head"
        return ScaleEstimate(factor, d_k, d_k**-0.5, label, linear, spread, int(valid.sum()))
    return ScaleEstimate(nan, d_k, d_k**-0.5, "not measurable", False, nan, 0)


def _first_output(result):
    return result[0] if isinstance(result, (tuple, list)) else result


def infer_scale(attn_fn: Callable, d_k: int, dtype=torch.float64) -> ScaleEstimate:
    """The factor a black-box ``attn_fn(q, k, v, mask=None)`` applies to QK^T.

    Calls ``attn_fn`` on (1, 1, 2, d_k) tensors (2 queries, 2 keys; the second query row sees
    both keys under a causal mask) and reads the probabilities from the output (a tensor, or
    a tuple whose first element is the output).  Returns a :class:`ScaleEstimate`.
    """
    d_k = scaling.check_d_k(d_k)
    if not callable(attn_fn):
        raise UserError(f"attn_fn must be callable as attn_fn(q, k, v, mask=None), got {attn_fn!r}")
    shape = (1, 1, 2, d_k)

    def measure(gap: float) -> torch.Tensor:
        q, k, v = probe_tensors(shape, shape, shape, gap, dtype)
        out = _first_output(attn_fn(q, k, v))
        return log_ratio(out.reshape(2, d_k), two_keys_only=d_k == 1)

    return estimate_factor(measure, d_k)


def probe_call(call: AttentionCall) -> ScaleEstimate:
    """The factor one intercepted attention call applies, measured with the model's own
    eager function, module, mask and arguments on designed q, k, v."""
    batch, heads, t_q, d_k = call.query.shape
    if call.key.shape[-2] < 2 or call.value.shape[-1] < 2:
        return ScaleEstimate(float("nan"), d_k, d_k**-0.5, "not measurable", False, float("nan"), 0)
    dtype = torch.float64 if call.query.dtype == torch.float32 else call.query.dtype

    def measure(gap: float) -> torch.Tensor:
        q, k, v = probe_tensors(call.query.shape, call.key.shape, call.value.shape, gap, dtype, call.query.device)
        out = _first_output(call.call(q, k, v))  # (B, T_q, H, d_v), the AttentionInterface contract
        return log_ratio(out, two_keys_only=False)

    return estimate_factor(measure, d_k)


@dataclass
class ModelProbe:
    model_type: str
    layers: list[dict] = field(default_factory=list)
    finding: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_probe(estimates: list[tuple[str, ScaleEstimate]]) -> str:
    """One finding for the model: the common label, or "varies by layer"."""
    labels = {est.label for _, est in estimates}
    factors = [est.factor for _, est in estimates if math.isfinite(est.factor)]
    if len(labels) == 1:
        label = labels.pop()
        if label.startswith("other") and factors and (max(factors) - min(factors)) > THRESHOLDS["factor_rel_tol"] * abs(
                factors[0]):
            return "varies by layer"
        return label
    return "varies by layer"


def probe_model(model: torch.nn.Module, n_tokens: int = PROBE_TOKENS) -> ModelProbe:
    """Measure the factor every attention layer of a transformers model applies to QK^T.

    Runs one forward pass on ``n_tokens`` token ids (encoder-decoder models get them as
    decoder input too) in eval mode, intercepting each eager attention call.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise UserError(f"probe_model needs a transformers model (nn.Module with .config), got {type(model).__name__}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 2:
        raise UserError(f"n_tokens must be an integer >= 2, got {n_tokens!r}")
    vocab = getattr(model.config, "vocab_size", None) or 100
    device = next(model.parameters()).device
    input_ids = ((torch.arange(n_tokens) * 7 + 3) % vocab).unsqueeze(0).to(device)
    estimates = []
    was_training = model.training
    model.eval()
    try:
        with quiet_transformers(), torch_threads(1):
            run_attention(model, model_inputs(model, input_ids), on_call=lambda c: estimates.append((c.name, probe_call(c))))
    finally:
        model.train(was_training)
    layers = [{"layer": name, **est.to_dict()} for name, est in estimates]
    return ModelProbe(getattr(model.config, "model_type", type(model).__name__), layers, summarize_probe(estimates))