"""What a config declares for the logit of a cosine-1 pair where q and k are normalised (QK-norm).

A norm fixes |q| and |k|, so the whole path's factor on q.k is no longer the reading: the audit reads the logit of a
pair at cosine 1 (:func:`.whole_path.summarize`, ``cosine_temperature``).  The config declares it as the layer's
factor on q.k times the lengths its norms give a vector and the multipliers its code applies after them:

    declared = path factor x (gain_q sqrt(d_k)) x (gain_k sqrt(d_k)) x multipliers after the norm

where gain is the root-mean-square output of the norm module on a vector of root-mean-square 1 (its weight: 1 for
an RMSNorm at init, 1 + 0 for Gemma's); the path factor is the declared one (head_dim^-0.5, Gemma's 1, a
query_pre_attn_scalar, a RoPE attention factor).  The norms' eps moves the reading by up to about 0.5% at the
designs' small size, hence :data:`COSINE_TOL`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

COSINE_TOL = 1e-2  # a cosine-1 logit agrees with the declared one within 1% (the norms' eps at the designs' size)

# DeepSeek V4: q_b_norm on the queries, kv_norm on the one latent its keys and values are cut from
Q_NORMS = ("q_norm", "query_norm", "q_layernorm", "q_ln", "norm_q", "query_layernorm", "q_norm_layer", "q_b_norm")
K_NORMS = ("k_norm", "key_norm", "k_layernorm", "k_ln", "norm_k", "key_layernorm", "k_norm_layer", "kv_norm")
SHARED_NORMS = ("qk_norm",)  # one norm module for both (Muse Spark's)


@dataclass(frozen=True)
class Multiplier:
    """What the attention code multiplies onto q or k after its norm, found by the line it quotes: a config field,
    or (``learned``, where a field cannot say it) a value the layer's own parameters hold, on the head's first
    coordinate (the one the designs use), median over heads."""

    name: str  # the config field, or the parameters' expression as the code writes it
    role: str  # "q" or "k"
    quote: str  # the text of the line that applies it, as the installed source has it
    learned: Callable[[torch.nn.Module], float] | None = None


def ngpt_query_scale(module) -> float:
    """Dory's nGPT query scale (sqk x sqk_scale)^2 per head and channel, on the first channel."""
    scale = (module.sqk.detach().double() * module.sqk_scale).view(-1, module.head_dim).square()
    return float(scale[:, 0].median())


# a family differs by a value and a line, not by a branch: add an entry where a new family scales after its norm
MULTIPLIERS = (
    Multiplier("qk_scale_factor", "q", "query_states = self.qk_norm(query_states) * self.qk_scale_factor"),
    Multiplier("(sqk x sqk_scale)^2", "q", "query_states = query_states * query_scale.square()", ngpt_query_scale),
)


def norm_modules(module, model=None) -> tuple[torch.nn.Module | None, torch.nn.Module | None]:
    """The layer's q and k norm modules, by the names transformers gives them (None where it has none); a layer that
    reuses another's keys (Gemma 3n's kv-shared layers) has that layer's k norm, found in ``model``."""
    def named(owner, names):
        return next((child for name in names if isinstance(child := getattr(owner, name, None), torch.nn.Module)
                     and not isinstance(child, torch.nn.Identity)), None)

    shared = named(module, SHARED_NORMS)
    k_norm = named(module, K_NORMS) or shared
    if k_norm is None and model is not None and getattr(module, "is_kv_shared_layer", False):
        # modeling_gemma3n.py: "we reuse the same keys/values states as the last non-sharing layer" of its type,
        # the one that stores them (kv_sharing_modes "store")
        source = next((other for other in model.modules() if type(other) is type(module)
                       and getattr(other, "store_full_length_kv", False)
                       and getattr(other, "layer_type", None) == getattr(module, "layer_type", None)), None)
        k_norm = named(source, K_NORMS) if source is not None else None
    return named(module, Q_NORMS) or shared, k_norm


def gain(norm: torch.nn.Module, d_k: int) -> float | None:
    """Root-mean-square output of ``norm`` on a vector of alternating +-1 (root mean square 1, mean 0, so that a
    LayerNorm keeps it) as wide as the norm's weight, else d_k; None where the module does not take it."""
    weight = getattr(norm, "weight", None)
    width = int(weight.shape[-1]) if isinstance(weight, torch.Tensor) and weight.dim() >= 1 else d_k
    probe = torch.ones(1, width)
    probe[:, 1::2] = -1
    try:
        with torch.no_grad():
            out = norm(probe.to(weight.dtype if isinstance(weight, torch.Tensor) else torch.float32))
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(out, torch.Tensor) or out.shape[-1] != width:
        return None
    return float(out.double().pow(2).mean().sqrt())


@dataclass
class CosineDeclared:
    value: float
    text: str  # how it is made, for the finding
    fields: dict


def declared_cosine(module, config, code: str, path_factor: float | None, d_k: int,
                    model=None) -> CosineDeclared | None:
    """The cosine-1 logit the config declares for a layer with q and k norms; None where the layer has no
    named norm modules or no declared factor."""
    if path_factor is None:
        return None
    q_norm, k_norm = norm_modules(module, model)
    if q_norm is None or k_norm is None:
        return None
    gains = gain(q_norm, d_k), gain(k_norm, d_k)
    if None in gains:
        return None
    value = path_factor * d_k * gains[0] * gains[1]
    fields = {"q norm gain": round(gains[0], 6), "k norm gain": round(gains[1], 6)}
    parts = [f"factor {path_factor:.4g} x |q| {gains[0] * d_k ** 0.5:.4g} x |k| {gains[1] * d_k ** 0.5:.4g}"]
    for multiplier in MULTIPLIERS:
        if multiplier.quote not in code:
            continue
        try:
            factor = multiplier.learned(module) if multiplier.learned else getattr(config, multiplier.name, None)
        except (AttributeError, RuntimeError, TypeError, ValueError):  # the layer lacks what the entry reads
            continue
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            value *= factor
            fields[multiplier.name] = factor
            parts.append(f"{multiplier.name} {factor:.4g} on {multiplier.role}")
    return CosineDeclared(value, " x ".join(parts), fields)
