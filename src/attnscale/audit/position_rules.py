"""The long-context factors of the families that scale attention by the query's position: each a formula
read from the config (a function of the config, the layer, the position p and the layer's module), and the
:class:`PositionFamily` record that ties a family to its formula, the input it reads the position from and the
line of the installed source the formula is read from.  The entries themselves are in :mod:`.known`; the
measurement in :mod:`.positions`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

# --------------------------------------------------------------------------- the formulas, from the configs

def llama4_temperature(config, layer: int, p: int, module=None) -> float:
    """1 + attn_scale ln(1 + floor((p + 1) / floor_scale)) on layers without RoPE (no_rope_layers[i] == 0)."""
    if not getattr(config, "attn_temperature_tuning", False) or config.no_rope_layers[layer]:
        return 1.0
    return 1.0 + config.attn_scale * math.log1p(math.floor((p + 1) / config.floor_scale))


def llama4_scaling_beta(config, layer: int, p: int, module=None) -> float:
    """1 + beta ln(1 + floor(p / original_max_position_embeddings)), beta = rope_parameters' llama_4_scaling_beta."""
    rope = config.rope_parameters or {}
    beta, original = rope.get("llama_4_scaling_beta"), rope.get("original_max_position_embeddings")
    if not beta or not original:
        return 1.0
    return 1.0 + beta * math.log1p(math.floor(p / original))


def learned_log_position(config, layer: int, p: int, module=None) -> list[float]:
    """s_h ln(p + 1) + b_h per head, s and b the layer's own parameters."""
    scaling = module.softmax_scaling
    return [float(s) * math.log(p + 1) + float(b) for s, b in zip(scaling.scale.detach().tolist(), scaling.bias.detach().tolist())]


def beam_scalable_softmax(config, layer: int, p: int, module=None) -> float:
    """(1 + (p + 1) / 2048) ** 0.1 on the full-attention layers (those without RoPE); 2048 and 0.1 are in the source."""
    if (config.rope_parameters or {}).get(config.layer_types[layer]) is not None:
        return 1.0
    return (1.0 + (p + 1) / 2048) ** 0.1


def inkling_log_scaling(config, layer: int, p: int, module=None) -> float:
    """1 + log_scaling_alpha ln(max((p + 1) / log_scaling_n_floor, 1)) on the full (not sliding) layers; off when
    log_scaling_n_floor is None."""
    if config.log_scaling_n_floor is None or config.layer_types[layer] == "hybrid_sliding":
        return 1.0
    return 1.0 + config.log_scaling_alpha * math.log(max((p + 1) / config.log_scaling_n_floor, 1.0))


# --------------------------------------------------------------------------- a family's record (its entries: known.py)

@dataclass(frozen=True)
class PositionFamily:
    family: str                   # the model_type
    config_class: str             # the transformers config class
    sizes: dict                   # tiny sizes beside the config's own defaults (the factor's fields keep theirs)
    reads: str                    # "position_ids" or "cache": where the factor reads the query's position
    formula: Callable             # (config, layer index, p, attention module) -> m(p), a number or one per head
    formula_text: str
    layers: str                   # which layers the factor applies to, in words
    module: str                   # the installed modeling file, relative to transformers/models
    quote: str                    # a line of that file the formula is read from (found by its text)
    enable: dict = field(default_factory=dict)  # fields set to switch on a factor the default config leaves off
    learned: str = ""             # for a learned factor: how the audit sets its parameters (random init leaves them trivial)
    draw_learned: Callable | None = None  # (model, generator) -> None: sets them so, where ``learned`` says



def draw_log_position(model, generator: torch.Generator) -> None:
    """Mistral Large 4's per-head s_h and b_h drawn from N(0, 0.05^2) and 1 + N(0, 0.1^2): its random init leaves
    the factor near 1 at every position."""
    with torch.no_grad():
        for module in model.modules():
            scaling = getattr(module, "softmax_scaling", None)
            if scaling is not None:
                scaling.scale.copy_(torch.randn(scaling.scale.shape, generator=generator) * 0.05)
                scaling.bias.copy_(1 + torch.randn(scaling.bias.shape, generator=generator) * 0.1)
