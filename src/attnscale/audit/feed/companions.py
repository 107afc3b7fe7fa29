"""What a model reads beside its main input: a page's boxes, region features, a text or a prompt beside an image,
another encoder's states, a Q-Former's queries.

Document models (BROS, LiLT, UDOP, LayoutLMv3) read each token's box on the page; LXMERT reads region features and
their positions beside its text; ViLT an image beside its text; Grounding DINO a text beside its image; OneFormer a
task prompt; SegGPT a prompt image and its mask.  As for the main input, the path probe overwrites q, k and v at
the projections, so only shapes and validity matter: boxes are well formed (left < right, top < bottom, on the
0-1000 grid), every token and pixel real.
"""

from __future__ import annotations

import torch

from .kinds import accepts, main_input, required_inputs


COMPANION_TOKENS = 8  # the text an image model requires beside its image (Grounding DINO's)


def takes_companions(model) -> bool:
    """Whether the forward takes anything beside_tokens gives (boxes, region features, an image)."""
    return any(accepts(model, name) for name in (*BOX_NAMES, "visual_feats", "pixel_values"))


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


PREFIX_SEGMENTS = "token_type_ids"  # a prefix LM's segments: 0 over the image and the prompt (seen both ways), 1 after


def prefix_segments(model, batch: int, tokens: int) -> dict:
    """A prefix LM's segments where its forward takes them and its text attends both ways over the prefix
    (``use_bidirectional_attention``: PaliGemma): all 0, one prompt with no suffix, as its processor always gives
    them.  Without them transformers' eager builds a causal mask while sdpa, handed none, runs the layers' own
    bidirectional flag (masking_utils, transformers 5.25): a difference of masks on an input no processor makes."""
    configs = (model.config, getattr(model.config, "text_config", None))
    if not accepts(model, PREFIX_SEGMENTS) or not any(getattr(c, "use_bidirectional_attention", False) for c in configs):
        return {}
    return {PREFIX_SEGMENTS: torch.zeros(batch, tokens, dtype=torch.long)}
