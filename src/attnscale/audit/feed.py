"""The feed stage: the inputs that run one model, found once and kept on its :class:`Feeding` record.

Token ids (laid out per codebook where the model takes them so), one image (on an axis of its own, or with a box
prompt or text beside it where the model needs them), an audio input of the first shape the model runs on, a
time series or a trajectory, or a composite's media at its placeholder tokens; what a model reads beside its
main input (a page's boxes, region features, a prompt: the companions section).  What a first pass finds here
(:func:`first_inputs`) is what the designed passes are fed (:func:`path_inputs`, below), so both read the same
record; nothing about a model is kept anywhere else.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass, field

import torch

from ..errors import UserError, first_line
from ..probing.intercept import model_inputs
from ..probing.loading import quiet_transformers
from ..threads import torch_threads
from .record import is_intercepted_nowhere
from .sizes import TINY

TOKENS, LONGER_TOKENS = 8, 24
SERIES_INPUT = "past_values"  # a forecaster's history (the series section, at the end)
TRAJECTORY_INPUT = "states"  # Decision Transformer's states (with its actions and returns)
UNKNOWN = "unknown"  # a field no pass has found yet


@dataclass
class Feeding:
    """What feeding one model found: each field stays :data:`UNKNOWN` until the first pass looks for it."""

    image_axis: object = UNKNOWN  # images per sample it ran on (None: one a sample; FOLD_FRAMES: along the batch)
    # what a promptable image model's image runs with: "boxes" (a box prompt, wherever it runs with one: SAM's mask
    # decoder reads it as two more tokens) and "text" (token ids, only where the image alone is refused: SAM 3)
    image_beside: object = UNKNOWN
    box_refusal: str | None = None  # why its last box prompt was refused, where it runs without one (SAM 3)
    beside: object = UNKNOWN  # True where its token ids alone did not run and they run with what it takes beside
    beside_frames: int | None = None  # the frames of the clip it takes beside its ids (X-CLIP)
    signal_shape: object = UNKNOWN  # the audio shape it ran on
    id_layout: object = UNKNOWN  # how its token ids are laid out, where not (batch, tokens): id_layouts
    # [(placeholder token id, placeholders a sequence, the media inputs of one sequence)]: the media a composite built
    # whole merges into its ids at placeholder tokens (Aria's image, Fun-ASR-Nano's audio; composite_rows)
    media: list = field(default_factory=list)
    unpinned: set = field(default_factory=set)  # ids of the configs whose RoPE numbered its own positions in a pass
    too_large: str = ""  # why the designed passes were not run: what they would need beside the free memory

    def known(self, name: str):
        """The field's value, None where it is still :data:`UNKNOWN`."""
        value = getattr(self, name)
        return None if value is UNKNOWN else value


def first_inputs(model, feeding: Feeding) -> dict:
    """The real pass's inputs: TOKENS token ids (and their mask), one image, or one audio input of
    the first shape the model runs on (kept on ``feeding`` for the designed passes); raises UserError if none runs."""
    takes = main_input(model)
    if takes == "pixel_values":
        if feeding.image_beside is UNKNOWN:
            image_companions(model, feeding)
        if feeding.image_axis is UNKNOWN:
            feeding.image_axis = image_axis(model, feeding)
        return image_inputs(model, 1, feeding)
    if is_shaped(takes):
        if feeding.signal_shape is not UNKNOWN:
            return shaped_input(model, 1, feeding.signal_shape)
        refusals = []
        for shape in input_shapes(model, takes):
            inputs = shaped_input(model, 1, shape)
            try:
                with torch.no_grad(), quiet_transformers(), torch_threads(1):
                    model(**inputs)
            except Exception as error:  # noqa: BLE001 - a shape the model does not take: try the next
                refusals.append(f"{tuple(shape)}: {first_line(error)}")
                continue
            feeding.signal_shape = shape
            return inputs
        raise UserError(f"{type(model).__name__} ran on none of the {takes} shapes tried ({'; '.join(refusals)})")
    vocab = getattr(model.config, "vocab_size", None) or 100
    ids = ((torch.arange(TOKENS) * 5 + 3) % max(vocab - 3, 1) + 3).unsqueeze(0)
    if feeding.id_layout is UNKNOWN and id_layouts(model.config):
        feeding.id_layout = id_layout(model, ids, feeding)
    inputs = token_inputs(model, ids, feeding.known("id_layout"), feeding)
    if feeding.beside is UNKNOWN and takes_companions(model):
        # ids alone first: what a model reads beside them (boxes, region features, an image) is given only
        # where it does not run without
        feeding.beside = not runs(model, lambda: inputs)
        if feeding.beside and accepts(model, "pixel_values") and not runs(
                model, lambda: {**inputs, **token_companions(model, 1, TOKENS, feeding)}):
            # one image refused: a clip of frames (X-CLIP's video), kept where it runs
            feeding.beside_frames = clip_frames(model.config)
            if not runs(model, lambda: {**inputs, **token_companions(model, 1, TOKENS, feeding)}):
                feeding.beside_frames = None
    return {**inputs, **token_companions(model, 1, TOKENS, feeding)}




def runs(model, make_inputs) -> bool:
    """Whether the model runs one forward pass on the inputs ``make_inputs()`` gives (no gradients, one
    thread, transformers quiet); any refusal, in making the inputs or in the model's code, is a no."""
    return refusal_of(model, make_inputs) is None




def refusal_of(model, make_inputs) -> str | None:
    """The first line of the error one forward pass on ``make_inputs()`` raises (see :func:`runs`); None where it runs."""
    try:
        with torch.no_grad(), quiet_transformers(), torch_threads(1):
            model(**make_inputs())
        return None
    except Exception as error:  # noqa: BLE001 - third-party model code: whatever it raises means it does not run so
        return first_line(error)




def token_inputs(model, ids: torch.Tensor, layout, feeding: Feeding) -> dict:
    """Token ids (and their mask, encoder states) laid out as ``layout`` (see :func:`id_layouts`)."""
    ids = with_placeholders(ids, feeding)
    inputs = model_inputs(model, lay_out_ids(ids, layout), torch.ones_like(ids),
                          **encoder_states(model, 1), **codebook_index(model))
    if "decoder_input_ids" in inputs:
        inputs["decoder_input_ids"] = decoder_ids(ids, layout)
    return mask_queries(inputs)




def image_axis(model, feeding: Feeding) -> int | None:
    """None where the model runs on one image a sample; else the first count of
    :data:`IMAGE_COUNTS` it runs on with the images on an axis of their own (a pair of
    images to match), or FOLD_FRAMES (a clip's frames along the batch axis); None where none runs (the
    forward's own error is then the reason)."""
    for count in (None, *IMAGE_COUNTS, FOLD_FRAMES):
        feeding.image_axis = count
        if runs(model, lambda: image_inputs(model, 1, feeding)):
            return count
    return None




def id_layout(model, ids: torch.Tensor, feeding: Feeding):
    """The first layout of :func:`id_layouts` (plain ids first: None) that the model runs
    on; plain where none does (the forward's own error is then the reason)."""
    for layout in (None, *id_layouts(model.config)):
        if runs(model, lambda: token_inputs(model, ids, layout, feeding)):  # noqa: B023 - called before the next layout
            return layout
    return None




def image_companions(model, feeding: Feeding) -> None:
    """What a promptable image model runs with beside its image (``feeding.image_beside``): a box
    prompt wherever it runs with one, token ids only where the image alone is refused; the first
    option that runs is kept (the last tried where none does: the forward's error is then the reason;
    SAM 3's box needs torchvision's roi_align, so it runs without)."""
    options = [()]
    if accepts(model, "input_ids"):
        options.append(("text",))
    if accepts(model, "input_boxes"):
        options = [(*option, "boxes") for option in options] + options  # with a box first, then without
    for option in options:
        feeding.image_beside = option
        refusal = None if len(options) == 1 else refusal_of(model, lambda: image_inputs(model, 1, feeding))
        if refusal is None:
            return
        if "boxes" in option:
            feeding.box_refusal = refusal




def box_refused(feeding: Feeding, unread: list[dict]) -> None:
    """Says, beside each attention module left unread (not intercepted) by a model that runs without the
    box prompt it refused, that refusal: what would run such a module is not run here, and why."""
    refusal = feeding.box_refusal
    if refusal is None or "boxes" in (feeding.known("image_beside") or ()):
        return
    for entry in unread:
        if is_intercepted_nowhere(entry):
            entry["why"] = f"not run by the inputs that run here; the box prompt it takes beside them is refused ({refusal})"


# ---------------------------------------------------------------------------------------
# The inputs of each kind a model takes: token ids and what goes beside them, images, audio, patches.

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


_MAIN_INPUTS: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()


def main_input(model) -> str:
    """What the model runs on (decided once a model: every stage asks, the forward's signature is read once): its
    main_input_name, unless its forward requires something else (a patch grid, an image where the class still names
    token ids or calls it ``image``, audio features under another name, another encoder's states)."""
    try:
        return _MAIN_INPUTS[model]
    except (KeyError, TypeError):  # TypeError: an object that cannot be weakly referenced is decided each time
        pass
    takes = decide_main_input(model)
    try:
        _MAIN_INPUTS[model] = takes
    except TypeError:
        pass
    return takes


def decide_main_input(model) -> str:
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
    if any(name.startswith(PROMPT_PREFIX) for name in required):  # SegGPT: image and prompt, stacked
        images = images[..., : images.shape[-2] // 2, :].contiguous()
    count = feeding.known("image_axis")
    if count == FOLD_FRAMES and images.dim() == 5:  # X-CLIP's vision tower: the clip's frames along the batch axis
        images = images.flatten(0, 1)
    if count:  # images given per sample (LightGlue's pair): (batch, count, channels, height, width)
        images = torch.stack([images.flip(-1) if i % 2 else images for i in range(count)], dim=1)
    inputs = {image_name(model): images, **beside_image(model, batch, COMPANION_TOKENS, required, images)}
    beside = feeding.known("image_beside") or ()
    if "boxes" in beside:
        inputs["input_boxes"] = torch.tensor([[PROMPT_BOX]] * batch)
    if "text" in beside and "input_ids" not in inputs:
        inputs.update(beside_image(model, batch, COMPANION_TOKENS, ["input_ids"], images))
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
    """Whether the forward takes anything beside_tokens gives (boxes, region features, an image)."""
    return any(accepts(model, name) for name in (*BOX_NAMES, "visual_feats", "pixel_values"))


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
    sequences of its own it reads beside them wherever it takes them (texts_beside), the media
    merged into its placeholders (``feeding.media``) and a byte model's patch lengths."""
    given = {**texts_beside(model, batch, tokens, lambda name: accepts(model, name)),
             **media_inputs(batch, feeding), **patch_lengths(model, batch, tokens)}
    if not feeding.known("beside"):
        return given
    frames = feeding.beside_frames
    image = ((lambda count: pixel_values(model.config, count).unsqueeze(1).repeat(1, frames, 1, 1, 1)) if frames
             else (lambda count: pixel_values(model.config, count)))
    return {**given, **beside_tokens(model, batch, tokens, lambda name: accepts(model, name), image)}


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
SHAPED_INPUTS = (*AUDIO_INPUTS, PATCHES, SERIES_INPUT, TRAJECTORY_INPUT, *CONTINUOUS_INPUTS)


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
    if takes == SERIES_INPUT:
        return series_shapes(model.config)
    if takes == TRAJECTORY_INPUT:
        return [(TRAJECTORY_STEPS,)]
    return audio_shapes(model.config, takes)


def shaped_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    takes = main_input(model)
    if takes == PATCHES:
        inputs = patch_input(model, batch, shape)
    elif takes == SERIES_INPUT:
        inputs = series_input(model, batch, shape, lambda name: accepts(model, name), required_inputs(model))
    elif takes == TRAJECTORY_INPUT:
        inputs = trajectory_input(model, batch)
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


# ---------------------------------------------------------------------------------------
# What the audit feeds.

INPUT_KINDS = {"input_features": "audio features, e.g. log-mel frames", "input_values": "raw audio samples",
               "pixel_values": "images", PATCHES: "image patches with their grid",
               SERIES_INPUT: "a time series' past values", TRAJECTORY_INPUT: "a trajectory's states"}
FED = ("input_ids", "pixel_values", *SHAPED_INPUTS)  # token ids, a 32 x 32 image, audio, patches
FED_TEXT = ("token ids, images, video clips, image patches, audio, time series, trajectories, query embeddings and "
            "continuous inputs (latents)")




def is_fed(takes: str) -> bool:
    return takes in FED or is_shaped(takes)

# --------------------------------------------------------------------------- companions
#
# What a model reads beside its main input: a page's boxes, an image's region features, a task.
#
# Document models (BROS, LiLT, UDOP, LayoutLMv3) read each token's box on the page; LXMERT reads
# region features and their positions beside its text; ViLT an image beside its text; Grounding
# DINO a text beside its image; OneFormer a task prompt; SegGPT a prompt image and its mask.  As
# for the main input, the path probe overwrites q, k and v at the projections, so only shapes and
# validity matter: boxes are well formed (left < right, top < bottom, on the 0-1000 grid), every
# token and pixel real.

PAGE = 1000  # the coordinate grid document models read boxes on
REGIONS = 8  # LXMERT's region features
BOX_NAMES = ("bbox",)
TOKEN_NAMES = ("input_ids", "task_inputs")  # token ids a model requires beside its image
IMAGE_MASK = "image_attention_mask"  # a token-by-image mask beside images given per sequence
TEXTS_SUFFIXES = ("_input_ids", "_attention_mask")  # a text beside the image under a name of its own, and its mask
STRUCTURE_SUFFIX = "_structure"  # the texts per image, where a model takes a list of them (one each here)
# a sequence of its own a text model reads beside its ids, as <name>_input_ids and <name>_attention_mask: Evolla's
# protein (its SaProt encoder, sequence compressor and aligner cross-attention run only where it is given)
TEXTS_BESIDE = ("protein",)
PROMPT_PREFIX = "prompt_"  # SegGPT's prompt image and mask, the image's shape
# a promptable segmenter's box (input_boxes), one an image: SAM 3 reads it normalised as (cx, cy, w, h), SAM and
# SAM 2 in pixels as (x0, y0, x1, y1), where it is a small box at the corner; a valid prompt either way
PROMPT_BOX = (0.25, 0.25, 0.75, 0.75)


def token_ids(batch: int, tokens: int, vocab: int) -> torch.Tensor:
    return ((torch.arange(tokens) * 5 + 3) % max(vocab - 3, 1) + 3).repeat(batch, 1)


def page_boxes(batch: int, tokens: int) -> torch.Tensor:
    """One box per token, left to right along lines of 8 words: (batch, tokens, 4) as x0, y0, x1, y1."""
    index = torch.arange(tokens)
    column, line = index % 8, index // 8
    x0, y0 = column * 120 + 10, line * 40 + 10
    boxes = torch.stack([x0, y0, x0 + 100, y0 + 30], dim=-1).clamp(max=PAGE - 1)
    return boxes.repeat(batch, 1, 1)


def region_features(config, batch: int) -> dict:
    generator = torch.Generator().manual_seed(2)
    features = torch.randn(1, REGIONS, config.visual_feat_dim, generator=generator).repeat(batch, 1, 1)
    positions = torch.rand(1, REGIONS, config.visual_pos_dim, generator=generator).repeat(batch, 1, 1)
    return {"visual_feats": features, "visual_pos": positions}


def beside_tokens(model, batch: int, tokens: int, takes, image) -> dict:
    """Inputs a token-id model takes beside its ids, for a model that does not run on ids alone:
    boxes, region features, an image (``image(batch)``); ``takes(name)`` says what its forward takes."""
    inputs = {}
    if any(takes(name) for name in BOX_NAMES):
        inputs["bbox"] = page_boxes(batch, tokens)
    if takes("visual_feats") and hasattr(model.config, "visual_feat_dim"):
        inputs.update(region_features(model.config, batch))
    if takes("pixel_values"):
        inputs["pixel_values"] = image(batch)
        if takes(IMAGE_MASK):  # which images each token sees (IDEFICS): the images of a sequence, one here
            inputs["pixel_values"] = inputs["pixel_values"].unsqueeze(1)
            inputs[IMAGE_MASK] = torch.ones(batch, tokens, 1, dtype=torch.long)
    return inputs


def texts_beside(model, batch: int, tokens: int, takes) -> dict:
    """The sequences of :data:`TEXTS_BESIDE` the forward takes (``takes(name)``), each ``tokens`` ids of its own
    vocabulary (the sub-config's ``<name>_encoder_config`` where there is one) and their mask, all real."""
    inputs = {}
    for name in TEXTS_BESIDE:
        if not (takes(f"{name}_input_ids") and takes(f"{name}_attention_mask")):
            continue
        config = getattr(model.config, f"{name}_encoder_config", None) or model.config
        ids = token_ids(batch, tokens, getattr(config, "vocab_size", None) or 100)
        inputs.update({f"{name}_input_ids": ids, f"{name}_attention_mask": torch.ones_like(ids)})
    return inputs


def beside_image(model, batch: int, tokens: int, required: list[str], images: torch.Tensor) -> dict:
    """What an image model requires beside its image: token ids and their mask (Grounding DINO's
    text, OneFormer's task, at the config's task length), a prompt image and mask of the image's shape."""
    config = model.config
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", 100)
    inputs = {}
    for name in required:
        if name == "input_ids":
            inputs["input_ids"] = token_ids(batch, tokens, vocab)
            inputs["attention_mask"] = torch.ones(batch, tokens, dtype=torch.long)
        elif name == "task_inputs":
            inputs[name] = token_ids(batch, getattr(config, "task_seq_len", tokens), vocab)
        elif name.endswith(TEXTS_SUFFIXES):  # texts of their own beside the image: OmDet-Turbo's classes and task
            ids = token_ids(batch, tokens, vocab)
            inputs[name] = ids if name.endswith("input_ids") else torch.ones_like(ids)
        elif name.endswith(STRUCTURE_SUFFIX):  # how many of those texts each image has (classes_structure): one
            inputs[name] = torch.ones(batch, dtype=torch.long)
        elif name.startswith(PROMPT_PREFIX):
            inputs[name] = torch.ones_like(images) if name.endswith("masks") else images.clone()
    return inputs


# --------------------------------------------------------------------------- series
#
# Inputs for models that read a time series or a trajectory instead of tokens.
#
# Forecasters (PatchTST, TimesFM, Informer, the Time Series Transformer, ...) take the series'
# past values, and some also a mask of the values observed, time features and the values to
# forecast (which their decoder reads); Decision Transformer takes states, actions and rewards.
# As for images and audio, the path probe overwrites q, k and v at the projections, so only the
# shapes matter: the values are fixed random draws, every value observed, every step real.

SERIES_LENGTH = 32  # steps of history where the config states no context length
TRAJECTORY_STEPS = 8  # (return, state, action) triples: 24 tokens


def values(generator, batch: int, *shape: int) -> torch.Tensor:
    return torch.randn(1, *shape, generator=generator).repeat(batch, *([1] * len(shape)))


def history_length(config) -> int:
    """Steps of history: the context plus the furthest lag where the model builds lagged copies
    of the series (the Time Series Transformer's lags_sequence)."""
    lags = getattr(config, "lags_sequence", None) or [0]
    return (getattr(config, "context_length", None) or SERIES_LENGTH) + max(lags)


def series_shapes(config) -> list[tuple[int, ...]]:
    """Shapes (without the batch) to try for the past values: one value a step, then a value per
    channel (PatchTST's (steps, channels))."""
    length = history_length(config)
    channels = getattr(config, "num_input_channels", None) or getattr(config, "input_size", None) or 1
    return list(dict.fromkeys([(length,), (length, channels)] if channels == 1 else [(length, channels), (length,)]))


def series_input(model, batch: int, shape: tuple[int, ...], takes, required: list[str]) -> dict:
    """The past values at ``shape`` and what the forward also takes of them: the observed mask, time
    features and the future values a decoder reads (at the config's prediction length), and
    TimesFM's padding and frequency; ``takes(name)`` says whether the forward takes an argument."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    length, channels = shape[0], shape[1:]
    inputs = {SERIES_INPUT: values(generator, batch, *shape)}
    for mask in ("past_observed_mask", "observed_mask"):
        if takes(mask):
            inputs[mask] = torch.ones(batch, *shape)
    time_features = getattr(config, "num_time_features", None)
    if takes("past_time_features"):
        inputs["past_time_features"] = values(generator, batch, length, time_features or 0)
    horizon = getattr(config, "prediction_length", None)
    if takes("future_values") and "past_time_features" in inputs and horizon:  # the decoder's input
        inputs["future_values"] = values(generator, batch, horizon, *channels)
        inputs["future_time_features"] = values(generator, batch, horizon, time_features or 0)
    if "past_values_padding" in required:
        inputs["past_values_padding"] = torch.zeros(batch, length, dtype=torch.long)
    if "freq" in required:
        inputs["freq"] = torch.zeros(batch, 1, dtype=torch.long)
    return inputs


def trajectory_input(model, batch: int) -> dict:
    """TRAJECTORY_STEPS steps of states, actions, rewards and returns-to-go, their time steps and mask."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    steps = TRAJECTORY_STEPS
    return {"states": values(generator, batch, steps, config.state_dim),
            "actions": values(generator, batch, steps, config.act_dim),
            "rewards": values(generator, batch, steps, 1), "returns_to_go": values(generator, batch, steps, 1),
            "timesteps": torch.arange(steps).repeat(batch, 1),
            "attention_mask": torch.ones(batch, steps, dtype=torch.long)}
