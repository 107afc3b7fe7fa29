"""The whole path of families that compute attention inline (no attention function to intercept).

Older families in transformers (GPT-Neo, BLOOM, DeBERTa, BigBird, XLM, ...) compute the
softmax inside their attention module.  Their q and k projections are still designed as
in :mod:`.whole_path`, and the probabilities are read from the (B, H, T_q, T_k) tensor whose rows
sum to 1, among those the module returns with ``output_attentions=True`` or, where it returns
none, among the softmaxes computed while it runs and the probabilities of the
``F.scaled_dot_product_attention`` calls its own code makes (:class:`Watch`).  T_q and T_k are what the q
and k projections output in a plain pass (an image's patches; keys reduced, as PVT's are), and a
module that attends within windows (Swin, ViTDet, SAM) gets the designs in every window.  A fused
projection is used only where its designs read back as a finite factor, linear or normalised in
q and k: with no attention function to check a fused layout against, a guess could not be told
from a measurement otherwise.
"""

from __future__ import annotations

import functools
import inspect
import math
import weakref

import torch

from ..errors import UserError
from . import feed, whole_path
from .declared import clip_of, source_for
from .record import BackendLayer, LayerReading

HEAD_COUNT_NAMES = ("num_attention_heads", "num_heads", "num_attn_heads", "n_heads", "n_head",
                    "num_attention_heads_per_partition")


def head_count(module, config) -> int | None:
    for owner in (module, config):
        for name in HEAD_COUNT_NAMES:
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


class InProjection(torch.nn.Module):
    """One of q, k, v of a torch ``nn.MultiheadAttention``, whose projections are slices of one
    in_proj_weight applied inside ``F.multi_head_attention_forward``: a module of its own, so that
    its output can be hooked (read and overwritten) as any projection's; :class:`Watch` calls it."""

    def __init__(self, width: int):
        super().__init__()
        self.out_features = width

    def forward(self, x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias)


def in_projections(module: torch.nn.MultiheadAttention) -> tuple[InProjection, ...]:
    """Its q, k and v as modules of their own: the layout holds them, and :class:`Watch` reads them from it."""
    return tuple(InProjection(module.embed_dim) for _ in range(3))


class PassThrough(torch.nn.Module):
    """A q or k that no projection of the module makes, as a module of its own: :class:`Watch` passes that
    tensor through it, so that its output can be hooked (read and overwritten) as any projection's; the
    identity."""

    def __init__(self, width: int):
        super().__init__()
        self.out_features = width

    def forward(self, states):
        return states


class CallQuery(PassThrough):
    """The query an attention module hands ``F.scaled_dot_product_attention`` with no q projection
    before it (a learned query: AIMv2's pooling head reshapes its cls token into the call), passed
    through by :class:`Watch` as (B, T, H * d)."""


def learned_query(module, config) -> list[whole_path.Layout]:
    """The layout of a module whose code calls ``F.scaled_dot_product_attention`` on keys from a k
    projection and a query from no projection (its learned query): q designed at the call (what the
    code does to its query before the call is not read), k at the k projection."""
    k_mod = whole_path.child(module, whole_path.K_NAMES)
    heads = head_count(module, config)
    if (k_mod is None or heads is None or whole_path.child(module, whole_path.Q_NAMES) is not None
            or SDPA_CALL not in (source_for(module) or "")):
        return []
    width = whole_path.out_features(k_mod)
    if width % heads:
        return []
    d = width // heads
    return [whole_path.Layout("learned query designed at the call, separate k (weights read)",
                              [whole_path.HeadSlice(CallQuery(width), 0, heads, d, 0, d)],
                              [whole_path.HeadSlice(k_mod, 0, heads, d, 0, d)])]


class HandedIn(PassThrough):
    """The q or k an attention module is handed already projected (DabDetrAttention: "The key q_proj, k_proj,
    v_proj are defined outside the attention"; its layer sums content and position projections, and its
    cross-attention concatenates a sine embedding, before the call), passed through by :class:`Watch`."""


HANDED_IN_ARGUMENTS = ("hidden_states", "key_states")  # the q and k such a module's forward takes


def handed_in_layout(module) -> list[whole_path.Layout]:
    """The layout of a module with no q or k projection of its own whose forward takes q and k projected
    (as ``HANDED_IN_ARGUMENTS``), where it states its heads and their width (``attention_heads``,
    ``attention_head_dim``): q and k designed where they are handed in; what the layer does before the
    call (a sum of projections, a concatenation) is not read, only the product the module computes."""
    heads, d = getattr(module, "attention_heads", None), getattr(module, "attention_head_dim", None)
    forward = getattr(type(module), "forward", None)
    taken = inspect.signature(forward).parameters if forward is not None else {}
    if not (isinstance(heads, int) and isinstance(d, int) and all(name in taken for name in HANDED_IN_ARGUMENTS)):
        return []
    if whole_path.child(module, whole_path.Q_NAMES) is not None or whole_path.child(module, whole_path.K_NAMES) is not None:
        return []
    q_mod, k_mod = HandedIn(heads * d), HandedIn(heads * d)
    return [whole_path.Layout("q and k designed where they are handed in (weights read)",
                              [whole_path.HeadSlice(q_mod, 0, heads, d, 0, d)], [whole_path.HeadSlice(k_mod, 0, heads, d, 0, d)])]


def through_handed_in(shims, module, args, kwargs):
    """A forward pre-hook (``shims`` bound): the module's handed-in q and k (keyword arguments) through the
    :class:`HandedIn` modules its layout holds."""
    if not all(isinstance(kwargs.get(name), torch.Tensor) for name in HANDED_IN_ARGUMENTS):
        return None
    return args, {**kwargs, **{name: shim(kwargs[name]) for name, shim in zip(HANDED_IN_ARGUMENTS, shims)}}


def project(module, x, weight, bias) -> torch.Tensor | None:
    """``x`` through the projection ``module`` where the in-projection ``weight`` (and ``bias``) are its own."""
    if isinstance(module, InProjection):
        return module(x, weight, bias)
    own = getattr(module, "bias", None)
    same_bias = (own is None) == (bias is None) and (bias is None or torch.equal(own, bias))
    return module(x) if getattr(module, "weight", None) is weight and same_bias else None


EINSUM_PROJECTION = "ibh,hnd->ibnd"  # XLNet's q and k heads: x (T, B, hidden) times a (hidden, heads, d) parameter


class ParameterProjection(torch.nn.Module):
    """XLNet's q or k: a (hidden, heads, d) parameter its attention applies by ``torch.einsum(EINSUM_PROJECTION,
    x, parameter)`` inside its forward; a module of its own whose output, (T, B, heads x d) time first, can
    be hooked (read and overwritten) as any projection's; :class:`Watch` routes that einsum through it."""

    def __init__(self, weight: torch.nn.Parameter):
        super().__init__()
        self.weight_of = weakref.ref(weight)  # not a parameter of this module: the attention module owns it
        self.heads, self.width = weight.shape[1], weight.shape[2]
        self.out_features = self.heads * self.width

    def forward(self, x):
        return torch.einsum(EINSUM_PROJECTION, x, self.weight_of()).flatten(-2)


def parameter_projections(module) -> tuple[ParameterProjection, ParameterProjection] | None:
    """A module's q and k as :class:`ParameterProjection`, where both are (hidden, heads, d) parameters of
    the same shape (XLNet's relative attention); None otherwise."""
    q, k = getattr(module, "q", None), getattr(module, "k", None)
    if not (isinstance(q, torch.nn.Parameter) and isinstance(k, torch.nn.Parameter) and q.dim() == 3
            and q.shape == k.shape):
        return None
    return ParameterProjection(q), ParameterProjection(k)


HEAD_WIDTH_NAMES = ("key_dim", "head_dim", "attention_head_size")  # q.k's width per head, where the module states it


def head_width(module, q_mod, heads: int) -> int | None:
    """The module's q.k width per head: as it states it, else its q projection's width over its heads."""
    for name in HEAD_WIDTH_NAMES:
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0:
            return value
    q_out = whole_path.out_features(q_mod) if q_mod is not None else None
    return q_out // heads if q_out and q_out % heads == 0 else None


# GroupViT's assignment of image tokens to groups (GroupViTAssignAttention.get_attn, modeling_groupvit.py): a
# softmax over the query axis (the groups), each key's weights over the queries summing to 1
OVER_QUERIES = "nn.functional.softmax(attn, dim=-2)"


def softmax_over_queries(module) -> bool:
    return OVER_QUERIES in (source_for(module) or "")


def over_queries_layout(module, q_mod, k_mod) -> whole_path.Layout:
    """A module whose softmax runs over its queries for each key, on q.k of one head as wide as its
    projections (more only where the module states its heads): read with the roles swapped, the
    designs' q written into its keys and their keys into its queries, its weights transposed (rows
    over its queries).  q.k is symmetric, so the factor read is the one it applies."""
    heads = head_count(module, None) or 1
    d = whole_path.out_features(q_mod) // heads
    return whole_path.Layout("separate, softmax over the queries (weights read transposed)",
                             [whole_path.HeadSlice(k_mod, 0, heads, d, 0, d)], [whole_path.HeadSlice(q_mod, 0, heads, d, 0, d)],
                             over_queries=True, separate=True)


# Grounding DINO's fusion of image and text (GroundingDinoBiMultiHeadAttention, modeling_grounding_dino.py): one
# q.k of image queries (vision_proj, scaled) and text keys (text_proj), softmaxed over the text for the image and,
# transposed, over the image for the text; both directions share those logits, so the first's factor is theirs
BIDIRECTIONAL = "attn_weights_transposed = attn_weights.transpose(1, 2)"
BIDIRECTIONAL_NAMES = ("vision_proj", "text_proj")  # its q (the image's) and k (the text's)


def bidirectional_layout(module) -> list[whole_path.Layout]:
    q_mod, k_mod = (whole_path.child(module, (name,)) for name in BIDIRECTIONAL_NAMES)
    heads, d = getattr(module, "num_heads", None), getattr(module, "head_dim", None)
    if (q_mod is None or k_mod is None or not isinstance(heads, int) or not isinstance(d, int)
            or BIDIRECTIONAL not in (source_for(module) or "")):
        return []
    return [whole_path.Layout("image queries over text keys, one q.k for both directions (weights read)",
                              [whole_path.HeadSlice(q_mod, 0, heads, d, 0, d)], [whole_path.HeadSlice(k_mod, 0, heads, d, 0, d)])]


def attention_modules(model) -> list[tuple[str, torch.nn.Module, list[whole_path.Layout]]]:
    """(name, module, candidate layouts) for every module that owns q and k projections (separate,
    or fused with as many key heads as query heads, one, or the config's key/value heads; a torch
    nn.MultiheadAttention's in_proj_weight as its q, k and v)."""
    found = []
    config = model.config
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            q_mod, k_mod, _ = in_projections(module)
            heads, d = module.num_heads, module.head_dim
            found.append((name, module, [whole_path.Layout("separate (nn.MultiheadAttention in_proj_weight, weights read)",
                                                          [whole_path.HeadSlice(q_mod, 0, heads, d, 0, d)],
                                                          [whole_path.HeadSlice(k_mod, 0, heads, d, 0, d)], separate=True)]))
            continue
        shims = parameter_projections(module)
        if shims is not None:
            heads, d = shims[0].heads, shims[0].width
            found.append((name, module, [whole_path.Layout("separate (q and k parameters applied by einsum, weights read)",
                                                          [whole_path.HeadSlice(shims[0], 0, heads, d, 0, d)],
                                                          [whole_path.HeadSlice(shims[1], 0, heads, d, 0, d)], separate=True)]))
            continue
        bidirectional = bidirectional_layout(module)
        if bidirectional:
            found.append((name, module, bidirectional))
            continue
        q_mod, k_mod = whole_path.child(module, whole_path.Q_NAMES), whole_path.child(module, whole_path.K_NAMES)
        if q_mod is not None and k_mod is not None and softmax_over_queries(module):
            found.append((name, module, [over_queries_layout(module, q_mod, k_mod)]))
            continue
        heads = head_count(module, config) or (1 if q_mod is not None and k_mod is not None else None)  # one head
        if heads is None:
            continue
        layouts = []
        if q_mod is not None and k_mod is not None:
            q_out, k_out = whole_path.out_features(q_mod), whole_path.out_features(k_mod)
            if q_out % heads == 0 and k_out % (q_out // heads) == 0:
                d = q_out // heads
                layouts.append(whole_path.Layout("separate (weights read)", [whole_path.HeadSlice(q_mod, 0, heads, d, 0, d)],
                                            [whole_path.HeadSlice(k_mod, 0, k_out // d, d, 0, d)], separate=True))
        elif whole_path.child(module, whole_path.FUSED_NAMES) is not None or (
                q_mod is not None and whole_path.child(module, whole_path.KV_NAMES) is not None):
            stated = head_width(module, q_mod, heads)
            fused = whole_path.out_features(whole_path.child(module, whole_path.FUSED_NAMES)) if q_mod is None else None
            kv_heads = {heads, 1, getattr(config, "num_key_value_heads", None) or heads}
            for key_heads in sorted(kv_heads, reverse=True):
                # a width the module does not state: its fused [q|k|v]'s over its heads (a SAM encoder inside a
                # larger tower, whose config's hidden size is another part's), else the config's hidden size
                d = stated or (fused // (heads + 2 * key_heads) if fused and fused % (heads + 2 * key_heads) == 0
                               else (getattr(config, "hidden_size", None) or 0) // heads)
                for layout in whole_path.candidate_layouts(module, (1, heads, 1, d), (1, key_heads, 1, d)):
                    layout.name += " (weights read)"
                    layouts.append(layout)
        if not layouts:
            layouts = learned_query(module, config)
        if not layouts:
            layouts = handed_in_layout(module)
        if layouts:
            found.append((name, module, layouts))
    return found


# what an inline layer's attention function reading says: there is no function to call
NOT_REACHABLE = {"factor": None, "nonlinearity": "not reachable (inline attention)", "cap": None}
NO_WEIGHTS = ("no attention probabilities were found: none came back with output_attentions=True and no softmax "
              "inside the attention module gave rows over its keys")
SOFTMAXES = (torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax)
MHA_FORWARD = torch.nn.functional.multi_head_attention_forward
MHA_ARGUMENTS = inspect.signature(MHA_FORWARD)
SDPA = torch.nn.functional.scaled_dot_product_attention
SDPA_CALL = "scaled_dot_product_attention("  # in a module's code: it calls the function itself
# F.scaled_dot_product_attention's arguments (a builtin: no signature to bind)
SDPA_ARGUMENTS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


def sdpa_weights(arguments: dict) -> torch.Tensor:
    """The probabilities ``F.scaled_dot_product_attention`` applies on these arguments, as its
    documentation defines them (float64): softmax(q k^T * scale + mask), scale 1 / sqrt(E) unless one
    is passed, a causal or boolean mask as -inf."""
    query, key = arguments["query"].double(), arguments["key"].double()
    if arguments["enable_gqa"]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    scale = arguments["scale"] if arguments["scale"] is not None else query.shape[-1] ** -0.5
    logits = query @ key.transpose(-2, -1) * scale
    if arguments["is_causal"]:
        causal = torch.ones(logits.shape[-2:], dtype=torch.bool, device=logits.device).tril()
        logits = logits.masked_fill(~causal, float("-inf"))
    mask = arguments["attn_mask"]
    if isinstance(mask, torch.Tensor):
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask.double()
    return torch.softmax(logits, dim=-1)


def reproduces(weights: torch.Tensor, arguments: dict, output: torch.Tensor) -> bool:
    """Whether ``weights`` times the call's values give the call's output (the weights are the call's)."""
    value = arguments["value"].double()
    if arguments["enable_gqa"]:
        value = value.repeat_interleave(weights.shape[-3] // value.shape[-3], dim=-3)
    expected = weights @ value
    scale = float(expected.abs().max().clamp_min(1e-30))
    return expected.shape == output.shape and bool(((expected - output.double()).abs() <= 1e-4 * scale).all())


class Watch(torch.overrides.TorchFunctionMode):
    """During a pass: the shapes each attention module's q and k projections output, the tensors the
    module returns, and every softmax computed while it runs (the innermost module owns it), so
    that weights are found whether or not the module returns them."""

    def __init__(self, found: dict):
        super().__init__()
        self.found = found  # module id -> (module, Layout)
        self.active: list[int] = []
        self.shapes: dict[tuple[int, str], tuple[int, ...]] = {}
        self.tensors: dict[int, list[torch.Tensor]] = {key: [] for key in found}
        self.handles: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is MHA_FORWARD and self.active:
            out = self.multi_head_attention(*self.found[self.active[-1]], args, kwargs or {})
            if out is not None:
                return out
        if func is SDPA and self.active:
            return self.scaled_dot_product(self.found[self.active[-1]][1], args, kwargs or {})
        if func is torch.einsum and self.active and not kwargs:
            out = self.parameter_projection(*self.found[self.active[-1]], args)
            if out is not None:
                return out
        out = func(*args, **(kwargs or {}))
        if self.active and func in SOFTMAXES and isinstance(out, torch.Tensor) and out.dim() in (3, 4, 5):
            self.tensors[self.active[-1]].append(out.detach())
        return out

    def __enter__(self):
        for key, (module, layout) in self.found.items():
            self.handles.append(module.register_forward_pre_hook(lambda m, a, key=key: self.active.append(key)))
            if isinstance(layout.q[0].module, HandedIn):
                shims = (layout.q[0].module, layout.k[0].module)
                self.handles.append(module.register_forward_pre_hook(functools.partial(through_handed_in, shims),
                                                                     with_kwargs=True))
            self.handles.append(module.register_forward_hook(self.leave(key)))
            for role, blocks in (("q", layout.q), ("k", layout.k)):
                self.handles.append(blocks[0].module.register_forward_hook(self.shape_of(key, role)))
        return super().__enter__()

    def parameter_projection(self, module, layout, args) -> torch.Tensor | None:
        """``torch.einsum(EINSUM_PROJECTION, x, q or k)`` inside a watched module whose q and k are parameters
        (XLNet's): through the :class:`ParameterProjection` its layout holds (hooked like any projection), as
        (T, B, heads, d)."""
        shims = (layout.q[0].module, layout.k[0].module)
        if not isinstance(shims[0], ParameterProjection) or len(args) != 3 or args[0] != EINSUM_PROJECTION:
            return None
        for shim, parameter in zip(shims, (module.q, module.k)):
            if args[2] is parameter:
                return shim(args[1]).unflatten(-1, (shim.heads, shim.width))
        return None

    def multi_head_attention(self, module, layout, args, kwargs):
        """``F.multi_head_attention_forward`` called inside a watched module (nn.MultiheadAttention, or
        a module that passes it its own projections' weights, as WavLM's): q and k projected by the
        layout's modules (hooked like any projection; an nn.MultiheadAttention's :class:`InProjection`),
        identity in-projections after them, and its per-head weights (B, H, T_q, T_k) recorded.  None
        where the layout's modules are not the weights it is given (the call is then left alone)."""
        bound = MHA_ARGUMENTS.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        width = a["embed_dim_to_check"]
        if a["use_separate_proj_weight"]:
            weights = (a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"])
        else:
            weights = a["in_proj_weight"].split(width)
        biases = a["in_proj_bias"].split(width) if a["in_proj_bias"] is not None else (None, None, None)
        inputs = (a["query"], a["key"], a["value"])
        projected = [project(block.module, x, w, b)
                     for block, x, w, b in zip((layout.q[0], layout.k[0]), inputs, weights, biases)]
        if any(item is None for item in projected):
            return None
        projected.append(torch.nn.functional.linear(inputs[2], weights[2], biases[2]))
        eye = torch.eye(width, dtype=projected[0].dtype, device=projected[0].device)
        asked, average = a["need_weights"], a["average_attn_weights"]
        a.update(query=projected[0], key=projected[1], value=projected[2], use_separate_proj_weight=False,
                 in_proj_weight=eye.repeat(3, 1), in_proj_bias=None, need_weights=True, average_attn_weights=False,
                 q_proj_weight=None, k_proj_weight=None, v_proj_weight=None)
        output, weights = MHA_FORWARD(**a)
        self.tensors[self.active[-1]].append(weights.detach())
        return output, ((weights.mean(dim=-3) if average else weights) if asked else None)

    def scaled_dot_product(self, layout, args, kwargs):
        """``F.scaled_dot_product_attention`` called by a watched module's own code (Granite Speech's
        conformer, AIMv2's pooling head): the call runs as it was made, its query first through the
        layout's :class:`CallQuery` where the module has no q projection, and its probabilities
        (B, H, T_q, T_k), recomputed from its arguments, recorded where they reproduce its output."""
        arguments = {**SDPA_DEFAULTS, **dict(zip(SDPA_ARGUMENTS, args)), **kwargs}
        at_call = layout.q[0].module
        if isinstance(at_call, CallQuery):
            query = arguments["query"]
            batch, heads, tokens, width = query.shape
            flat = at_call(query.transpose(1, 2).reshape(batch, tokens, heads * width))
            arguments["query"] = flat.reshape(batch, tokens, heads, width).transpose(1, 2)
        output = SDPA(**arguments)
        if not arguments["dropout_p"]:
            weights = sdpa_weights(arguments)
            if reproduces(weights, arguments, output):
                self.tensors[self.active[-1]].append(weights)
        return output

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        return super().__exit__(*exc)

    def leave(self, key):
        def hook(module, args, output):
            if self.active and self.active[-1] == key:
                self.active.pop()
            items = output if isinstance(output, (tuple, list)) else (output,)
            self.tensors[key] += [item.detach() for item in items
                                  if isinstance(item, torch.Tensor) and item.dim() in (3, 4, 5)]
        return hook

    def shape_of(self, key, role):
        def hook(module, args, output):
            tensor = output[0] if isinstance(output, tuple) else output
            tensor = whole_path.as_tokens(tensor) if whole_path.channels_first(module) else tensor
            self.shapes.setdefault((key, role), tuple(tensor.shape))
        return hook

    def layouts(self, key, batch: int):
        """The token layouts (:func:`whole_path.token_layout`) of the module's q and k projections."""
        q_shape, k_shape = self.shapes.get((key, "q")), self.shapes.get((key, "k"))
        if q_shape is None or k_shape is None:
            return None, None
        return whole_path.token_layout(q_shape, batch), whole_path.token_layout(k_shape, batch)

    def weights(self, key, batch: int, heads: int) -> torch.Tensor | None:
        """The module's probabilities as (batch * windows, H, T_q, T_k): a tensor of that shape (or
        (batch * windows * H, T_q, T_k)) whose rows sum to 1, H the layout's heads, T_q and T_k as
        its q and k projections output them."""
        q_layout, k_layout = self.layouts(key, batch)
        if q_layout is None or k_layout is None:
            return None
        rows, t_q, t_k = batch * q_layout[0], q_layout[1], k_layout[1]
        over_queries = self.found[key][1].over_queries
        for item in self.tensors[key]:
            item = item.transpose(-1, -2) if over_queries else item  # rows over the module's queries
            beside_global = global_blocks(item, self.found[key][0], rows, heads, t_q, t_k)
            if beside_global is not None:  # Pegasus-X's local attention: its local keys' part, the rows whole
                return beside_global
            if three_blocks(item, self.found[key][0], rows, heads):  # LongT5's local attention
                block = self.found[key][0].block_len
                item = unblock(item.transpose(1, 2), self.found[key][0], t_q, t_k, chunk=block, past=block)
            elif item.dim() == 5 and item.shape[:2] == (rows, heads):
                # chunked local attention (Gemma 3n/4 audio), else one window's axis (Hiera's global stages)
                unblocked = unblock(item, self.found[key][0], t_q, t_k)
                item = unblocked if unblocked is not None else item.squeeze(2) if item.shape[2] == 1 else None
            elif item.dim() == 4 and item.shape[:3] == (rows, t_q, heads):  # banded, or T_q = H: as it is
                banded = unband(item, self.found[key][0], t_k)
                item = item if banded is None else banded
            elif item.dim() == 4 and item.shape[:2] == (rows, heads) and item.shape[2:] != (t_q, t_k):
                item = ngram_streams(item, self.tensors[key], self.found[key][0], t_q, t_k)  # ProphetNet's
            if item is None:
                continue
            if item.dim() == 3 and item.shape == (rows * heads, t_q, t_k):
                item = item.reshape(rows, heads, t_q, t_k)
            if item.dim() == 4 and item.shape == (rows, heads, t_q, t_k):  # other heads: a wrong layout
                sums = item.double().sum(dim=-1)
                if torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
                    return item
        return None


def three_blocks(weights: torch.Tensor, module, rows: int, heads: int) -> bool:
    """Weights (B, blocks, H, block_len, 3 block_len): each block of ``module.block_len`` queries over the keys
    of the block before it, its own and the next (LongT5LocalAttention, modeling_longt5.py)."""
    block = getattr(module, "block_len", None)
    return (isinstance(block, int) and weights.dim() == 5 and weights.shape[0] == rows and weights.shape[2] == heads
            and weights.shape[3:] == (block, 3 * block))


def global_blocks(weights: torch.Tensor, module, rows: int, heads: int, t_q: int, t_k: int) -> torch.Tensor | None:
    """Block-local weights beside global keys (B, H, blocks, block_size, G + block_size): each block of
    ``module.block_size`` queries over the G global tokens' keys, then its own block's (PegasusXGlobalLocalAttention,
    modeling_pegasus_x.py), as (B, H, T_q, T_k): each own-block column at its key.  The global columns are laid
    after the T_k keys, where each row is checked to sum to 1, and left out; None where the weights are not so,
    or where no query sees the designed keys 0 and 1."""
    block = getattr(module, "block_size", None)
    if not (isinstance(block, int) and weights.dim() == 5 and weights.shape[:2] == (rows, heads)
            and weights.shape[3] == block and weights.shape[4] > block and weights.shape[2] * block >= t_q):
        return None
    batch, _, blocks, _, width = weights.shape
    spread = blocks * block
    out = weights.new_zeros(batch, heads, blocks, block, spread + width - block)
    for n in range(blocks):
        out[..., n, :, n * block:(n + 1) * block] = weights[..., n, :, width - block:]
        out[..., n, :, spread:] = weights[..., n, :, :width - block]
    out = out.reshape(batch, heads, spread, -1)[:, :, :t_q]
    sums = out.double().sum(dim=-1)
    if spread < t_k or not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        return None
    if not bool((out[..., :2] > 0).all(dim=-1).any()):
        # no query sees both designed keys: they are masked padding (a staggered layer pads block_size // 2
        # tokens before its own, so its projections' first tokens are not the sequence's)
        return None
    return out[..., :t_k]


def unblock(weights: torch.Tensor, module, t_q: int, t_k: int, chunk=None, past=None) -> torch.Tensor | None:
    """Chunked local attention's weights (B, H, blocks, chunk, context), queries in blocks of
    ``module.chunk_size`` and block n's context starting ``module.max_past_horizon`` keys before it
    (Gemma 3n's and Gemma 4's audio encoders), or the ``chunk`` and ``past`` given, as (B, H, T_q, T_k):
    each context column at its key."""
    chunk = chunk if chunk is not None else getattr(module, "chunk_size", None)
    past = past if past is not None else getattr(module, "max_past_horizon", None)
    batch, heads, blocks, size, context = weights.shape
    if not isinstance(chunk, int) or not isinstance(past, int) or size != chunk or blocks * chunk < t_q:
        return None
    out = weights.new_zeros(batch, heads, blocks, chunk, t_k)
    for n in range(blocks):
        start = n * chunk - past  # the key of context column 0
        first, end = max(0, -start), min(context, t_k - start)
        if end > first:
            out[..., n, :, start + first:start + end] = weights[..., n, :, first:end]
    return out.reshape(batch, heads, blocks * chunk, t_k)[:, :, :t_q]


def ngram_streams(main: torch.Tensor, tensors: list, module, t_q: int, t_k: int) -> torch.Tensor | None:
    """An n-gram self-attention's weights as (B, H, T_q, T_k), its q and k projected over its 1 + ``module.ngram``
    streams of T tokens laid end to end (ProphetNetNgramSelfAttention, T_q = T_k = (1 + ngram) T): the main
    stream's (B, H, T, T), its queries over its keys, and, from among ``tensors``, the predict streams'
    (B, ngram, H, T, 2T), stream s's queries over the main stream's keys, then its own, each at its key."""
    ngram = getattr(module, "ngram", None)
    if not isinstance(ngram, int) or t_q != t_k or t_q % (1 + ngram):
        return None
    batch, heads, tokens = main.shape[0], main.shape[1], t_q // (1 + ngram)
    predict = next((item for item in tensors if item.shape == (batch, ngram, heads, tokens, 2 * tokens)), None)
    if main.shape[2:] != (tokens, tokens) or predict is None:
        return None
    out = main.new_zeros(batch, heads, t_q, t_k)
    out[..., :tokens, :tokens] = main
    for stream in range(1, 1 + ngram):
        rows = slice(stream * tokens, (stream + 1) * tokens)
        out[..., rows, :tokens] = predict[:, stream - 1, ..., :tokens]
        out[..., rows, rows] = predict[:, stream - 1, ..., tokens:]
    return out


def unband(weights: torch.Tensor, module, t_k: int) -> torch.Tensor | None:
    """Sliding-window weights (B, T_q, H, 2w + 1) over keys i - w .. i + w, w the module's
    ``one_sided_attn_window_size`` (Longformer's and LED's local attention), as (B, H, T_q, T_k)."""
    window = getattr(module, "one_sided_attn_window_size", None)
    batch, t_q, heads, width = weights.shape
    if not isinstance(window, int) or width != 2 * window + 1:
        return None
    out = weights.new_zeros(batch, heads, t_q, t_k)
    banded = weights.permute(0, 2, 1, 3)
    for column in range(width):
        shift = column - window  # key = query + shift
        first, end = max(0, -shift), min(t_q, t_k - shift)
        if end > first:
            out[:, :, torch.arange(first, end), torch.arange(first + shift, end + shift)] = banded[:, :, first:end, column]
    return out


def projection_shapes(model, layouts: dict, inputs: dict) -> dict:
    """{(module id, "q" or "k"): shape} of the projections' outputs in a plain pass on ``inputs``."""
    with Watch(layouts) as watch, torch.no_grad():
        model(**inputs)
    return watch.shapes


def designed_weights(model, feeding, layouts: dict, units: dict, designs, tokens: int, far: int) -> dict:
    """:func:`designed_pass` of all the designs, or where the model refuses them as one batch (TVP's 2-d
    position embeddings are viewed at batch 1), one pass a design, their weights stacked."""
    try:
        return designed_pass(model, feeding, layouts, units, designs, tokens, far)
    except RuntimeError:
        if len(designs) == 1:
            raise
    passes = [designed_pass(model, feeding, layouts, units, (design,), tokens, far) for design in designs]
    return {key: torch.cat([found[key] for found in passes]) for key in passes[0]
            if all(key in found for found in passes)}


def designed_pass(model, feeding, layouts: dict, units: dict, designs, tokens: int, far: int) -> dict:
    """{module id: (B, H, T, T_k) weights, windows laid end to end along T} for one designed forward
    pass; ``layouts`` maps module ids to (module, Layout).  The designs are written at the token
    counts the projections output (an image's patches, keys reduced as PVT's are), per window
    where a module attends within windows (Swin)."""
    vocab = getattr(model.config, "vocab_size", None) or 100
    inputs = feed.path_inputs(model, feeding, designs, tokens, far, vocab)
    token_counts = {}
    for key, shape in projection_shapes(model, layouts, inputs).items():
        layout = whole_path.token_layout(shape, len(designs))
        if layout is not None:
            token_counts[key] = layout[1]
    # a module left one key (an image reduced to one patch at that stage) has no p_0 / p_1 to read
    layouts = {key: item for key, item in layouts.items() if token_counts.get((key, "k"), tokens) >= 2}
    handles = whole_path.install({key: layout for key, (_, layout) in layouts.items()}, units, designs, tokens,
                                 next(model.parameters()).dtype, token_counts)
    try:
        try:
            with Watch(layouts) as watch, torch.no_grad():
                model(**inputs, output_attentions=True)
        except (TypeError, AttributeError, IndexError):  # a model that fails when asked for its weights
            with Watch(layouts) as watch, torch.no_grad():  # (MaskFormer-Swin's encoder): its softmaxes watched
                model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    found = {}
    for key in layouts:
        weights = watch.weights(key, len(designs), layouts[key][1].q[0].heads)
        if weights is not None:
            windows = weights.shape[0] // len(designs)
            found[key] = weights.reshape(len(designs), windows, *weights.shape[1:]).transpose(1, 2).flatten(2, 3)
    return found


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


def inside(name: str, names) -> bool:
    return any(name == outer or name.startswith(outer + ".") for outer in names)


def inline_rows(model, feeding, declared_of, tokens: int, longer_tokens: int, far: int, only=None) -> list[dict]:
    """Layer rows (as audit.layer_rows makes them) with the whole path read from the weights; ``only``:
    the names of the modules to read (and those inside them), where the others are read otherwise."""
    found = [item for item in attention_modules(model) if only is None or inside(item[0], only)]
    if not found:
        raise UserError("no attention function to intercept and no module with q and k projections")
    units = whole_path.inside_clip({id(module): 0.1 * math.sqrt(options[0].q[0].size) for _, module, options in found},
                              clip_of(model.config))
    positions = feed.accepts(model, "position_ids")
    pending = {id(module): (module, list(options)) for _, module, options in found}
    chosen, main_rows = {}, {}
    while pending:
        trial = {key: (module, options.pop(0)) for key, (module, options) in pending.items()}
        try:
            main = designed_weights(model, feeding, trial, units, whole_path.DESIGNS, tokens, far)
        except (RuntimeError, ValueError, IndexError):
            main = {}
        for key, (module, layout) in trial.items():
            if key in main:
                rows = rows_from_weights(main[key])
                if layout.separate or plausible(whole_path.summarize(rows, whole_path.logit_unit(units, key), None, positions)):
                    chosen[key], main_rows[key] = (module, layout), rows
                    pending.pop(key)
        pending = {key: item for key, item in pending.items() if item[1]}
    longer = {}
    if chosen and feed.main_input(model) == "input_ids":  # an image or a signal has one length here
        try:
            longer = designed_weights(model, feeding, chosen, units, whole_path.LENGTH_DESIGNS, longer_tokens, far)
        except (RuntimeError, ValueError, IndexError):
            pass
    rows = []
    for index, (name, module, _) in enumerate(found):
        key = id(module)
        if key not in chosen:
            continue
        layout = chosen[key][1]
        summary = {**whole_path.summarize(main_rows[key], whole_path.logit_unit(units, key),
                                          rows_from_weights(longer[key]) if key in longer else None, positions),
                   "layout": layout.name}
        d = layout.q[0].size
        rows.append(LayerReading(name=name, layer=index, d_k=d, declared=declared_of(module, index, d).to_dict(),
                                 backends={"eager": BackendLayer(dict(NOT_REACHABLE), summary)}, from_weights=True))
    if not rows:
        raise UserError(NO_WEIGHTS)
    return rows
