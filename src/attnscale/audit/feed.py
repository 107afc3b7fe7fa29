"""The feed stage: the inputs that run one model, found once and kept on its :class:`Feeding` record.

Token ids (laid out per codebook where the model takes them so), one image (on an axis of its own, or with a box
prompt or text beside it where the model needs them), an audio input of the first shape the model runs on, or a
composite's media at its placeholder tokens.  What a first pass finds here (:func:`first_inputs`) is what the
designed passes are fed (:func:`.whole_path.path_inputs`), so both read the same record; nothing about a model is
kept anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import UserError
from ..probing.intercept import model_inputs
from ..probing.loading import quiet_transformers
from ..threads import torch_threads
from . import families, series, whole_path

TOKENS, LONGER_TOKENS = 8, 24
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
    id_layout: object = UNKNOWN  # how its token ids are laid out, where not (batch, tokens): whole_path.id_layouts
    # [(placeholder token id, placeholders a sequence, the media inputs of one sequence)]: the media a composite built
    # whole merges into its ids at placeholder tokens (Aria's image, Fun-ASR-Nano's audio; composite_rows)
    media: list = field(default_factory=list)
    unpinned: set = field(default_factory=set)  # ids of the configs whose RoPE numbered its own positions in a pass

    def known(self, name: str):
        """The field's value, None where it is still :data:`UNKNOWN`."""
        value = getattr(self, name)
        return None if value is UNKNOWN else value


INPUT_KINDS = {"input_features": "audio features, e.g. log-mel frames", "input_values": "raw audio samples",
               "pixel_values": "images", whole_path.PATCHES: "image patches with their grid",
               series.SERIES_INPUT: "a time series' past values", series.TRAJECTORY_INPUT: "a trajectory's states"}
FED = ("input_ids", "pixel_values", *whole_path.SHAPED_INPUTS)  # token ids, a 32 x 32 image, audio, patches
FED_TEXT = ("token ids, images, video clips, image patches, audio, time series, trajectories, query embeddings and "
            "continuous inputs (latents)")




def is_fed(takes: str) -> bool:
    return takes in FED or whole_path.is_shaped(takes)




def first_inputs(model, feeding: Feeding) -> dict:
    """The real pass's inputs: TOKENS token ids (and their mask), one image, or one audio input of
    the first shape the model runs on (kept on ``feeding`` for the designed passes); raises UserError if none runs."""
    takes = whole_path.main_input(model)
    if takes == "pixel_values":
        if feeding.image_beside is UNKNOWN:
            image_companions(model, feeding)
        if feeding.image_axis is UNKNOWN:
            feeding.image_axis = image_axis(model, feeding)
        return whole_path.image_inputs(model, 1, feeding)
    if whole_path.is_shaped(takes):
        if feeding.signal_shape is not UNKNOWN:
            return whole_path.shaped_input(model, 1, feeding.signal_shape)
        refusals = []
        for shape in whole_path.input_shapes(model, takes):
            inputs = whole_path.shaped_input(model, 1, shape)
            try:
                with torch.no_grad(), quiet_transformers(), torch_threads(1):
                    model(**inputs)
            except Exception as error:  # noqa: BLE001 - a shape the model does not take: try the next
                refusals.append(f"{tuple(shape)}: {families.first_line(error)}")
                continue
            feeding.signal_shape = shape
            return inputs
        raise UserError(f"{type(model).__name__} ran on none of the {takes} shapes tried ({'; '.join(refusals)})")
    vocab = getattr(model.config, "vocab_size", None) or 100
    ids = ((torch.arange(TOKENS) * 5 + 3) % max(vocab - 3, 1) + 3).unsqueeze(0)
    if feeding.id_layout is UNKNOWN and whole_path.id_layouts(model.config):
        feeding.id_layout = id_layout(model, ids, feeding)
    inputs = token_inputs(model, ids, feeding.known("id_layout"), feeding)
    if feeding.beside is UNKNOWN and whole_path.takes_companions(model):
        # ids alone first: what a model reads beside them (boxes, region features, an image) is given only
        # where it does not run without
        feeding.beside = not runs(model, lambda: inputs)
        if feeding.beside and whole_path.accepts(model, "pixel_values") and not runs(
                model, lambda: {**inputs, **whole_path.token_companions(model, 1, TOKENS, feeding)}):
            # one image refused: a clip of frames (X-CLIP's video), kept where it runs
            feeding.beside_frames = whole_path.clip_frames(model.config)
            if not runs(model, lambda: {**inputs, **whole_path.token_companions(model, 1, TOKENS, feeding)}):
                feeding.beside_frames = None
    return {**inputs, **whole_path.token_companions(model, 1, TOKENS, feeding)}




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
        return families.first_line(error)




def token_inputs(model, ids: torch.Tensor, layout, feeding: Feeding) -> dict:
    """Token ids (and their mask, encoder states) laid out as ``layout`` (see :func:`whole_path.id_layouts`)."""
    ids = whole_path.with_placeholders(ids, feeding)
    inputs = model_inputs(model, whole_path.lay_out_ids(ids, layout), torch.ones_like(ids),
                          **whole_path.encoder_states(model, 1), **whole_path.codebook_index(model))
    if "decoder_input_ids" in inputs:
        inputs["decoder_input_ids"] = whole_path.decoder_ids(ids, layout)
    return whole_path.mask_queries(inputs)




def image_axis(model, feeding: Feeding) -> int | None:
    """None where the model runs on one image a sample; else the first count of
    :data:`whole_path.IMAGE_COUNTS` it runs on with the images on an axis of their own (a pair of
    images to match), or FOLD_FRAMES (a clip's frames along the batch axis); None where none runs (the
    forward's own error is then the reason)."""
    for count in (None, *whole_path.IMAGE_COUNTS, whole_path.FOLD_FRAMES):
        feeding.image_axis = count
        if runs(model, lambda: whole_path.image_inputs(model, 1, feeding)):
            return count
    return None




def id_layout(model, ids: torch.Tensor, feeding: Feeding):
    """The first layout of :func:`whole_path.id_layouts` (plain ids first: None) that the model runs
    on; plain where none does (the forward's own error is then the reason)."""
    for layout in (None, *whole_path.id_layouts(model.config)):
        if runs(model, lambda: token_inputs(model, ids, layout, feeding)):  # noqa: B023 - called before the next layout
            return layout
    return None




def image_companions(model, feeding: Feeding) -> None:
    """What a promptable image model runs with beside its image (``feeding.image_beside``): a box
    prompt wherever it runs with one, token ids only where the image alone is refused; the first
    option that runs is kept (the last tried where none does: the forward's error is then the reason;
    SAM 3's box needs torchvision's roi_align, so it runs without)."""
    options = [()]
    if whole_path.accepts(model, "input_ids"):
        options.append(("text",))
    if whole_path.accepts(model, "input_boxes"):
        options = [(*option, "boxes") for option in options] + options  # with a box first, then without
    for option in options:
        feeding.image_beside = option
        refusal = None if len(options) == 1 else refusal_of(model, lambda: whole_path.image_inputs(model, 1, feeding))
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
        if entry["mechanism"] == "not intercepted":
            entry["why"] = f"not run by the inputs that run here; the box prompt it takes beside them is refused ({refusal})"
