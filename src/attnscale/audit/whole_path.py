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

import inspect
import math
from dataclasses import dataclass

import torch

from . import companions, series
from .sizes import TINY

Q_NAMES = ("q_proj", "query", "q", "query_proj", "Wq", "wq", "q_lin", "to_q", "q_b_proj", "q_attn", "linear_q",
           "project_q", "projection_query", "to_query", "q_head", "queries")
K_NAMES = ("k_proj", "key", "k", "key_proj", "Wk", "wk", "k_lin", "to_k", "linear_k", "project_k", "projection_key",
           "to_key", "k_head", "key_protein")  # key_protein: Evolla's aligner, its keys the compressed protein
FUSED_NAMES = ("c_attn", "qkv_proj", "query_key_value", "Wqkv", "qkv", "W_pack", "qkv_linear", "in_proj",
               "queries_keys_values", "att_proj")  # att_proj: Bark's
KV_NAMES = ("c_attn", "kv_proj", "keys_values", "to_kv")  # k and v from one projection beside a q projection
CHECK_TOL = 1e-6  # relative change that counts as "changed" in the layout check


@dataclass
class Block:
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
    q: list[Block]
    k: list[Block]
    over_queries: bool = False  # the module's softmax runs over its queries: q and k swapped (inline.over_queries_layout)


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
            layouts.append(Layout("latent (MLA)", [Block(q_mod, 0, heads_q, d_q, 0, d_q)],
                                  [Block(kv_b, 0, heads_k, nope + v_dim, 0, nope), Block(kv_a, latent, 1, rope, nope, rope)]))
    if q_mod is not None:
        q_out = out_features(q_mod)
        q_blocks = []
        if q_out == heads_q * d_q:
            q_blocks.append([Block(q_mod, 0, heads_q, d_q, 0, d_q)])
        elif q_out == 2 * heads_q * d_q:  # q with a gate: per head [q | gate], or all q then all gates
            q_blocks += [[Block(q_mod, 0, heads_q, 2 * d_q, 0, d_q)], [Block(q_mod, 0, heads_q, d_q, 0, d_q)]]
        k_blocks = []
        if k_mod is not None and out_features(k_mod) == heads_k * d_k:
            k_blocks.append([Block(k_mod, 0, heads_k, d_k, 0, d_k)])
        fused_kv = child(module, KV_NAMES)
        kv_out = out_features(fused_kv) if fused_kv is not None else None
        if k_mod is None and kv_out == 2 * heads_k * d_k:
            k_blocks.append([Block(fused_kv, 0, heads_k, d_k, 0, d_k)])  # [k | v], e.g. GPT-2 cross-attention
        if k_mod is None and kv_out and kv_out % heads_k == 0 and kv_out // heads_k > d_k:
            stride = kv_out // heads_k  # per head [k | v], v as wide as it is (LeViT's keys_values)
            k_blocks.append([Block(fused_kv, 0, heads_k, stride, 0, d_k)])
        layouts += [Layout("separate", q, k) for q in q_blocks for k in k_blocks]
    fused = child(module, FUSED_NAMES)
    if fused is not None and d_q == d_k:
        total, d = out_features(fused), d_q
        if total == heads_q * d + 2 * heads_k * d:
            layouts.append(Layout("fused [q|k|v]", [Block(fused, 0, heads_q, d, 0, d)],
                                  [Block(fused, heads_q * d, heads_k, d, 0, d)]))
        if 1 < heads_k < heads_q and heads_q % heads_k == 0 and total == heads_q * d + 2 * heads_k * d:
            group, width = heads_q // heads_k, (heads_q // heads_k + 2) * d  # per key/value group: its queries, k, v
            layouts.append(Layout("fused per key/value group [q..|k|v]",
                                  [Block(fused, j * width, group, d, 0, d) for j in range(heads_k)],
                                  [Block(fused, j * width + group * d, 1, d, 0, d) for j in range(heads_k)]))
        if heads_q == heads_k and total % heads_q == 0 and total // heads_q > 2 * d:
            stride = total // heads_q  # v as wide as it is: 3 d, or LeViT's attention_ratio x d
            layouts.append(Layout("fused per head [q|k|v]", [Block(fused, 0, heads_q, stride, 0, d)],
                                  [Block(fused, d, heads_k, stride, 0, d)]))
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


def write_hook(writes: list[tuple[Block, torch.Tensor, object]]):
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


def accepts(model, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


PATCHES = "patches"  # flattened image patches and their (t, h, w) grid: Qwen2-VL-style vision towers
GRID_NAMES = ("grid_thw", "image_grid_thw")  # what such a tower calls the grid


def required_inputs(model) -> list[str]:
    """The forward arguments without a default (self and **kwargs aside)."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def modalities(model) -> tuple[str, ...]:
    found = getattr(model, "input_modalities", None) or ()
    return (found,) if isinstance(found, str) else tuple(found)


def main_input(model) -> str:
    """What the model runs on: its main_input_name, unless its forward requires something else (a
    patch grid, an image where the class still names token ids or calls it ``image``, audio features
    under another name, another encoder's states)."""
    name = getattr(model, "main_input_name", "input_ids") or "input_ids"
    name = "input_ids" if name == CODEBOOK_INDEX else name  # the index is given beside the ids (codebook_index)
    required = required_inputs(model)
    if any(grid in required for grid in GRID_NAMES):
        return PATCHES
    if required == ["pixel_values"] and any(accepts(model, grid) for grid in GRID_NAMES) and not accepts(model, "input_ids"):
        return PATCHES  # a grid it takes as optional but reads (PaddleOCR-VL's vision tower)
    data = data_inputs(required)
    if len(data) == 1 and not accepts(model, name) and modalities(model) == ("audio",):
        return "input_features"  # Granite Speech's encoder takes its features as hidden_states (Phi-4's with a mask)
    if len(data) == 1 and data[0] in STATES_NAMES and getattr(model.config, "hidden_size", None):
        return STATES_INPUT
    if (len(required) == 1 and required[0] in IMAGE_NAMES) or name == VIDEO_INPUT:
        return "pixel_values"
    if len(required) == 1 and required[0].endswith(EMBEDS_SUFFIX):  # a Q-Former runs on its query embeddings
        return required[0]
    if not accepts(model, name) and accepts(model, "pixel_values"):  # GOT-OCR2's vision encoder keeps input_ids' name
        return "pixel_values"
    if accepts(model, FLATTENED) and not accepts(model, "pixel_values") and (name == FLATTENED or not accepts(model, name)):
        return "pixel_values"  # an image given as its flattened patches (Pix2Struct, Kosmos-2.5's vision tower)
    return name


VIDEO_INPUT = "pixel_values_videos"  # what V-JEPA 2 and VideoPrism call their clip
IMAGE_NAMES = ("pixel_values", "image")  # BridgeTower's vision tower calls its image "image"
STATES_INPUT = "hidden_states"  # FLAVA's multimodal encoder runs on its unimodal encoders' states
STATES_NAMES = (STATES_INPUT, "context")  # "context": a perceiver resampler's (Idefics2's) image states
FRAME_FIELDS = ("num_frames", "frames_per_clip")  # a video model's clip length (its position table's)


def data_inputs(required: list[str]) -> list[str]:
    """The required inputs that carry data: a mask the forward requires beside them is made with them
    (audio_input: every position real), so it does not make the input another kind."""
    return [name for name in required if not name.endswith("mask")]


def image_name(model) -> str:
    """The keyword an image (or clip) is passed under."""
    if getattr(model, "main_input_name", None) == VIDEO_INPUT:
        return VIDEO_INPUT
    required = required_inputs(model)
    return next((name for name in IMAGE_NAMES if name in required), "pixel_values")


# a detector's image: its backbone downsamples by 32, leaving 4 x 4 feature vectors for the encoder
BACKBONE_IMAGE = 128


def tower_image_size(config):
    """The image size of a composite whose own config states none: its vision tower's, or that tower's
    backbone's (SAM 2's Hiera)."""
    vision = getattr(config, "vision_config", None)
    for part in (vision, getattr(vision, "backbone_config", None)):
        size = getattr(part, "image_size", None)
        if size:
            return size
    return None


def clip_length(config) -> int | None:
    """A video model's frames a clip, as its config states them (FRAME_FIELDS); None for an image model."""
    return next((value for name in FRAME_FIELDS if isinstance(value := getattr(config, name, None), int)), None)


def pixel_values(config, batch: int) -> torch.Tensor:
    """A fixed image batch at the config's size, or a clip of the config's frame count for a video
    model, (batch, frames, channels, height, width) (the path probe overwrites q, k and v, so only
    its shape matters; the kernel probe reads the real call's shapes)."""
    size = (getattr(config, "image_size", None) or getattr(config, "crop_size", None) or tower_image_size(config)
            or (BACKBONE_IMAGE if getattr(config, "backbone_config", None) is not None else 32))
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = getattr(config, "num_channels", 3) or 3
    frames = clip_length(config)
    shape = (channels, height, width) if frames is None else (frames, channels, height, width)
    generator = torch.Generator().manual_seed(0)
    return torch.randn(1, *shape, generator=generator).repeat(batch, *([1] * len(shape)))


def patch_side(config, default: int = 14) -> int:
    """The config's patch size, one side (the first of a per-axis pair)."""
    size = getattr(config, "patch_size", None) or default
    return size if isinstance(size, int) else tuple(size)[0]


PATCH_GRID = 4  # a pre-cut image's patches a side (NaFlex: SigLIP 2's vision tower)


def image_inputs(model, batch: int, feeding) -> dict:
    """The image inputs of ``batch`` copies of one fixed image, in the form the model's forward asks
    for: the pixels (with each image's patch grid where it takes ``target_sizes``, as MiniCPM-V's
    tower does); the image already cut into patches with their grid and a patch mask (NaFlex); or
    the image as its tiles with an aspect-ratio id and a tile mask (Mllama)."""
    required = required_inputs(model)
    if accepts(model, FLATTENED) and not accepts(model, "pixel_values"):
        return flattened_image(model.config, batch)
    if "aspect_ratio_ids" in required:
        return tiled_image(model.config, batch)
    if "spatial_shapes" in required:
        return cut_image(model.config, batch, next((name for name in required if name.endswith("_mask")), None))
    positions = next((name for name in required if name.endswith(PATCH_POSITIONS)), None)
    if positions:  # Gemma 4: the patches with each one's (x, y), no grid
        inputs = cut_image(model.config, batch, None)
        del inputs["spatial_shapes"]
        return {**inputs, positions: patch_positions(batch)}
    images = pixel_values(model.config, batch)
    if any(name.startswith(companions.PROMPT_PREFIX) for name in required):  # SegGPT: image and prompt, stacked
        images = images[..., : images.shape[-2] // 2, :].contiguous()
    count = feeding.known("image_axis")
    if count == FOLD_FRAMES and images.dim() == 5:  # X-CLIP's vision tower: the clip's frames along the batch axis
        images = images.flatten(0, 1)
    if count:  # images given per sample (LightGlue's pair): (batch, count, channels, height, width)
        images = torch.stack([images.flip(-1) if i % 2 else images for i in range(count)], dim=1)
    inputs = {image_name(model): images, **companions.beside_image(model, batch, COMPANION_TOKENS, required, images)}
    beside = feeding.known("image_beside") or ()
    if "boxes" in beside:
        inputs["input_boxes"] = torch.tensor([[companions.PROMPT_BOX]] * batch)
    if "text" in beside and "input_ids" not in inputs:
        inputs.update(companions.beside_image(model, batch, COMPANION_TOKENS, ["input_ids"], images))
    if accepts(model, "target_sizes") and images.dim() == 4:
        size = patch_side(model.config)
        inputs["target_sizes"] = torch.tensor([[images.shape[-2] // size, images.shape[-1] // size]] * batch)
    return inputs


IMAGE_COUNTS = (1, 2)  # images per sample to try where one image a sample is refused (a pair: LightGlue)
FOLD_FRAMES = 0  # the image axis of a video model that takes its clip's frames along the batch axis (X-CLIP's tower)
COMPANION_TOKENS = 8  # the text an image model requires beside its image (Grounding DINO's)
PATCH_POSITIONS = "_position_ids"  # a pre-cut image's per-patch (x, y) (Gemma 4's pixel_position_ids)


def patch_positions(batch: int) -> torch.Tensor:
    """Each patch's (x, y) on the PATCH_GRID x PATCH_GRID grid, row by row: (batch, patches, 2)."""
    index = torch.arange(PATCH_GRID * PATCH_GRID)
    return torch.stack([index % PATCH_GRID, index // PATCH_GRID], dim=-1).repeat(batch, 1, 1)


def clip_frames(config) -> int:
    """The frames of a clip: as the vision config states them (:func:`clip_length`), else the tiny size."""
    return clip_length(getattr(config, "vision_config", None) or config) or TINY["num_frames"]


def takes_companions(model) -> bool:
    """Whether the forward takes anything companions.beside_tokens gives (boxes, region features, an image)."""
    return any(accepts(model, name) for name in (*companions.BOX_NAMES, "visual_feats", "pixel_values"))


def with_placeholders(ids: torch.Tensor, feeding) -> torch.Tensor:
    """(batch, tokens) ids followed by the placeholders of each medium the model is fed beside them (``feeding.media``)."""
    tails = [torch.full((ids.shape[0], count), token, dtype=ids.dtype) for token, count, _ in feeding.media]
    return torch.cat([ids, *tails], dim=-1)


def media_inputs(batch: int, feeding) -> dict:
    """The inputs of each medium of ``feeding.media``, repeated for ``batch`` sequences."""
    return {name: value.repeat(batch, *([1] * (value.dim() - 1)))
            for _, _, inputs in feeding.media for name, value in inputs.items()}


# a byte model's patch lengths (BLT), given as patches of 2 bytes: its own entropy patching always starts patches at
# bytes 0 and 1 (patch_lengths_from_entropies), so no patch query of its local encoder's cross-attention would see
# both designed keys (bytes 0 and 1)
PATCH_LENGTHS, PATCH_BYTES = "patch_lengths", 2


def patch_lengths(model, batch: int, tokens: int) -> dict:
    if not accepts(model, PATCH_LENGTHS) or tokens % PATCH_BYTES:
        return {}
    return {PATCH_LENGTHS: torch.full((batch, tokens // PATCH_BYTES), PATCH_BYTES, dtype=torch.long)}


def token_companions(model, batch: int, tokens: int, feeding) -> dict:
    """What a token-id model found to need beside its ids (``feeding.beside``) for ``batch`` sequences, the
    sequences of its own it reads beside them wherever it takes them (companions.texts_beside), the media
    merged into its placeholders (``feeding.media``) and a byte model's patch lengths."""
    given = {**companions.texts_beside(model, batch, tokens, lambda name: accepts(model, name)),
             **media_inputs(batch, feeding), **patch_lengths(model, batch, tokens)}
    if not feeding.known("beside"):
        return given
    frames = feeding.beside_frames
    image = ((lambda count: pixel_values(model.config, count).unsqueeze(1).repeat(1, frames, 1, 1, 1)) if frames
             else (lambda count: pixel_values(model.config, count)))
    return {**given, **companions.beside_tokens(model, batch, tokens, lambda name: accepts(model, name), image)}


def beside_rotaries(model) -> list[torch.nn.Module]:
    """The rotary embeddings of the parts that run on a sequence of companions.TEXTS_BESIDE (Evolla's protein
    encoder: built from ``protein_encoder_config``), which number that sequence's positions themselves
    (arange over it) rather than take the position_ids given beside the main ids."""
    found = []
    for name in companions.TEXTS_BESIDE:
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


def tiled_image(config, batch: int) -> dict:
    """One image as its max_num_tiles tiles, all real (the aspect-ratio id only selects a learned embedding)."""
    tiles = config.max_num_tiles
    images = pixel_values(config, batch)[:, None, None].repeat(1, 1, tiles, 1, 1, 1)
    return {"pixel_values": images, "aspect_ratio_ids": torch.ones(batch, 1, dtype=torch.long),
            "aspect_ratio_mask": torch.ones(batch, 1, tiles, dtype=torch.long)}


FLATTENED = "flattened_patches"  # Pix2Struct-style: (batch, patches, 2 + patch values), each patch's row and column first


def flattened_image(config, batch: int) -> dict:
    """PATCH_GRID x PATCH_GRID patches as Pix2Struct's processor flattens them: each patch's row and column
    (from 1; 0 marks padding) and then its patch_embed_hidden_size values (channels x patch x patch)."""
    patches = PATCH_GRID * PATCH_GRID
    width = getattr(config, "patch_embed_hidden_size", None) or (
        (getattr(config, "num_channels", 3) or 3) * patch_side(config) ** 2)
    index = torch.arange(patches)
    places = torch.stack([index // PATCH_GRID + 1, index % PATCH_GRID + 1], dim=-1).float()
    generator = torch.Generator().manual_seed(0)
    one = torch.cat([places, torch.randn(patches, width, generator=generator)], dim=-1).unsqueeze(0)
    return {FLATTENED: one.repeat(batch, 1, 1)}


def cut_image(config, batch: int, mask: str | None) -> dict:
    """PATCH_GRID x PATCH_GRID patches of channels x patch x patch values, their grid, every patch real."""
    size, patches = patch_side(config), PATCH_GRID * PATCH_GRID
    generator = torch.Generator().manual_seed(0)
    one = torch.randn(1, patches, (getattr(config, "num_channels", 3) or 3) * size * size, generator=generator)
    inputs = {"pixel_values": one.repeat(batch, 1, 1), "spatial_shapes": torch.tensor([[PATCH_GRID, PATCH_GRID]] * batch)}
    if mask:
        inputs[mask] = torch.ones(batch, patches, dtype=torch.long)
    return inputs


AUDIO_INPUTS = ("input_values", "input_features", "audio_mel")  # audio_mel: Gemma 3n's encoder
EMBEDS_SUFFIX = "_embeds"
EMBEDS_TOKENS = 16  # vectors of an embeddings input (hidden_size wide)


MEL_FIELDS = ("num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels", "input_feat_size")
# where the config states none at its top: its sub-configs' (an encoder's), then the common counts;
# feature projections that take stacked frames (wav2vec2-BERT's 2 x 80, Fun-ASR's 7 x mels) state their width themselves
MORE_MEL_FIELDS = (*MEL_FIELDS, "feature_projection_input_dim", "input_dim", "input_size")
COMMON_MELS = (80, 128)
STACKED = (2, 4)  # frames stacked into one feature vector (Granite Speech: delta-expanded, then in pairs)
SAMPLES = 6400  # raw samples: 16 frames of a 400-sample window at stride 320
SAMPLE_LENGTHS = "sample_lengths"  # how a required input of each clip's waveform samples ends
LENGTHS = "feature_lens"  # frames per clip, clips packed along time with no batch axis (Qwen2.5-Omni's audio encoder)


def configs_within(config) -> list:
    """The config and its sub-configs (an encoder's, an audio tower's), the config first."""
    from transformers import PretrainedConfig

    return [config, *(value for value in vars(config).values() if isinstance(value, PretrainedConfig))]


def stated_feature_widths(config) -> list[int]:
    """The feature widths the config and its sub-configs state (MORE_MEL_FIELDS), in that order."""
    return [value for cfg in configs_within(config) for name in MORE_MEL_FIELDS
            if isinstance(value := getattr(cfg, name, None), int) and value > 0]


def audio_shapes(config, takes: str) -> list[tuple[int, ...]]:
    """Shapes (without the batch) to try for an audio input, most likely first: raw samples (6400:
    16 frames of a 400-sample window at stride 320), or features (channels, frames) and (frames,
    channels), frames twice the encoder's positions where the config has them; channels as the
    config states them (80 where it does not), then as its sub-configs state them, the common
    counts and stacked frames; then one channel of (frames, channels) (CLAP's spectrogram image); last,
    a whole clip of ``max_length`` frames (AST's position table).  Raw samples also with a channel
    axis (a mono waveform: Mimi's, OmniASR's)."""
    first = next((value for name in MEL_FIELDS if isinstance(value := getattr(config, name, None), int) and value > 0),
                 80)
    more = stated_feature_widths(config)
    mels = list(dict.fromkeys([first, *more, *COMMON_MELS, *(k * m for m in [first, *more] for k in STACKED)]))
    lengths = frame_lengths(config)
    features = [shape for length in lengths for mel in mels for shape in ((mel, length), (length, mel))]
    features.append((1, lengths[0], first))
    clip = getattr(config, "max_length", None)
    if isinstance(clip, int) and 0 < clip <= 2048:
        features.append((clip, first))
    channels = getattr(config, "audio_channels", None)  # a codec's raw samples: (channels, samples), mono too
    samples = list(dict.fromkeys([(SAMPLES,), (1, SAMPLES),
                                  *([(channels, SAMPLES)] if isinstance(channels, int) and 0 < channels <= 2 else [])]))
    return [*samples, *features] if takes == "input_values" else [*features, *samples]


def frame_lengths(config) -> list[int]:
    """Frames of a features input: twice the encoder's positions where the config has them (else 32),
    then 2 x n_window (Qwen3-ASR reads its frames in chunks of that)."""
    positions = getattr(config, "max_source_positions", None)
    frames = 2 * positions if isinstance(positions, int) and 0 < positions <= 256 else 32
    window = getattr(config, "n_window", None)
    return [frames] + ([2 * window] if isinstance(window, int) and 0 < 2 * window != frames else [])


def keyword(model, takes: str) -> str:
    """The keyword the input goes under: its own name, else the forward's one required input."""
    data = data_inputs(required_inputs(model))
    return takes if accepts(model, takes) or len(data) != 1 else data[0]


def padding_mask(model, name: str) -> bool:
    """A BoolTensor mask marks padding (True = padded: Gemma 3n's audio_mel_mask), as transformers'
    boolean masks do (bool_masked_pos, mask_time_indices); other masks mark what is real (1)."""
    try:
        annotation = inspect.signature(model.forward).parameters[name].annotation
    except (TypeError, ValueError, KeyError):
        return False
    return "BoolTensor" in str(annotation)


def audio_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    generator = torch.Generator().manual_seed(0)
    takes = main_input(model)
    one = torch.randn(1, *shape, generator=generator)
    inputs = {takes: one.repeat(batch, *([1] * len(shape)))}
    if accepts(model, LENGTHS) and len(shape) == 2:  # clips packed along time, their lengths apart
        inputs = {takes: one[0].repeat(1, batch), LENGTHS: torch.tensor([shape[-1]] * batch)}
    # the frames: the last axis of (channels, frames), the one before of (frames, channels)
    frames = shape[-1] if len(shape) < 2 or shape[-1] in frame_lengths(model.config) else shape[-2]
    # a frame mask the encoder requires (Qwen3-ASR's) or reads without a default of its own
    # (AudioFlamingo 3's input_features_mask): every frame real
    for name in [*required_inputs(model), f"{takes}_mask"]:
        if name.endswith("mask") and name not in inputs and len(shape) > 1 and accepts(model, name):
            padding = padding_mask(model, name)
            inputs[name] = torch.full((batch, frames), not padding, dtype=torch.bool if padding else torch.long)
    # each clip's length in waveform samples, which the forward requires beside its features (Dots3 Note's
    # chunk_sample_lengths): every frame real, hop_length samples a frame
    hop = getattr(model.config, "hop_length", None)
    for name in required_inputs(model):
        if name.endswith(SAMPLE_LENGTHS) and name not in inputs and len(shape) > 1 and isinstance(hop, int) and hop > 0:
            inputs[name] = torch.tensor([frames * hop] * batch)
    inputs.update(features_beside_samples(model, batch, shape, inputs))
    if getattr(model.config, "is_encoder_decoder", False):
        if not accepts(model, "decoder_input_ids") and accepts(model, f"decoder_{takes}"):
            inputs[f"decoder_{takes}"] = inputs[takes][:, :8].clone()  # SpeechT5 without pre-nets: frames both sides
        else:
            inputs["decoder_input_ids"] = (torch.arange(8) % 4 + 1).repeat(batch, 1)
    name = keyword(model, takes)
    if name != takes:
        inputs[name] = inputs.pop(takes)
    return inputs


def merge_size(config) -> int:
    merge = getattr(config, "spatial_merge_size", None) or getattr(config, "merge_size", None) or 1
    return merge if isinstance(merge, int) and merge > 0 else 1


def patch_shapes(config) -> list[tuple[int, ...]]:
    """Shapes of one patch to try: flattened channels x time x height x width (Qwen2-VL), then the
    same unflattened, then without the time axis."""
    size = patch_side(config)
    channels = getattr(config, "in_channels", None) or getattr(config, "num_channels", None) or 3
    frames = getattr(config, "temporal_patch_size", None) or 1
    merge = merge_size(config)
    shapes = [(channels * frames * size * size,), (channels, frames, size, size), (channels * size * size,),
              (channels, size, size), (channels * 2 * size * size,)]  # the last: two frames a patch, unstated
    if merge > 1:  # one merge unit's pixels, channels last (Inkling 2: a row per language-model token)
        shapes.append((merge * size, merge * size, channels))
    shapes.append((BATCH_OF_ONE, channels, size, size))  # the packed patches under a batch axis of one (PaddleOCR-VL)
    return list(dict.fromkeys(shapes))


BATCH_OF_ONE = 0  # a patch shape's first entry: the packed sequence is passed as (1, patches, *shape[1:])


def patch_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    """``batch`` images of 2 merge units a side (4 x 4 patches at merge 2), one grid row each, packed
    one after the other as these towers take them (no batch axis: the designed passes cannot write
    per design, so only the attention function's factor is read)."""
    side = 2 * merge_size(model.config)
    required = required_inputs(model)
    grid = next(name for name in GRID_NAMES if accepts(model, name))
    data = next((name for name in required if name not in (*GRID_NAMES, "merge_sizes")),
                getattr(model, "main_input_name", "pixel_values"))
    generator = torch.Generator().manual_seed(0)
    lead = shape[:1] == (BATCH_OF_ONE,)
    shape = shape[1:] if lead else shape
    one = torch.randn(side * side, *shape, generator=generator)
    packed = one.repeat(batch, *([1] * len(shape)))
    inputs = {data: packed.unsqueeze(0) if lead else packed, grid: torch.tensor([[1, side, side]] * batch)}
    if "merge_sizes" in required:
        inputs["merge_sizes"] = torch.tensor([merge_size(model.config)] * batch)
    return inputs


# vectors a model takes as they are: a codec decoder's latents (batch, width, frames: Mimi's, Pocket TTS's), a
# Perceiver's inputs without a preprocessor (batch, tokens, d_model); their width is one of WIDTH_FIELDS
CONTINUOUS_INPUTS = ("latents", "inputs")
WIDTH_FIELDS = ("hidden_size", "d_model")
# inputs whose shape is found by trying candidates in turn
SHAPED_INPUTS = (*AUDIO_INPUTS, PATCHES, series.SERIES_INPUT, series.TRAJECTORY_INPUT, *CONTINUOUS_INPUTS)


def is_shaped(takes: str) -> bool:
    return takes in SHAPED_INPUTS or takes.endswith(EMBEDS_SUFFIX) or takes == STATES_INPUT


def features_beside_samples(model, batch: int, shape: tuple[int, ...], given: dict) -> dict:
    """Features a codec requires beside its raw samples for a semantic encoder (X-Codec 2's and NeuCodec's
    input_features): (frames, width), a frame every hop_length samples, as wide as a sub-config's feature
    projection states (wav2vec2-BERT's 2 x 80 stacked mels); the encoder's hop where the config states one
    apart from its output's (NeuCodec resynthesises at another sampling rate)."""
    hop = getattr(model.config, "encoder_hop_length", None) or getattr(model.config, "hop_length", None)
    names = [name for name in required_inputs(model) if name in AUDIO_INPUTS and name not in given]
    if not names or not isinstance(hop, int) or hop <= 0 or shape[-1] % hop:
        return {}
    width = next(iter(stated_feature_widths(model.config)), COMMON_MELS[0])
    generator = torch.Generator().manual_seed(3)
    features = torch.randn(1, shape[-1] // hop, width, generator=generator).repeat(batch, 1, 1)
    return {name: features for name in names}


def continuous_shapes(config) -> list[tuple[int, ...]]:
    """EMBEDS_TOKENS vectors of each width the config states, tokens first, then channels first."""
    widths = dict.fromkeys(value for name in WIDTH_FIELDS
                           if isinstance(value := getattr(config, name, None), int) and value > 0)
    return [shape for width in widths for shape in ((EMBEDS_TOKENS, width), (width, EMBEDS_TOKENS))]


def input_shapes(model, takes: str) -> list[tuple[int, ...]]:
    if takes == PATCHES:
        return patch_shapes(model.config)
    if takes.endswith(EMBEDS_SUFFIX) or takes == STATES_INPUT:
        return [(EMBEDS_TOKENS, model.config.hidden_size)]
    if takes in CONTINUOUS_INPUTS:
        return continuous_shapes(model.config)
    if takes == series.SERIES_INPUT:
        return series.series_shapes(model.config)
    if takes == series.TRAJECTORY_INPUT:
        return [(series.TRAJECTORY_STEPS,)]
    return audio_shapes(model.config, takes)


def shaped_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    takes = main_input(model)
    if takes == PATCHES:
        inputs = patch_input(model, batch, shape)
    elif takes == series.SERIES_INPUT:
        inputs = series.series_input(model, batch, shape, lambda name: accepts(model, name), required_inputs(model))
    elif takes == series.TRAJECTORY_INPUT:
        inputs = series.trajectory_input(model, batch)
    else:
        inputs = audio_input(model, batch, shape)
    inputs.update(encoder_states(model, batch))
    return {**inputs, **required_states(model, batch, inputs)}


STATES_SUFFIX = "_hidden_states"


def states_width(config) -> int:
    """hidden_size, times the layers whose states are concatenated where the config lists them (DFlash's target_layer_ids)."""
    layers = next((len(value) for name, value in vars(config).items()
                   if name.endswith("_layer_ids") and isinstance(value, (list, tuple)) and value), 1)
    return config.hidden_size * layers


def required_states(model, batch: int, given: dict) -> dict:
    """States from another model that the forward requires beside its input (a draft model's context:
    Muse Glimmer's assistant), ENCODER_TOKENS of them."""
    names = [name for name in required_inputs(model) if name.endswith(STATES_SUFFIX) and name not in given]
    if not names:
        return {}
    generator = torch.Generator().manual_seed(1)
    states = torch.randn(1, ENCODER_TOKENS, states_width(model.config), generator=generator).repeat(batch, 1, 1)
    return {name: states for name in names}


CROSS_NAMES = ("crossattention", "cross_attn", "cross_attention", "encoder_attn")  # a cross-attention module's name
ENCODER_TOKENS = 16  # the encoder states a decoder's cross-attention reads


def encoder_states(model, batch: int) -> dict:
    """Encoder states for a decoder (or Q-Former) that takes them apart from its own input and has
    cross-attention layers, which run only when they are given (BLIP's text model, Canary's
    decoder); {} for any other model.  Their width is the config's encoder_hidden_size, else its
    hidden_size."""
    if accepts(model, "decoder_input_ids") or not accepts(model, "encoder_hidden_states"):  # not a whole seq2seq
        return {}
    if not any(part in name.lower() for name, _ in model.named_modules() for part in CROSS_NAMES):
        return {}
    width = getattr(model.config, "encoder_hidden_size", None) or model.config.hidden_size
    generator = torch.Generator().manual_seed(1)
    states = torch.randn(1, ENCODER_TOKENS, width, generator=generator).repeat(batch, 1, 1)
    return {"encoder_hidden_states": states, **query_embeddings(model, batch)}


QUERY_TOKENS = 4  # the learned queries given to a Q-Former beside its text ids


def query_embeddings(model, batch: int) -> dict:
    """Query embeddings for a Q-Former that runs on token ids and takes its queries apart
    (InstructBLIP's): its cross-attention reads the encoder states only from the query tokens
    (query_length = query_embeds.shape[1], 0 without them), so it runs only when they are given."""
    if not accepts(model, QUERY_INPUT) or main_input(model) != "input_ids":
        return {}
    generator = torch.Generator().manual_seed(2)
    queries = torch.randn(1, QUERY_TOKENS, model.config.hidden_size, generator=generator)
    return {QUERY_INPUT: queries.repeat(batch, 1, 1)}


QUERY_INPUT = "query_embeds"


def mask_queries(inputs: dict) -> dict:
    """``inputs`` with the attention mask over the query tokens and the ids, as InstructBLIP's model
    builds it (ones for the queries before the ids' mask): flex_attention refuses a mask over the ids alone."""
    if QUERY_INPUT in inputs and isinstance(inputs.get("attention_mask"), torch.Tensor):
        mask = inputs["attention_mask"]
        queries = mask.new_ones(mask.shape[0], inputs[QUERY_INPUT].shape[1])
        inputs = {**inputs, "attention_mask": torch.cat([queries, mask], dim=1)}
    return inputs


# audio-token models: every position carries one id per codebook (Bark's fine acoustics model: all of Encodec's)
CODEBOOK_FIELDS = ("num_codebooks", "n_codes_total")
# Bark's fine acoustics model predicts codebook codebook_idx (its main input's name, an int) from the sum of the
# embeddings of the codebooks up to it; its lm_heads cover n_codes_given .. n_codes_total - 1
CODEBOOK_INDEX = "codebook_idx"


def codebook_index(model) -> dict:
    """The codebook a model that takes CODEBOOK_INDEX predicts: its first predicted one (n_codes_given)."""
    if not accepts(model, CODEBOOK_INDEX):
        return {}
    return {CODEBOOK_INDEX: model.config.n_codes_given}


def id_layouts(config) -> list[tuple[str, int]]:
    """Layouts to try for token ids of a model whose positions carry one id per codebook (MusicGen's
    decoder: the codebooks stacked on the batch axis, (batch * n, tokens); Kyutai's speech-to-text and
    CSM's backbone: (batch, tokens, n), with a text id in front at n + 1), after plain (batch, tokens)."""
    codebooks = next((value for name in CODEBOOK_FIELDS if isinstance(value := getattr(config, name, None), int)
                      and value > 0), None)
    channels = decoder_channels(config)
    decoder = [("decoder", channels)] if channels else []
    if codebooks is None:
        return decoder
    return [("stacked", codebooks), ("last", codebooks), ("last", codebooks + 1), ("middle", codebooks), *decoder]


DECODER_CHANNEL_FIELDS = ("num_channels",)  # a seq2seq decoder's ids per position (Dia's: 9 audio channels)


def decoder_channels(config) -> int | None:
    """The ids per position of a seq2seq model's decoder, where its decoder config states more than one."""
    decoder = getattr(config, "decoder_config", None)
    if not getattr(config, "is_encoder_decoder", False) or decoder is None:
        return None
    return next((value for name in DECODER_CHANNEL_FIELDS
                 if isinstance(value := getattr(decoder, name, None), int) and value > 1), None)


def decoder_ids(ids: torch.Tensor, layout: tuple[str, int] | None) -> torch.Tensor:
    """A seq2seq model's decoder ids: (batch, tokens, n) under the "decoder" layout (the encoder's ids stay
    plain; Dia reshapes 2-d decoder ids to (batch, n, -1)), else laid out as the encoder's."""
    if layout is not None and layout[0] == "decoder":
        return ids.unsqueeze(-1).repeat(1, 1, layout[1])
    return lay_out_ids(ids, layout)


def lay_out_ids(ids: torch.Tensor, layout: tuple[str, int] | None) -> torch.Tensor:
    """(batch, tokens) ids in ``layout``: every codebook of a position given the position's id."""
    if layout is None or layout[0] == "decoder":
        return ids
    kind, count = layout
    if kind == "stacked":
        return ids.repeat_interleave(count, dim=0)
    if kind == "last":
        return ids.unsqueeze(-1).repeat(1, 1, count)
    return ids.unsqueeze(1).repeat(1, count, 1)


def path_inputs(model, feeding, designs, tokens: int, far_position: int, vocab: int) -> dict:
    """The designed passes' inputs, fed as the first pass found the model runs (``feeding``: :class:`.feed.Feeding`)."""
    count = len(designs)
    if main_input(model) == "pixel_values":
        return image_inputs(model, count, feeding)
    if is_shaped(main_input(model)):
        if feeding.known("signal_shape") is None:
            raise ValueError("no audio shape found to run on")
        return shaped_input(model, count, feeding.signal_shape)
    ids = with_placeholders(((torch.arange(tokens) * 7 + 3) % max(vocab - 3, 1) + 3).repeat(count, 1), feeding)
    tokens = ids.shape[-1]
    inputs = {"input_ids": lay_out_ids(ids, feeding.known("id_layout")),
              "attention_mask": torch.ones(count, tokens, dtype=torch.long), **encoder_states(model, count),
              **token_companions(model, count, tokens, feeding), **codebook_index(model)}
    if accepts(model, "position_ids"):
        positions = [far_position if d.position < 0 else d.position for d in designs]
        inputs["position_ids"] = torch.tensor(positions).unsqueeze(1).repeat(1, tokens)
    if getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = decoder_ids(ids, feeding.known("id_layout"))
        inputs["decoder_attention_mask"] = torch.ones(count, tokens, dtype=torch.long)
        if "position_ids" in inputs and accepts(model, "decoder_position_ids"):
            inputs["decoder_position_ids"] = inputs["position_ids"]
    return mask_queries(inputs)


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
    per_query = [median(step[t] / unit) for t in range(step.shape[0])]
    query_spread = spread_of(per_query)
    if form in ("linear", "q and k normalised") and query_spread > QUERY_SPREAD_TOL:
        form = "varies with the query position"  # also a cosine-1 logit: one temperature is one for every query
    # along the last coordinate too: RoPE the designs cannot pin (RoFormer rotates by the token index)
    # turns the first coordinate's pair fastest and the last's slowest
    if form_last == "linear" and spread_of([median(last_step[t] / unit) for t in range(last_step.shape[0])]) > QUERY_SPREAD_TOL:
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
        # less the keys' own term read at position 0 (a content bias's u.k: the same at every position)
        "factor_far": median((rows[7] - rows[6] - key_only(rows, 0, 10, 12)) / unit) if positions else None,
        "factor_longer": median(gap_step(longer, 0, 1, 2, 3) / unit) if longer is not None else None,
    }
