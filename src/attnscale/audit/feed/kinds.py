"""Which kind of input a model's forward runs on (its main input, decided once a model), and what its signature takes."""

from __future__ import annotations

import inspect
import weakref


SERIES_INPUT = "past_values"  # a forecaster's history (the series section, at the end)
TRAJECTORY_INPUT = "states"  # Decision Transformer's states (with its actions and returns)


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


def data_inputs(required: list[str]) -> list[str]:
    """The required inputs that carry data: a mask the forward requires beside them is made with them
    (audio_input: every position real), so it does not make the input another kind."""
    return [name for name in required if not name.endswith("mask")]


FLATTENED = "flattened_patches"  # Pix2Struct-style: (batch, patches, 2 + patch values), each patch's row and column first

AUDIO_INPUTS = ("input_values", "input_features", "audio_mel")  # audio_mel: Gemma 3n's encoder
EMBEDS_SUFFIX = "_embeds"

# vectors a model takes as they are: a codec decoder's latents (batch, width, frames: Mimi's, Pocket TTS's), a
# Perceiver's inputs without a preprocessor (batch, tokens, d_model); their width is one of WIDTH_FIELDS
CONTINUOUS_INPUTS = ("latents", "inputs")

# inputs whose shape is found by trying candidates in turn
SHAPED_INPUTS = (*AUDIO_INPUTS, PATCHES, SERIES_INPUT, TRAJECTORY_INPUT, *CONTINUOUS_INPUTS)


def is_shaped(takes: str) -> bool:
    return takes in SHAPED_INPUTS or takes.endswith(EMBEDS_SUFFIX) or takes == STATES_INPUT


# Bark's fine acoustics model predicts codebook codebook_idx (its main input's name, an int) from the sum of the
# embeddings of the codebooks up to it; its lm_heads cover n_codes_given .. n_codes_total - 1
CODEBOOK_INDEX = "codebook_idx"
