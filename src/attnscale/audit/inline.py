"""The whole path of families that compute attention inline (no attention function to intercept).

Older families in transformers (GPT-Neo, BLOOM, DeBERTa, BigBird, XLM, ...) compute the
softmax inside their attention module.  Their q and k projections are still designed as
in :mod:`.whole_path`, and the probabilities are read from the attention weights the module
returns with ``output_attentions=True`` (a forward hook on the module that owns the q and
k projections picks out the (B, H, T_q, T_k) tensor whose rows sum to 1).  Only layouts
with separate q and k projections are used: with no attention function to check a fused
layout against, a guess could not be told from a measurement.
"""

from __future__ import annotations

import math

import torch

from ..errors import UserError
from . import whole_path
from .declared import clip_of

HEAD_COUNT_NAMES = ("num_attention_heads", "num_heads", "n_heads", "n_head", "num_attention_heads_per_partition")


def head_count(module, config) -> int | None:
    for owner in (module, config):
        for name in HEAD_COUNT_NAMES:
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def attention_modules(model) -> list[tuple[str, torch.nn.Module, list[whole_path.Layout]]]:
    """(name, module, candidate layouts) for every module that owns q and k projections (separate,
    or fused with as many key heads as query heads, one, or the config's key/value heads)."""
    found = []
    config = model.config
    for name, module in model.named_modules():
        heads = head_count(module, config)
        if heads is None:
            continue
        q_mod, k_mod = whole_path.child(module, whole_path.Q_NAMES), whole_path.child(module, whole_path.K_NAMES)
        layouts = []
        if q_mod is not None and k_mod is not None:
            q_out, k_out = whole_path.out_features(q_mod), whole_path.out_features(k_mod)
            if q_out % heads == 0 and k_out % (q_out // heads) == 0:
                d = q_out // heads
                layouts.append(whole_path.Layout("separate (weights read)", [whole_path.Block(q_mod, 0, heads, d, 0, d)],
                                            [whole_path.Block(k_mod, 0, k_out // d, d, 0, d)]))
        elif whole_path.child(module, whole_path.FUSED_NAMES) is not None:
            d = getattr(config, "hidden_size", 0) // heads
            kv_heads = {heads, 1, getattr(config, "num_key_value_heads", None) or heads}
            for key_heads in sorted(kv_heads, reverse=True):
                for layout in whole_path.candidate_layouts(module, (1, heads, 1, d), (1, key_heads, 1, d)):
                    layout.name += " (weights read)"
                    layouts.append(layout)
        if layouts:
            found.append((name, module, layouts))
    return found


def weights_hook(store: list, batch: int, tokens: int):
    def hook(module, args, output):
        items = output if isinstance(output, (tuple, list)) else (output,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.dim() == 4 and item.shape[0] == batch and \
                    item.shape[-1] == tokens and item.shape[-2] == tokens:
                sums = item.detach().double().sum(dim=-1)
                if torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
                    store.append(item.detach())
                    return
    return hook


def designed_weights(model, layouts: dict, units: dict, designs, tokens: int, far: int) -> dict:
    """{module id: (B, H, T, T) weights} for one designed forward pass; ``layouts`` maps module
    ids to (module, Layout)."""
    handles = whole_path.install({key: layout for key, (_, layout) in layouts.items()}, units, designs, tokens,
                            next(model.parameters()).dtype)
    captured = {key: [] for key in layouts}
    handles += [module.register_forward_hook(weights_hook(captured[key], len(designs), tokens))
                for key, (module, _) in layouts.items()]
    vocab = getattr(model.config, "vocab_size", None) or 100
    try:
        inputs = whole_path.path_inputs(model, designs, tokens, far, vocab)
        with torch.no_grad():
            model(**inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return {key: found_weights[0] for key, found_weights in captured.items() if found_weights}


def plausible(summary: dict) -> bool:
    """A layout whose designs read back as a finite factor, linear or normalised in q and k."""
    return math.isfinite(summary["factor"]) and summary["factor"] != 0 and summary["form"] != "non-linear"


def rows_from_weights(weights: torch.Tensor) -> torch.Tensor:
    """log(p_0 / p_1) as (B, T_q, H) from attention weights (B, H, T_q, T_k)."""
    p0, p1 = weights[..., 0].double(), weights[..., 1].double()
    ok = (p0 > 1e-30) & (p1 > 1e-30)
    rows = torch.where(ok, torch.log(p0.clamp_min(1e-30)) - torch.log(p1.clamp_min(1e-30)),
                       torch.full_like(p0, float("nan")))
    return rows.transpose(1, 2)


def inline_rows(model, declared_of, tokens: int, longer_tokens: int, far: int) -> list[dict]:
    """Layer rows (as audit.layer_rows makes them) with the whole path read from the weights."""
    if getattr(model.config, "is_encoder_decoder", False):
        raise UserError("an encoder-decoder without an attention function: its weights cannot be told apart by layer")
    found = attention_modules(model)
    if not found:
        raise UserError("no attention function to intercept and no module with q and k projections")
    units = whole_path.inside_clip({id(module): 0.1 * math.sqrt(options[0].q[0].size) for _, module, options in found},
                              clip_of(model.config))
    positions = whole_path.accepts(model, "position_ids")
    pending = {id(module): (module, list(options)) for _, module, options in found}
    chosen, main_rows = {}, {}
    while pending:
        trial = {key: (module, options.pop(0)) for key, (module, options) in pending.items()}
        try:
            main = designed_weights(model, trial, units, whole_path.DESIGNS, tokens, far)
        except (RuntimeError, ValueError, IndexError):
            main = {}
        for key, (module, layout) in trial.items():
            if key in main:
                rows = rows_from_weights(main[key])
                if layout.name.startswith("separate") or plausible(whole_path.summarize(rows, whole_path.logit_unit(units, key), None, positions)):
                    chosen[key], main_rows[key] = (module, layout), rows
                    pending.pop(key)
        pending = {key: item for key, item in pending.items() if item[1]}
    try:
        longer = designed_weights(model, chosen, units, whole_path.LENGTH_DESIGNS, longer_tokens, far) if chosen else {}
    except (RuntimeError, ValueError, IndexError):
        longer = {}
    rows = []
    for index, (name, module, _) in enumerate(found):
        key = id(module)
        if key not in chosen:
            continue
        layout = chosen[key][1]
        summary = whole_path.summarize(main_rows[key], whole_path.logit_unit(units, key),
                                  rows_from_weights(longer[key]) if key in longer else None, positions)
        summary["layout"] = layout.name
        d = layout.q[0].size
        rows.append({"name": name, "layer": index, "d_k": d, "declared": declared_of(module, index, d).to_dict(),
                     "backends": {"eager": {"function": {"factor": None, "nonlinearity": "not reachable (inline "
                                                                                       "attention)", "cap": None},
                                            "path": summary}}})
    if not rows:
        raise UserError("no attention weights came back with output_attentions=True")
    return rows
