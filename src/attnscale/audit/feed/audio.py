"""Audio (raw samples, features such as log-mel frames) and other tensors of a shape the model runs on (embeddings,
continuous inputs): the shapes to try, from the config, and the input of one shape."""

from __future__ import annotations

import inspect

import torch

from .kinds import AUDIO_INPUTS, accepts, data_inputs, main_input, required_inputs


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


WIDTH_FIELDS = ("hidden_size", "d_model")


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
