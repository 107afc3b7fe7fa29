"""Token ids: laid out per codebook or channel where the model takes them so, with a composite's media at its
placeholder tokens, a byte model's patch lengths and what the model was found to need beside them."""

from __future__ import annotations

import torch

from ...probing.intercept import model_inputs
from .companions import beside_tokens, encoder_states, mask_queries, prefix_segments, texts_beside
from .feeding import Feeding
from .image import pixel_values
from .kinds import CODEBOOK_INDEX, accepts


def token_inputs(model, ids: torch.Tensor, layout, feeding: Feeding) -> dict:
    """Token ids (and their mask, encoder states) laid out as ``layout`` (see :func:`id_layouts`)."""
    ids = with_placeholders(ids, feeding)
    inputs = model_inputs(model, lay_out_ids(ids, layout), torch.ones_like(ids), **encoder_states(model, 1),
                          **codebook_index(model), **prefix_segments(model, 1, ids.shape[-1]))
    if "decoder_input_ids" in inputs:
        inputs["decoder_input_ids"] = decoder_ids(ids, layout)
    return mask_queries(inputs)


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


# audio-token models: every position carries one id per codebook (Bark's fine acoustics model: all of Encodec's)
CODEBOOK_FIELDS = ("num_codebooks", "n_codes_total")


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
