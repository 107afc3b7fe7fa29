"""The audit at far positions: installed families whose attention factor changes with the query's position.

Since 2022 long-context models multiply the queries by a factor that grows with the position p of
the query (Llama 4's attention temperature on its NoPE layers, Ministral 3 and Mistral 4's
``llama_4_scaling_beta``, Mistral Large 4's learned s_h ln(p + 1) + b_h, Beam's scalable softmax,
Inkling's log scaling, in Inkling 2 and its loop variant too).  The main audit sees such a factor only at the positions of a short probe;
here each family's factor is measured at far positions (:data:`POSITIONS`, up to 1,048,576) and
judged against what its config declares.

Each family is the ``far`` of its entry in :mod:`.known`, a :class:`.position_rules.PositionFamily`:
data (tiny sizes, the input the factor reads its position from, the layers it applies to, the formula
read from the config, and a line of the installed source that the formula comes from, found by its
text at run time), not a branch of code.  The measurement is the same for all:

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
from enum import StrEnum
from pathlib import Path
from typing import Callable

import torch

from .known import KNOWN
from .position_rules import PositionFamily

POSITIONS = (1, 8192, 65536, 1_048_576)


class FarVerdict(StrEnum):
    """A far-position row's verdict: the factor measured at far positions against the config's own formula."""

    AGREES = "agrees"
    DIFFERS = "differs"
    NOT_MEASURED = "not measured"


TOLERANCE = 1e-3   # relative; the queries are float32 and the factor is applied in float32 or float64
TOKEN_ID = 5


def families() -> tuple[PositionFamily, ...]:
    """The families with a position-dependent factor: the entries of :data:`.known.KNOWN` that have one."""
    return KNOWN.far_families()


def family_named(name: str) -> PositionFamily:
    entries = families()
    for entry in entries:
        if entry.family == name:
            return entry
    raise ValueError(f"no position-dependent family {name!r}; accepted: {', '.join(e.family for e in entries)}")


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
    factor's parameters drawn by ``entry.draw_learned``, as ``entry.learned`` says."""
    import transformers

    from .families import build as build_model

    config = getattr(transformers, entry.config_class)(**{**entry.sizes, **entry.enable, **overrides})
    model = build_model(config, seed)
    if entry.draw_learned is not None:
        entry.draw_learned(model, torch.Generator().manual_seed(seed))
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
        return {**row, "verdict": FarVerdict.NOT_MEASURED, "reason": f"{entry.config_class} is not in this transformers"}
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
        return {**row, "verdict": FarVerdict.NOT_MEASURED,
                "reason": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    error = max(errors)
    return {**row, "layers_scaled": sorted(applies), "measured": {str(p): v for p, v in measured.items()},
            "declared": {str(p): v for p, v in declared.items()}, "max_error": error,
            "verdict": FarVerdict.AGREES if error <= TOLERANCE else FarVerdict.DIFFERS,
            "reason": "" if error <= TOLERANCE else f"measured differs from the config's formula by up to {error:.3g}"}


def audit_positions(positions=POSITIONS, seed: int = 0, progress: Callable[[float, str], None] | None = None) -> list[dict]:
    """One row per family of :func:`families`, in order, on one torch thread (the same numbers in any process)."""
    from ..probing.loading import quiet_transformers
    from ..threads import torch_threads

    rows = []
    # transformers' notes on the tiny configs (an eos id beyond the tiny vocabulary, a renamed cache argument)
    # say nothing of the factor
    with torch_threads(1), quiet_transformers():
        entries = families()
        for index, entry in enumerate(entries):
            if progress:
                progress(index / len(entries), f"far positions: {entry.family}")
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


# --------------------------------------------------------------------------- a folder's own parameters

CACHE_BUDGET = 2 * 10**9  # bytes of masked past keys and values a cache-reading family may be measured with


def stepping_positions(step, positions=POSITIONS) -> list[int]:
    """``positions`` and, below each P, the position where the declared factor ``step(p)`` (non-decreasing, a
    number or one per head) first reaches its value at P, with the position before it; and so for its first step
    away from its value at 0, where a step is largest.  There p and p + 1 give different factors, so a formula off
    by one position shows (at P = 8,192 a floor at 8,192 does not step)."""
    def first_where(holds, top: int) -> int:
        """The first position in [0, top] where ``holds`` (true from there on up to ``top``)."""
        low, high = 0, top
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if holds(middle) else (middle + 1, high)
        return low

    found = set(positions)
    for top in positions:
        target = step(top)
        first = first_where(lambda p: step(p) == target, top)
        found |= {first - 1, first}
    at_zero, top = step(0), max(positions)
    if step(top) != at_zero:  # the first position past every one with the factor at 0
        first = first_where(lambda p: step(p) != at_zero, top)
        found |= {first - 1, first}
    return sorted(p for p in found if p >= 1)


def cache_bytes(config, p: int) -> int:
    """The masked past keys and values a cache of ``p`` tokens holds (float32), over every layer."""
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", 1)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * 4 * config.num_hidden_layers * heads * head_dim * p


def folder_row(entry: PositionFamily, model) -> dict:
    """A model folder's factor at far positions, judged against its own config (its floor_scale, attn_scale, beta:
    not the defaults), at :data:`POSITIONS` and at the positions where its declared factor steps.  A family that
    reads the position from a cache is measured only where the masked past fits :data:`CACHE_BUDGET`; the
    positions left out are named."""
    config = model.config
    if entry.draw_learned is None:  # the steps of the first layer the factor applies to
        layer = next((index for index in range(config.num_hidden_layers)
                      if entry.formula(config, index, POSITIONS[-1], None) != entry.formula(config, index, 0, None)), 0)
        positions = stepping_positions(lambda p: entry.formula(config, layer, p, None))
    else:  # a learned factor s ln(p + 1) + b changes at every position
        positions = list(POSITIONS)
    skipped = [p for p in positions if entry.reads == "cache" and cache_bytes(config, p) > CACHE_BUDGET]
    kept = [p for p in positions if p not in skipped]
    row = measure(entry, kept, model=model) if kept else {"family": entry.family, "verdict": FarVerdict.NOT_MEASURED,
                                                         "reason": "no position fits the cache budget"}
    if not skipped:
        return row
    return {**row, "not_measured_positions": skipped,
            "reason": "; ".join(filter(None, [row.get("reason", ""), f"positions {skipped} not measured (a cache of "
                                              f"that many masked tokens exceeds {CACHE_BUDGET / 1e9:g} GB)"]))}


def far_entry(model_type: str) -> PositionFamily | None:
    return KNOWN.get(model_type).far
