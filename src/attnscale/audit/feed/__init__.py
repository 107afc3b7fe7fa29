"""The feed stage: the inputs that run one model, found once and kept on its :class:`Feeding` record.

Token ids (laid out per codebook where the model takes them so: :mod:`.ids`), one image (on an axis of its own, or
with a box prompt or text beside it where the model needs them: :mod:`.image`), an audio input of the first shape
the model runs on (:mod:`.audio`), a time series or a trajectory (:mod:`.series`), or a composite's media at its
placeholder tokens; what a model reads beside its main input (a page's boxes, region features, a prompt:
:mod:`.companions`).  Which of them a model takes is its main input (:mod:`.kinds`), decided once; the tensor
inputs are fed through one registry keyed by it (:data:`FEEDERS`; the tensor inputs' shapes by :data:`SHAPED_KINDS`).  What a first pass finds here
(:func:`first_inputs`) is what the designed passes are fed (:func:`path_inputs`), so both read the same record;
nothing about a model is kept anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...errors import UserError, first_line
from ...probing.loading import quiet_transformers
from ...threads import torch_threads
from ..record import is_intercepted_nowhere
from .audio import EMBEDS_TOKENS, audio_input, audio_shapes, continuous_shapes
from .companions import (PAGE, PROMPT_BOX, TEXTS_BESIDE, encoder_states, mask_queries, prefix_segments,
                         required_states, takes_companions)
from .feeding import UNKNOWN, Feeding
from .ids import codebook_index, decoder_ids, id_layouts, lay_out_ids, token_companions, token_inputs, with_placeholders
from .image import BACKBONE_IMAGE, FOLD_FRAMES, IMAGE_COUNTS, clip_frames, image_inputs, patch_input, patch_shapes, \
    pixel_values
from .kinds import (CONTINUOUS_INPUTS, EMBEDS_SUFFIX, PATCHES, SERIES_INPUT, SHAPED_INPUTS, STATES_INPUT,
                    TRAJECTORY_INPUT, accepts, decide_main_input, is_shaped, main_input, required_inputs)
from .series import TRAJECTORY_STEPS, series_input, series_shapes, trajectory_input


TOKENS, LONGER_TOKENS = 8, 24


def first_inputs(model, feeding: Feeding) -> dict:
    """The real pass's inputs: TOKENS token ids (and their mask), one image, or one audio input of
    the first shape the model runs on (kept on ``feeding`` for the designed passes); raises UserError if none runs."""
    return feeder(main_input(model)).first(model, feeding)


def image_first(model, feeding: Feeding) -> dict:
    """One image, with what a promptable model runs beside it, on the image axis it runs on."""
    if feeding.image_beside is UNKNOWN:
        image_companions(model, feeding)
    if feeding.image_axis is UNKNOWN:
        feeding.image_axis = image_axis(model, feeding)
    return image_inputs(model, 1, feeding)


def shaped_first(model, feeding: Feeding) -> dict:
    """One tensor input of the first shape the model runs on (audio, patches, a series, embeddings)."""
    if feeding.signal_shape is not UNKNOWN:
        return shaped_input(model, 1, feeding.signal_shape)
    takes = main_input(model)
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


def ids_first(model, feeding: Feeding) -> dict:
    """TOKENS token ids in the layout the model runs on, with what it reads beside them where it needs it."""
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


def box_refused(feeding: Feeding, unread: list[dict]) -> list[dict]:
    """The unread attention modules, each left unread (not intercepted) by a model that runs without the box prompt
    it refused saying that refusal beside it (new entries): what would run such a module is not run here, and why."""
    refusal = feeding.box_refusal
    if refusal is None or "boxes" in (feeding.known("image_beside") or ()):
        return unread
    why = f"not run by the inputs that run here; the box prompt it takes beside them is refused ({refusal})"
    return [{**entry, "why": why} if is_intercepted_nowhere(entry) else entry for entry in unread]


@dataclass(frozen=True)
class ShapedKind:
    """How to feed one kind of tensor input: the shapes to try (from the model's config), and the inputs of one
    shape for ``batch`` sequences (the tensor and what the forward takes with it)."""

    shapes: Callable[[object, str], list[tuple[int, ...]]]  # (model, its main input) -> shapes
    make: Callable[[object, int, tuple[int, ...]], dict]


# The registry of tensor inputs, keyed by the forward's main input (:func:`.kinds.main_input`); token ids and
# images have feeders of their own (:data:`FEEDERS`).  An input of any other name (audio under a model's
# own name, embeddings, another encoder's states) is fed as audio is: a tensor of a shape the model runs on.
AUDIO = ShapedKind(lambda model, takes: audio_shapes(model.config, takes), audio_input)
EMBEDDINGS = ShapedKind(lambda model, takes: [(EMBEDS_TOKENS, model.config.hidden_size)], audio_input)
SHAPED_KINDS = {
    PATCHES: ShapedKind(lambda model, takes: patch_shapes(model.config), patch_input),
    SERIES_INPUT: ShapedKind(lambda model, takes: series_shapes(model.config),
                             lambda model, batch, shape: series_input(model, batch, shape, lambda name: accepts(model, name),
                                                                      required_inputs(model))),
    TRAJECTORY_INPUT: ShapedKind(lambda model, takes: [(TRAJECTORY_STEPS,)], lambda model, batch, shape: trajectory_input(model, batch)),
    STATES_INPUT: EMBEDDINGS,
    **{name: ShapedKind(lambda model, takes: continuous_shapes(model.config), audio_input) for name in CONTINUOUS_INPUTS},
}


def shaped_kind(takes: str) -> ShapedKind:
    """The registry's entry for a main input (an embeddings input by its suffix; audio for any other name)."""
    return SHAPED_KINDS.get(takes) or (EMBEDDINGS if takes.endswith(EMBEDS_SUFFIX) else AUDIO)


def input_shapes(model, takes: str) -> list[tuple[int, ...]]:
    return shaped_kind(takes).shapes(model, takes)


def shaped_input(model, batch: int, shape: tuple[int, ...]) -> dict:
    inputs = shaped_kind(main_input(model)).make(model, batch, shape)
    inputs.update(encoder_states(model, batch))
    return {**inputs, **required_states(model, batch, inputs)}


def path_inputs(model, feeding, designs, tokens: int, far_position: int, vocab: int) -> dict:
    """The designed passes' inputs, fed as the first pass found the model runs (``feeding``: :class:`.feed.Feeding`)."""
    return feeder(main_input(model)).designed(model, feeding, designs, tokens, far_position, vocab)


def image_designed(model, feeding, designs, tokens: int, far_position: int, vocab: int) -> dict:
    return image_inputs(model, len(designs), feeding)


def shaped_designed(model, feeding, designs, tokens: int, far_position: int, vocab: int) -> dict:
    if feeding.known("signal_shape") is None:
        raise ValueError("no audio shape found to run on")
    return shaped_input(model, len(designs), feeding.signal_shape)


def ids_designed(model, feeding, designs, tokens: int, far_position: int, vocab: int) -> dict:
    """One sequence of token ids a design, at the design's position where the model takes position ids."""
    count = len(designs)
    ids = with_placeholders(((torch.arange(tokens) * 7 + 3) % max(vocab - 3, 1) + 3).repeat(count, 1), feeding)
    tokens = ids.shape[-1]
    inputs = {"input_ids": lay_out_ids(ids, feeding.known("id_layout")),
              "attention_mask": torch.ones(count, tokens, dtype=torch.long), **encoder_states(model, count),
              **token_companions(model, count, tokens, feeding), **codebook_index(model),
              **prefix_segments(model, count, tokens)}
    if accepts(model, "position_ids"):
        positions = [far_position if d.position < 0 else d.position for d in designs]
        inputs["position_ids"] = torch.tensor(positions).unsqueeze(1).repeat(1, tokens)
    if getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = decoder_ids(ids, feeding.known("id_layout"))
        inputs["decoder_attention_mask"] = torch.ones(count, tokens, dtype=torch.long)
        if "position_ids" in inputs and accepts(model, "decoder_position_ids"):
            inputs["decoder_position_ids"] = inputs["position_ids"]
    return mask_queries(inputs)


@dataclass(frozen=True)
class Feeder:
    """How one kind of main input is fed: the first pass's inputs (what it finds kept on the :class:`Feeding`) and the
    designed passes' (``designed(model, feeding, designs, tokens, far_position, vocab)``), fed as the first found."""

    first: Callable[[object, Feeding], dict]
    designed: Callable[..., dict]


IDS, IMAGE, SHAPED = Feeder(ids_first, ids_designed), Feeder(image_first, image_designed), \
    Feeder(shaped_first, shaped_designed)
FEEDERS = {"input_ids": IDS, "pixel_values": IMAGE}  # every shaped input (SHAPED_KINDS, audio, embeddings): SHAPED


def feeder(takes: str) -> Feeder:
    """The registry's feeder for a main input: token ids, an image, or a tensor of a shape the model runs on (token
    ids for a name no kind feeds: :func:`is_fed` says so before any pass)."""
    return FEEDERS.get(takes) or (SHAPED if is_shaped(takes) else IDS)


INPUT_KINDS = {"input_features": "audio features, e.g. log-mel frames", "input_values": "raw audio samples",
               "pixel_values": "images", PATCHES: "image patches with their grid",
               SERIES_INPUT: "a time series' past values", TRAJECTORY_INPUT: "a trajectory's states"}
FED = ("input_ids", "pixel_values", *SHAPED_INPUTS)  # token ids, a 32 x 32 image, audio, patches
FED_TEXT = ("token ids, images, video clips, image patches, audio, time series, trajectories, query embeddings and "
            "continuous inputs (latents)")


def is_fed(takes: str) -> bool:
    return takes in FED or is_shaped(takes)
