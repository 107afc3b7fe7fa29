"""The audit at far positions: installed families whose attention factor changes with the query's position.

Since 2022 long-context models multiply the queries by a factor that grows with the position p of
the query (Llama 4's attention temperature on its NoPE layers, Ministral 3 and Mistral 4's
``llama_4_scaling_beta``, Mistral Large 4's learned s_h ln(p + 1) + b_h, Beam's scalable softmax,
Inkling's log scaling, in Inkling 2 and its loop variant too).  The main audit sees such a factor only at the positions of a short probe;
here each family's factor is measured at far positions (:data:`POSITIONS`, up to 1,048,576) and
judged against what its config declares.

Each family is one :class:`PositionFamily` in :data:`FAMILIES`: data (tiny sizes, the input the
factor reads its position from, the layers it applies to, the formula read from the config, and a
line of the installed source that the formula comes from, found by its text at run time), not a
branch of code.  The measurement is the same for all:

* one token (the same id) is fed at position 0 and at position p, through the input the family
  reads: ``position_ids`` (the model's own forward, no cache), or a cache holding p earlier
  tokens whose keys are masked out (Llama 4 and Inkling count the tokens in the cache and ignore
  ``position_ids``).  With the past masked out, every earlier layer's output is the same at both
  positions, so each layer's query differs only by the factor;
* each attention call's query is read as the attention function receives it (after projections,
  RoPE, norms and the factor), and the factor at p relative to position 0 is the ratio of the
  query's norms, per layer and head (RoPE rotates, it does not stretch);
* the declared ratio m(p) / m(0) comes from the config (and, for learned factors, the layer's
  parameters) by the family's formula; a family agrees when every layer, head and position is
  within :data:`TOLERANCE`.

Nothing here writes a file or prints.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

POSITIONS = (1, 8192, 65536, 1_048_576)
TOLERANCE = 1e-3   # relative; the queries are float32 and the factor is applied in float32 or float64
TOKEN_ID = 5


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


# --------------------------------------------------------------------------- the families, as data

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


_MOE = dict(n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1, moe_intermediate_size=32)
_MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)
_SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64)
_INKLING = dict(**_SMALL, **_MOE, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16, sliding_window_size=8,
                rel_extent=8, d_rel=4, layer_types=["hybrid", "hybrid_sliding"])  # a full layer, then a sliding one

FAMILIES: tuple[PositionFamily, ...] = (
    PositionFamily(
        "llama4_text", "Llama4TextConfig",
        dict(**_SMALL, intermediate_size_mlp=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, num_local_experts=2, num_experts_per_tok=1, no_rope_layers=[1, 0], attention_chunk_size=None),
        "cache", llama4_temperature, "1 + attn_scale ln(1 + floor((p + 1) / floor_scale))", "layers without RoPE",
        "llama4/modeling_llama4.py",
        "torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale)) * self.attn_scale + 1.0"),
    PositionFamily(
        "ministral3", "Ministral3Config",
        dict(**_SMALL, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16),
        "position_ids", llama4_scaling_beta, "1 + beta ln(1 + floor(p / original_max_position_embeddings))",
        "every layer", "ministral3/modeling_ministral3.py",
        "scaling = 1 + beta * torch.log(1 + torch.floor(positions_ids / max_position_embeddings))"),
    PositionFamily(
        "mistral4", "Mistral4Config",
        dict(**_SMALL, **_MOE, **_MLA, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
             q_lora_rank=16, first_k_dense_replace=1),
        "position_ids", llama4_scaling_beta, "1 + beta ln(1 + floor(p / original_max_position_embeddings))",
        "every layer", "mistral4/modeling_mistral4.py",
        "scaling = 1 + beta * torch.log(1 + torch.floor(positions_ids / max_position_embeddings))"),
    PositionFamily(
        "mistral_large4_text", "MistralLarge4TextConfig",
        dict(**_SMALL, **_MOE, **_MLA, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
             first_k_dense_replace=2, index_topk=4, index_head_dim=16, index_n_heads=2, no_rope_layers=[1, 0]),
        "position_ids", learned_log_position, "s_h ln(p + 1) + b_h, learned per head", "every layer",
        "mistral_large4/modeling_mistral_large4.py", "log_pos = (position_ids + 1).float().log()",
        learned="s_h and b_h drawn from N(0, 0.05^2) and 1 + N(0, 0.1^2) (the random init leaves the factor near 1)"),
    PositionFamily(
        "beam", "BeamConfig",
        dict(**_SMALL, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, num_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, sliding_window=8),
        "position_ids", beam_scalable_softmax, "(1 + (p + 1) / 2048)^0.1", "full-attention layers (no RoPE)",
        "beam/modeling_beam.py", "torch.exp(0.1 * torch.log1p((position_ids.float() + 1) / 2048))"),
    PositionFamily(
        "inkling_text", "InklingTextConfig",
        _INKLING,
        "cache", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))", "full (not sliding) layers",
        "inkling/modeling_inkling.py", "(effective_n / self.config.log_scaling_n_floor).clamp(min=1.0)",
        enable={"log_scaling_n_floor": 8192}),
    PositionFamily(
        "inkling2_text", "Inkling2TextConfig",
        _INKLING,
        "position_ids", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))",
        "full (not sliding) layers", "inkling2/modeling_inkling2.py",
        "((position_ids + 1).float() / self.log_scaling_n_floor).clamp(min=1.0)"),
    PositionFamily(
        "inkling2_loop_text", "Inkling2LoopTextConfig",
        _INKLING,
        "position_ids", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))",
        "full (not sliding) layers", "inkling2_loop/modeling_inkling2_loop.py",
        "((position_ids + 1).float() / self.log_scaling_n_floor).clamp(min=1.0)"),
)


def family_named(name: str) -> PositionFamily:
    for entry in FAMILIES:
        if entry.family == name:
            return entry
    raise ValueError(f"no position-dependent family {name!r}; accepted: {', '.join(e.family for e in FAMILIES)}")


# --------------------------------------------------------------------------- building and feeding

def installed(entry: PositionFamily) -> bool:
    import transformers

    return hasattr(transformers, entry.config_class)


def source_line(entry: PositionFamily) -> str | None:
    """'models/<file>:<line>: <the quoted line>' in the installed transformers, or None if the quote is not there."""
    import transformers

    path = Path(inspect.getfile(transformers)).parent / "models" / entry.module
    if not path.is_file():
        return None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if entry.quote in line:
            return f"models/{entry.module}:{number}: {line.strip()}"
    return None


def build(entry: PositionFamily, seed: int = 0, **overrides):
    """The family's base model at the tiny sizes (``overrides`` win), eval mode, eager attention; a learned
    factor's parameters drawn as ``entry.learned`` says."""
    import transformers

    from .families import build as build_model

    config = getattr(transformers, entry.config_class)(**{**entry.sizes, **entry.enable, **overrides})
    model = build_model(config, seed)
    if entry.learned:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for module in model.modules():
                scaling = getattr(module, "softmax_scaling", None)
                if scaling is not None:
                    scaling.scale.copy_(torch.randn(scaling.scale.shape, generator=generator) * 0.05)
                    scaling.bias.copy_(1 + torch.randn(scaling.bias.shape, generator=generator) * 0.1)
    return model


def cache_of(model, p: int):
    """A cache holding ``p`` earlier tokens (zero keys and values; the attention mask hides them), shaped as the
    model's own cache after one token: each layer keeps what it would keep (a sliding layer, its window)."""
    from transformers import DynamicCache

    with torch.no_grad():
        own = model(input_ids=torch.tensor([[TOKEN_ID]]), use_cache=True).past_key_values
    cache = DynamicCache(config=model.config)
    for index, layer in enumerate(own.layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or keys.dim() != 4:
            continue
        kept = min(p, getattr(cache.layers[index], "sliding_window", None) or p)
        cache.update(keys.new_zeros(*keys.shape[:2], kept, keys.shape[-1]),
                     values.new_zeros(*values.shape[:2], kept, values.shape[-1]), index)
        if hasattr(cache.layers[index], "cumulative_length"):
            cache.layers[index].cumulative_length = p
    return cache


def inputs_at(model, entry: PositionFamily, p: int) -> dict:
    """One token at position ``p``, through the input the family reads."""
    ids = torch.tensor([[TOKEN_ID]])
    if entry.reads == "position_ids":
        return {"input_ids": ids, "position_ids": torch.tensor([[p]])}
    if p == 0:
        return {"input_ids": ids}
    mask = torch.zeros(1, p + 1, dtype=torch.long)
    mask[0, -1] = 1
    takes = inspect.signature(model.forward).parameters
    cache_name = "cache" if "cache" in takes else "past_key_values"  # transformers renames it family by family
    return {"input_ids": ids, cache_name: cache_of(model, p), "attention_mask": mask, "use_cache": True}


def query_norms(model, entry: PositionFamily, p: int) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    """(attention module, per-head norm of the last query) for each attention call of one forward pass."""
    from ..probing.intercept import run_attention

    _, calls = run_attention(model, inputs_at(model, entry, p))
    return [(call.module, call.query[0, :, -1].double().norm(dim=-1)) for call in calls
            if getattr(call.module, "layer_idx", None) is not None and call.query.shape[-2] > 0]


# --------------------------------------------------------------------------- measuring and judging

def per_head(value, heads: int) -> torch.Tensor:
    return torch.as_tensor(value, dtype=torch.float64).expand(heads) if not isinstance(value, list) \
        else torch.tensor(value, dtype=torch.float64)


def ratio_declared(entry: PositionFamily, model, module, p: int, heads: int) -> torch.Tensor:
    """|m(p) / m(0)| per head for one attention module, from the config (a query norm sees the factor's size, not
    its sign)."""
    m_p = per_head(entry.formula(model.config, module.layer_idx, p, module), heads)
    m_0 = per_head(entry.formula(model.config, module.layer_idx, 0, module), heads)
    return (m_p / m_0).abs()


def measure(entry: PositionFamily, positions=POSITIONS, seed: int = 0, model=None) -> dict:
    """One row: per position, the measured and declared factor relative to position 0 (min and max over layers
    and heads), the largest relative error, and the verdict; ``not measured`` with the reason when the family
    cannot be built or fed."""
    row = {"family": entry.family, "formula": entry.formula_text, "layers": entry.layers, "reads": entry.reads,
           "source": source_line(entry), "enabled": dict(entry.enable), "learned": entry.learned,
           "positions": list(positions)}
    if not installed(entry):
        return {**row, "verdict": "not measured", "reason": f"{entry.config_class} is not in this transformers"}
    try:
        model = model if model is not None else build(entry, seed)
        base = query_norms(model, entry, 0)
        applies = {module.layer_idx for module, norm in base
                   if any(abs(m - 1) > TOLERANCE
                          for m in ratio_declared(entry, model, module, max(positions), norm.numel()).tolist())}
        measured, declared, errors = {}, {}, []
        for p in positions:
            ratios, expected = [], []
            for (module, norm), (_, norm0) in zip(query_norms(model, entry, p), base, strict=True):
                want = ratio_declared(entry, model, module, p, norm.numel())
                errors.append(float(((norm / norm0 - want).abs() / want).max()))
                if module.layer_idx in applies:
                    ratios.append(norm / norm0)
                    expected.append(want)
            if ratios:
                ratio, want = torch.cat(ratios), torch.cat(expected)
                measured[p] = [float(ratio.min()), float(ratio.max())]
                declared[p] = [float(want.min()), float(want.max())]
    except Exception as error:  # noqa: BLE001 - any failure to build or feed a family is reported with its reason
        return {**row, "verdict": "not measured", "reason": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    error = max(errors)
    row["layers_scaled"] = sorted(applies)
    return {**row, "measured": {str(p): v for p, v in measured.items()},
            "declared": {str(p): v for p, v in declared.items()}, "max_error": error,
            "verdict": "agrees" if error <= TOLERANCE else "differs",
            "reason": "" if error <= TOLERANCE else f"measured differs from the config's formula by up to {error:.3g}"}


def audit_positions(positions=POSITIONS, seed: int = 0, progress: Callable[[float, str], None] | None = None) -> list[dict]:
    """One row per family of :data:`FAMILIES`, in order, on one torch thread (the same numbers in any process)."""
    from ..probing.loading import quiet_transformers
    from ..threads import torch_threads

    rows = []
    # transformers' notes on the tiny configs (an eos id beyond the tiny vocabulary, a renamed cache argument)
    # say nothing of the factor
    with torch_threads(1), quiet_transformers():
        for index, entry in enumerate(FAMILIES):
            if progress:
                progress(index / len(FAMILIES), f"far positions: {entry.family}")
            rows.append(measure(entry, positions, seed))
    return rows


def table(rows: list[dict]) -> list[dict]:
    """The report's table: per family, the factor at each position relative to position 0, as measured (and as
    declared where they differ), the formula and its source line."""
    def shown(pair) -> str:
        low, high = pair
        return f"{low:.4g}" if abs(high - low) <= TOLERANCE * abs(high) else f"{low:.4g}-{high:.4g}"

    out = []
    for row in rows:
        line = {"family": row["family"], "formula": row["formula"], "layers": row["layers"],
                "position from": row["reads"]}
        for p in row["positions"]:
            line[f"p = {p:,}"] = shown(row["measured"][str(p)]) if "measured" in row else ""
        notes = []
        if row["enabled"]:
            notes.append("switched on here: " + ", ".join(f"{k} = {v}" for k, v in row["enabled"].items()) +
                         " (the default config leaves it off)")
        if row["learned"]:
            notes.append(row["learned"])
        if row.get("reason"):
            notes.append(row["reason"])
        line.update({"verdict": row["verdict"], "source": row["source"] or "quoted line not found", "notes": "; ".join(notes)})
        out.append(line)
    return out


def with_sizes(entry: PositionFamily, **sizes) -> PositionFamily:
    """The entry with some sizes or factor fields changed (tests move thresholds within a short probe)."""
    return dataclasses.replace(entry, sizes={**entry.sizes, **sizes})
