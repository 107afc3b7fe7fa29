"""The whole path: q and k designed at the outputs of the q and k projections.

Whatever a model does between its projections and the product q.k (q/k norms, RoPE and
its attention factor or YaRN mscale, a key multiplier, q scaled before RoPE) is inside
this measurement.  Forward hooks overwrite the projection outputs of every attention
module with designed vectors (the same in every head):

    q = m * e   on every token;   k_0 = +g/2 e,  k_1 = -g/2 e,  other keys 0,

where e is the head's first or last coordinate (on either side of a partial RoPE or of
MLA's no-RoPE/RoPE split).  The values are replaced at the attention function (v_0 = e_0,
v_1 = e_1), so its output reads p_0 / p_1 per row as in :mod:`attnscale.probing.probe`.  Every design is one
batch entry of one forward pass, and every token sits at the same position (position_ids
all equal), so RoPE rotates q and k alike and their product keeps only RoPE's attention
factor; a second position and a second length show any dependence on them.

Where the projections are fused ([q | k | v] in one matrix, or interleaved per head), the
layouts are tried in turn and each is checked on what reaches the attention function: a
design that changes only the keys must leave the queries and keys 2.. unchanged, and
changing the query must reach every head.  A layout that fails is not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import feed

Q_NAMES = ("q_proj", "query", "q", "query_proj", "Wq", "wq", "q_lin", "to_q", "q_b_proj", "q_attn", "linear_q",
           "project_q", "projection_query", "to_query", "q_head", "queries")
K_NAMES = ("k_proj", "key", "k", "key_proj", "Wk", "wk", "k_lin", "to_k", "linear_k", "project_k", "projection_key",
           "to_key", "k_head", "key_protein")  # key_protein: Evolla's aligner, its keys the compressed protein
FUSED_NAMES = ("c_attn", "qkv_proj", "query_key_value", "Wqkv", "qkv", "W_pack", "qkv_linear", "in_proj",
               "queries_keys_values", "att_proj")  # att_proj: Bark's
KV_NAMES = ("c_attn", "kv_proj", "keys_values", "to_kv")  # k and v from one projection beside a q projection
CHECK_TOL = 1e-6  # relative change that counts as "changed" in the layout check


@dataclass
class HeadSlice:
    """Where head-vector coordinates [first, first + size) live in a module's output: head h
    at offset + h * stride + (0 .. size - 1); heads = 1 for a block shared by all heads."""

    module: torch.nn.Module
    offset: int
    heads: int
    stride: int
    first: int
    size: int

    def index(self) -> torch.Tensor:
        return torch.tensor([self.offset + h * self.stride + j for h in range(self.heads) for j in range(self.size)])


@dataclass
class Layout:
    name: str
    q: list[HeadSlice]
    k: list[HeadSlice]
    over_queries: bool = False  # the module's softmax runs over its queries: q and k swapped (inline.over_queries_layout)
    separate: bool = False  # q and k from projections of their own (trusted in a weights reading without a plausibility check)


def channels_first(module) -> bool:
    """A 1x1 Conv1d projection (SqueezeBERT, WavTokenizer): its output is (B, out, T), the channels before the
    tokens; or a 1x1 Conv2d one (the attention blocks of Janus's VQ-VAE): (B, out, H, W), the tokens its positions."""
    return ((isinstance(module, torch.nn.Conv1d) and module.kernel_size == (1,))
            or (isinstance(module, torch.nn.Conv2d) and module.kernel_size == (1, 1)))


def as_tokens(tensor: torch.Tensor) -> torch.Tensor:
    """A channels-first output (B, out, T) or (B, out, H, W) as (B, tokens, out)."""
    return tensor.flatten(2).transpose(-1, -2)


def out_features(module) -> int | None:
    if channels_first(module):
        return module.out_channels
    for name in ("out_features", "nf"):
        value = getattr(module, name, None)
        if isinstance(value, int):
            return value
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor):
        return int(weight.shape[0]) if weight.dim() == 2 else None
    inner = list(module.children())  # a wrapper of one linear map (Kyutai's KyutaiSpeechToTextLinear): its width
    if len(inner) == 2 and norm_width(inner[1]) is not None:  # a linear map, then a norm of its width (LeViT's)
        width = out_features(inner[0])
        return width if width == norm_width(inner[1]) else None
    return out_features(inner[0]) if len(inner) == 1 else None


def norm_width(module) -> int | None:
    """The width a batch or layer norm normalises (None for any other module)."""
    if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
        return module.num_features
    if isinstance(module, torch.nn.LayerNorm) and module.normalized_shape:
        return module.normalized_shape[-1]
    return None


def child(module, names):
    for name in names:
        found = getattr(module, name, None)
        if isinstance(found, torch.nn.Module) and out_features(found):
            return found
    return None


def candidate_layouts(module, q_shape, k_shape) -> list[Layout]:
    """The layouts worth trying for this attention module and the q, k shapes its calls have."""
    heads_q, d_q = q_shape[1], q_shape[-1]
    heads_k, d_k = k_shape[1], k_shape[-1]
    layouts = []
    q_mod, k_mod = child(module, Q_NAMES), child(module, K_NAMES)
    kv_b, kv_a = child(module, ("kv_b_proj",)), child(module, ("kv_a_proj_with_mqa",))
    if q_mod is not None and kv_b is not None and kv_a is not None:  # multi-head latent attention
        nope, rope = getattr(module, "qk_nope_head_dim", 0), getattr(module, "qk_rope_head_dim", 0)
        v_dim, latent = getattr(module, "v_head_dim", 0), getattr(module, "kv_lora_rank", 0)
        if nope and rope and nope + rope == d_k:
            layouts.append(Layout("latent (MLA)", [HeadSlice(q_mod, 0, heads_q, d_q, 0, d_q)],
                                  [HeadSlice(kv_b, 0, heads_k, nope + v_dim, 0, nope), HeadSlice(kv_a, latent, 1, rope, nope, rope)]))
    if q_mod is not None:
        q_out = out_features(q_mod)
        q_blocks = []
        if q_out == heads_q * d_q:
            q_blocks.append([HeadSlice(q_mod, 0, heads_q, d_q, 0, d_q)])
        elif q_out == 2 * heads_q * d_q:  # q with a gate: per head [q | gate], or all q then all gates
            q_blocks += [[HeadSlice(q_mod, 0, heads_q, 2 * d_q, 0, d_q)], [HeadSlice(q_mod, 0, heads_q, d_q, 0, d_q)]]
        k_blocks = []
        if k_mod is not None and out_features(k_mod) == heads_k * d_k:
            k_blocks.append([HeadSlice(k_mod, 0, heads_k, d_k, 0, d_k)])
        fused_kv = child(module, KV_NAMES)
        kv_out = out_features(fused_kv) if fused_kv is not None else None
        if k_mod is None and kv_out == 2 * heads_k * d_k:
            k_blocks.append([HeadSlice(fused_kv, 0, heads_k, d_k, 0, d_k)])  # [k | v], e.g. GPT-2 cross-attention
        if k_mod is None and kv_out and kv_out % heads_k == 0 and kv_out // heads_k > d_k:
            stride = kv_out // heads_k  # per head [k | v], v as wide as it is (LeViT's keys_values)
            k_blocks.append([HeadSlice(fused_kv, 0, heads_k, stride, 0, d_k)])
        layouts += [Layout("separate", q, k, separate=True) for q in q_blocks for k in k_blocks]
    fused = child(module, FUSED_NAMES)
    if fused is not None and d_q == d_k:
        total, d = out_features(fused), d_q
        if total == heads_q * d + 2 * heads_k * d:
            layouts.append(Layout("fused [q|k|v]", [HeadSlice(fused, 0, heads_q, d, 0, d)],
                                  [HeadSlice(fused, heads_q * d, heads_k, d, 0, d)]))
        if 1 < heads_k < heads_q and heads_q % heads_k == 0 and total == heads_q * d + 2 * heads_k * d:
            group, width = heads_q // heads_k, (heads_q // heads_k + 2) * d  # per key/value group: its queries, k, v
            layouts.append(Layout("fused per key/value group [q..|k|v]",
                                  [HeadSlice(fused, j * width, group, d, 0, d) for j in range(heads_k)],
                                  [HeadSlice(fused, j * width + group * d, 1, d, 0, d) for j in range(heads_k)]))
        if heads_q == heads_k and total % heads_q == 0 and total // heads_q > 2 * d:
            stride = total // heads_q  # v as wide as it is: 3 d, or LeViT's attention_ratio x d
            layouts.append(Layout("fused per head [q|k|v]", [HeadSlice(fused, 0, heads_q, stride, 0, d)],
                                  [HeadSlice(fused, d, heads_k, stride, 0, d)]))
    return layouts


@dataclass(frozen=True)
class Design:
    q_scale: float  # m
    gap: float  # g in units of the module's probe gap G
    last: bool  # e = the last head coordinate (else the first)
    position: int  # every token's position id


# The designs of one forward pass: the factor (gaps 0, 1, 2) and q doubled along the first
# coordinate, the same along the last one, the far position (-1); then, along either coordinate,
# q doubled at gap 0 and q = 0 at gap 1.  Between them they separate q.k from the logit terms
# linear in q alone or in the keys alone that differ from key to key (decomposed relative
# positions q.R(i - j), DeBERTa's c2p q.P(i - j) and p2c k.P(j - i)): see :func:`summarize`,
# which relies on this order.
DESIGNS = (Design(1, 0, False, 0), Design(1, 1, False, 0), Design(1, 2, False, 0), Design(2, 1, False, 0),
           Design(1, 0, True, 0), Design(1, 1, True, 0), Design(1, 0, False, -1), Design(1, 1, False, -1),
           Design(1, 2, True, 0), Design(2, 1, True, 0), Design(2, 0, False, 0), Design(2, 0, True, 0),
           Design(0, 1, False, 0), Design(0, 1, True, 0))
# the factor again, at another length (with q doubled at gap 0 and q = 0 at gap 1, as above)
LENGTH_DESIGNS = (Design(1, 0, False, 0), Design(1, 1, False, 0), Design(2, 0, False, 0), Design(0, 1, False, 0))


def head_vectors(designs, tokens: int, dim: int, gap_unit: float, role: str, dtype, q_unit: float = 1.0,
                 dense: bool = False) -> torch.Tensor:
    """(B, T, dim) designed q (every token, m q_unit) or k (tokens 0 and 1) per design, along the first or the
    last head coordinate; ``dense``: along a direction of the same length spread evenly over every coordinate
    (all signs + for "first", alternating for "last"), so that no coordinate stands out after a norm."""
    out = torch.zeros(len(designs), tokens, dim, dtype=dtype)
    for b, design in enumerate(designs):
        direction = torch.zeros(dim, dtype=dtype)
        if dense:
            direction[:] = dim ** -0.5
            if design.last:
                direction[1::2] *= -1
        else:
            direction[dim - 1 if design.last else 0] = 1.0
        if role == "q":
            out[b, :] = design.q_scale * q_unit * direction
        else:
            out[b, 0] = design.gap * gap_unit / 2 * direction
            out[b, 1] = -design.gap * gap_unit / 2 * direction
    return out


def token_layout(shape, batch: int, tokens: int | None = None) -> tuple[int, int, bool] | None:
    """How a projection output of ``shape`` holds ``batch`` designs: (windows per design, tokens,
    time first), or None.  Batch first: (B, T, out), (B, 1, T, out) as latent attention's
    projections give it, (B, h, w, out) for an image, and (B * windows, ..., out) where a module
    attends within windows (design b's windows are rows b * windows .. (b + 1) * windows - 1);
    time first (T, B, out) as fairseq-style modules give it."""
    if len(shape) < 3:
        return None
    middle = math.prod(shape[1:-1])
    if shape[0] == batch and tokens in (None, middle):
        return 1, middle, False
    if len(shape) == 3 and shape[1] == batch and tokens in (None, shape[0]):
        return 1, shape[0], True
    if shape[0] % batch == 0 and tokens in (None, middle):
        return shape[0] // batch, middle, False
    return None


def write_hook(writes: list[tuple[HeadSlice, torch.Tensor, object]]):
    """A forward hook that writes each (block, vectors (B, T, dim), make) into the module's output, laid
    out as :func:`token_layout` reads it; where the output does not hold T tokens a design, the designs
    at the count it holds (``make(count)``): the other side of a cross-attention (a mask decoder's image
    features against its prompt tokens), a window whose queries a stage pools."""
    def hook(module, args, output):
        tensor = output[0] if isinstance(output, tuple) else output
        batch, tokens = writes[0][1].shape[:2]
        if not isinstance(tensor, torch.Tensor):
            return output
        if channels_first(module):  # written as (B, T, out), given back as (B, out, T) or (B, out, H, W)
            written = hook(None, args, as_tokens(tensor))
            return written.transpose(-1, -2).reshape(tensor.shape).contiguous()
        shape = tuple(tensor.shape)
        layout = token_layout(shape, batch, tokens) or token_layout(shape, batch)
        if layout is None:
            return output
        windows, count, time_first = layout
        written = (tensor.transpose(0, 1) if time_first else tensor).reshape(-1, count, tensor.shape[-1]).clone()
        for block, vectors, make in writes:
            vectors = vectors if vectors.shape[1] == count else make(count)
            source = vectors[..., block.first:block.first + block.size].to(written.dtype).repeat_interleave(windows, 0)
            written[..., block.index().to(written.device)] = source.repeat(1, 1, block.heads)
        written = written.transpose(0, 1).contiguous() if time_first else written.reshape(tensor.shape)
        return (written, *output[1:]) if isinstance(output, tuple) else written

    return hook


def install(layouts: dict, units: dict, designs, tokens: int, dtype, token_counts: dict | None = None) -> list:
    """Hooks that write the designs into every chosen layout; returns their handles.
    ``layouts`` and ``units`` map an attention module's id to its Layout and gap unit G;
    ``units["q"]``, where given, is the unit of the designed q (see :func:`logit_unit`);
    ``token_counts`` maps (module id, "q" or "k") to the tokens that projection outputs, where
    not ``tokens`` (a projection that outputs another count gets the designs at its own)."""
    writes: dict[int, tuple[torch.nn.Module, list]] = {}
    for key, layout in layouts.items():
        for role, blocks in (("q", layout.q), ("k", layout.k)):
            dim = max(b.first + b.size for b in blocks)
            count = (token_counts or {}).get((key, role), tokens)

            def make(n, dim=dim, key=key, role=role):
                return head_vectors(designs, n, dim, units[key], role, dtype, units.get("q", 1.0), units.get("dense", False))

            vectors = make(count)
            for block in blocks:
                writes.setdefault(id(block.module), (block.module, []))[1].append((block, vectors, make))
    return [module.register_forward_hook(write_hook(pairs)) for module, pairs in writes.values()]


def logit_unit(units: dict, key: int) -> float:
    """q.k_0 - q.k_1 of the design with m = 1 and gap 1: G times the q unit.  The q unit is 1 unless
    the model clips q, k and v (clip_qkv): then q, k stay well inside the clip (<= clip / 2), so
    that the designed vectors reach the product unchanged."""
    return units[key] * units.get("q", 1.0)


def inside_clip(units: dict, clip: float | None) -> dict:
    """Designs that a clip of q, k and v (clip_qkv) leaves alone: the q unit clip / 4 (so |q| <= clip / 2)
    and every gap unit G at most clip / 4 (|k| <= G), also for modules added later (``units["clip"]``); spread
    over every coordinate (``units["dense"]``), so that a norm before the clip (OLMoE's QK-norm) leaves each
    coordinate at the norm's weight, not sqrt(d) times it on one coordinate."""
    if clip is not None:
        units.update(clip=clip, q=min(1.0, clip / 4), dense=True)
        for key, gap in units.items():
            if isinstance(key, int):
                units[key] = min(gap, clip / 4)
    return units


def beside_rotaries(model) -> list[torch.nn.Module]:
    """The rotary embeddings of the parts that run on a sequence of feed.TEXTS_BESIDE (Evolla's protein
    encoder: built from ``protein_encoder_config``), which number that sequence's positions themselves
    (arange over it) rather than take the position_ids given beside the main ids."""
    found = []
    for name in feed.TEXTS_BESIDE:
        config = getattr(model.config, f"{name}_encoder_config", None)
        if config is None:
            continue
        found += [module for module in model.modules() if getattr(module, "config", None) is config
                  and type(module).__name__.endswith("RotaryEmbedding")]
    return found



def pin_beside_positions(model, designs, far_position: int) -> list:
    """Hooks that give the :func:`beside_rotaries` each design's position at every token, as position_ids give
    the main sequence's (so q and k are rotated alike and the rotation cancels); their handles."""
    positions = torch.tensor([far_position if d.position < 0 else d.position for d in designs]).unsqueeze(1)

    def pinned(given: torch.Tensor) -> torch.Tensor:
        return positions.to(given.device).expand(-1, given.shape[-1])

    def pin(module, args, kwargs):  # forward(x, position_ids)
        if len(args) >= 2:
            return (args[0], pinned(args[1]), *args[2:]), kwargs
        if "position_ids" in kwargs:
            return args, {**kwargs, "position_ids": pinned(kwargs["position_ids"])}
        return None
    return [module.register_forward_pre_hook(pin, with_kwargs=True) for module in beside_rotaries(model)]



def designed_values(value: torch.Tensor) -> torch.Tensor:
    v = torch.zeros_like(value)
    v[..., 0, 0] = 1.0
    if v.shape[-1] > 1:
        v[..., 1, 1] = 1.0
    return v


def changed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-30)
    return (a - b).abs() > CHECK_TOL * scale


def design_windows(tensor: torch.Tensor, designs: int | None) -> int:
    """The windows per design on an attention call's batch axis (designs x windows, design first)."""
    return tensor.shape[0] // designs if designs and tensor.shape[0] % designs == 0 else 1


def layout_holds(call_q: torch.Tensor, call_k: torch.Tensor, designs: int | None = None) -> bool:
    """Designs 0 (gap 0), 1 (gap G) and 4 (the other coordinate) as they reached the attention
    function: keys changed only at tokens 0 and 1 (in every key head), queries unchanged by
    the key design, and changed in every head by the query design.  A call with fewer batch
    entries than designs (images packed into one sequence, as Pixtral's) cannot hold one.
    ``designs``: the designs of the pass, where a call attends within windows (design b's windows
    are rows b * windows ... (b + 1) * windows - 1, as Hiera's): each design's first window is read."""
    if min(call_q.shape[0], call_k.shape[0]) <= 4:
        return False
    w = design_windows(call_q, designs)
    q0, q1, q4 = call_q[0].double(), call_q[w].double(), call_q[4 * w].double()  # (H, T, d)
    k0, k1 = call_k[0].double(), call_k[w].double()
    keys_moved = changed(k0[:, :2], k1[:, :2]).flatten(1).any(dim=1).all()
    others_still = not changed(k0[:, 2:], k1[:, 2:]).any() if k0.shape[1] > 2 else True
    query_still = not changed(q0, q1).any()
    query_moved = changed(q0, q4).flatten(1).any(dim=1).all()
    return bool(keys_moved and others_still and query_still and query_moved)


def log_ratios(output: torch.Tensor) -> torch.Tensor:
    """log(p_0 / p_1) per (design, query, head) from an attention output (B, T_q, H, d_v) read
    through the designed values."""
    p0, p1 = output[..., 0].double(), output[..., 1].double()
    ok = (p0 > 1e-30) & (p1 > 1e-30) & torch.isfinite(p0) & torch.isfinite(p1)
    return torch.where(ok, torch.log(p0.clamp_min(1e-30)) - torch.log(p1.clamp_min(1e-30)),
                       torch.full_like(p0, float("nan")))


def design_rows(output: torch.Tensor, designs: int) -> torch.Tensor:
    """:func:`log_ratios` per design, (designs, windows x T_q, H): a window's query rows after the
    previous window's, where the call attends within windows."""
    rows = log_ratios(output)
    return rows.reshape(designs, -1, rows.shape[-1])


def median(values: torch.Tensor) -> float:
    values = values[torch.isfinite(values)]
    return float(values.median()) if values.numel() else float("nan")


LINEAR_RATIO_TOL = 0.02  # doubling q (or the key gap) doubles the logit gap within 2%: linear in it
QUERY_SPREAD_TOL = 0.01  # a factor that moves by more than 1% across query positions is not one factor
# a spread (max - min) across query rows counts only beyond this many times one row's rounding noise (noise_of):
# pure rounding passes 12 in under 1 draw in 1000 at 8 to 64 rows (tests/audit/test_read.py)
NOISE_MARGIN = 12.0


def shape_of(ratio: float) -> str:
    if abs(ratio - 2) <= 2 * LINEAR_RATIO_TOL:
        return "linear"
    if abs(ratio - 1) <= LINEAR_RATIO_TOL:
        return "normalised"
    return "non-linear"


def path_form(ratio_q: float, ratio_k: float, factor: float) -> str:
    """How the logit gap responds to doubling q and to doubling the keys."""
    q_shape, k_shape = shape_of(ratio_q), shape_of(ratio_k)
    if q_shape == k_shape == "linear":
        return "linear"
    if q_shape == k_shape == "normalised":
        return "q and k normalised"
    if {q_shape, k_shape} == {"linear", "normalised"}:
        return "q normalised" if q_shape == "normalised" else "k normalised"
    if factor != factor:
        return "not readable"  # every row saturated (one of the two keys at probability 0)
    return "non-linear"


def length_change(longer: torch.Tensor | None, unit: float, per_query: list[float]) -> dict:
    """How far the factor moves when the sequence is longer, query row by query row: a factor that
    depends on the row alone (Llama 4's temperature at index i) is the same at row i of either
    length, so it is not read as a length dependence, as medians over 8 and over 24 rows would."""
    if longer is None:
        return {"length_change": None}
    step = gap_step(longer, 0, 1, 2, 3)
    changes = []
    for t in range(min(step.shape[0], len(per_query))):
        at_longer, here = median(step[t] / unit), per_query[t]
        if at_longer == at_longer and here == here and here != 0:
            changes.append(abs(at_longer - here) / abs(here))
    return {"length_change": max(changes) if changes else None}


def spread_of(per_query: list[float]) -> float:
    """(max - min) / |median| of the readable per-query factors (0 with fewer than two)."""
    readable = [f for f in per_query if f == f]
    centre = abs(median(torch.tensor(readable))) if readable else 0.0
    return (max(readable) - min(readable)) / max(centre, 1e-300) if len(readable) > 1 else 0.0


def per_row(step: torch.Tensor, unit: float) -> list[float]:
    """The factor each query row reads: the median over heads of its gap step in units of the designed gap."""
    return [median(step[t] / unit) for t in range(step.shape[0])]


def noise_of(per_query: list[float], again: list[float]) -> float:
    """The rounding noise of one row's factor (a standard deviation, relative to the median factor), from how far
    its two readings disagree: the factor at gap 1 and at gap 2 measure the same thing, so a real dependence on the
    query row shows in both, while rounding (float32 logits far larger than the designed gap) does not repeat.
    With rows of equal noise the gap-1 reading (rows 1 + 0 - 12 - 10) has 8/3 the variance of the difference of
    the two (rows 1 - 2/2 - 0/2).  A bend common to every row (a soft cap reads gap 2 lower) is taken out by the
    ratio of the medians."""
    pairs = [(a, b) for a, b in zip(per_query, again) if math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 2:
        return 0.0
    centre, centre_again = (median(torch.tensor(side, dtype=torch.float64)) for side in zip(*pairs))
    if not (centre and centre_again):
        return 0.0
    bend = centre / centre_again
    mean_square = sum((a - bend * b) ** 2 for a, b in pairs) / len(pairs)
    return math.sqrt(mean_square * 8 / 3) / abs(centre)


def moves_beyond(spread: float, tolerance: float, noise: float) -> bool:
    """The per-query factors move: their spread passes the tolerance and NOISE_MARGIN times one reading's noise."""
    return spread > max(tolerance, NOISE_MARGIN * noise)


def key_only(rows: torch.Tensor, base: int, doubled: int, zero_q: int) -> torch.Tensor:
    """The part of the gap step that q does not scale: a term linear in the keys alone (p2c), read at
    q = 0 against the gap-0 row extrapolated to q = 0 from q = 1 and 2 (which removes a term linear in
    q alone, c2p); 0 where a row cannot be read."""
    term = rows[zero_q] - (2 * rows[base] - rows[doubled])
    return torch.where(torch.isfinite(term), term, torch.zeros_like(term))


def gap_step(rows: torch.Tensor, base: int, gap: int, doubled: int, zero_q: int) -> torch.Tensor:
    """The gap step q.k alone: the step from gap 0 to gap 1 less the keys' own term."""
    return rows[gap] - rows[base] - key_only(rows, base, doubled, zero_q)


def summarize(rows: torch.Tensor, unit: float, longer: torch.Tensor | None, positions: bool) -> dict:
    """The whole path's numbers for one attention call from its log-ratio rows per design:
    ``rows`` (len(DESIGNS), T_q, H), ``longer`` (len(LENGTH_DESIGNS), T2, H); ``positions``: the model
    took the designs' position ids (else the far-position designs sat at the usual positions).
    Logit terms linear in q alone or in the keys alone cancel: the factor is q.k's, and doubling
    q doubles it where the path is linear."""
    base, last_base = rows[0], rows[4]
    step, last_step = gap_step(rows, 0, 1, 10, 12), gap_step(rows, 4, 5, 11, 13)
    factor = median(step / unit)
    # doubling the gap doubles the whole gap term (the keys' own term with it)
    ratio_k = median((rows[2] - base) / (rows[1] - base))
    ratio_q = median((rows[3] - rows[10] - key_only(rows, 0, 10, 12)) / step)
    form = path_form(ratio_q, ratio_k, factor)
    factor_last = median(last_step / unit)
    form_last = path_form(median((rows[9] - rows[11] - key_only(rows, 4, 11, 13)) / last_step),
                          median((rows[8] - last_base) / (rows[5] - last_base)), factor_last)
    per_query = per_row(step, unit)
    step_doubled = rows[2] - base - 2 * key_only(rows, 0, 10, 12)  # gap 2: the keys' own term doubles with it
    query_noise = noise_of(per_query, per_row(step_doubled, 2 * unit))
    query_spread = spread_of(per_query)
    if form in ("linear", "q and k normalised") and moves_beyond(query_spread, QUERY_SPREAD_TOL, query_noise):
        form = "varies with the query position"  # also a cosine-1 logit: one temperature is one for every query
    # along the last coordinate too: RoPE the designs cannot pin (RoFormer rotates by the token index)
    # turns the first coordinate's pair fastest and the last's slowest
    last_doubled = rows[8] - last_base - 2 * key_only(rows, 4, 11, 13)
    per_query_last = per_row(last_step, unit)
    last_noise = noise_of(per_query_last, per_row(last_doubled, 2 * unit))
    if form_last == "linear" and moves_beyond(spread_of(per_query_last), QUERY_SPREAD_TOL, last_noise):
        form_last = "varies with the query position"
    return {
        **length_change(longer, unit, per_query),
        "factor": factor,
        "factor_last": factor_last,
        "ratio_q": ratio_q,
        "ratio_k": ratio_k,
        "form": form,
        "form_last": form_last,
        "cosine_temperature": median(step / 2) if form == "q and k normalised" else None,
        "per_query": per_query,
        "query_spread": query_spread,
        "query_noise": query_noise,
        # less the keys' own term read at position 0 (a content bias's u.k: the same at every position)
        "factor_far": median((rows[7] - rows[6] - key_only(rows, 0, 10, 12)) / unit) if positions else None,
        "factor_longer": median(gap_step(longer, 0, 1, 2, 3) / unit) if longer is not None else None,
    }
