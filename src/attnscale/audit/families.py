"""The attention families of the installed transformers, as tiny random-init models.

A family is a ``model_type`` that the installed transformers maps to a causal, masked or
sequence-to-sequence language model (decoders, encoders and encoder-decoders).  Each is
built from its own config class with the sizes shrunk to a few thousand parameters per
layer (:data:`TINY`), so that a forward pass takes milliseconds on a CPU; nothing is
downloaded and no weights are read.  A family that cannot be built that way is skipped
with the reason (multimodal, a config that rejects the tiny sizes, ...).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from ..errors import UserError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The tiny sizes, by standard config field name (a config's attribute_map translates them,
# e.g. hidden_size -> n_embd).  Head dim 16 with 4 query and 2 key/value heads.
TINY = {
    "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 128,
    "encoder_layers": 1, "decoder_layers": 1, "num_layers": 2, "num_decoder_layers": 1,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "d_ff": 128, "d_kv": 16, "ffn_dim": 128, "n_inner": 128, "ffn_hidden_size": 128,
    "num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4, "moe_num_experts": 4, "num_experts_per_tok": 2,
    "moe_top_k": 2, "moe_intermediate_size": 32, "n_shared_experts": 1, "kv_n_heads": 2,
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "layer_types": None, "vocab_size_per_layer_input": 128, "entity_vocab_size": 16, "pronunciation_vocab_size": 16,
    "shape_vocab_size": 16, "block_size": 8, "rotary_dim": 8,
    # Llama 4's attention temperature starts at position floor_scale (8192 by default); at 4
    # it shows within a 16-token probe.  A size, like the others: the formula is unchanged.
    "floor_scale": 4,
    # audio encoders: 16 mel channels over 32 frames (Whisper's encoder sees 2 x max_source_positions)
    "num_mel_bins": 16, "max_source_positions": 16,
}
# Families whose config needs more than the tiny sizes to be consistent.
FAMILY_TINY = {"gpt_neo": {"attention_types": [[["global", "local"], 1]]},
               "llama4_text": {"num_hidden_layers": 4},  # every 4th layer has no RoPE (and the temperature)
               "bamba": {"attn_layer_indices": [1]},  # no attention layer by default
               # the last num_kv_shared_layers reuse the keys and values of an earlier layer of their type
               "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                                "layer_types": ["sliding_attention", "full_attention"] * 2},
               "zamba2": {"layers_block_type": ["linear_attention", "hybrid"]},
               "esm": {"pad_token_id": 1}}  # its attention mask is input_ids != pad_token_id (None by default)
# When a config refuses the tiny sizes, these changes are tried in turn (validators ask for
# equal key/value heads, one expert per token, their own layer pattern).
FALLBACKS = ({"num_key_value_heads": 4}, {"num_experts_per_tok": 1}, {"layer_types": "default"})
# The recurrent and linear-attention layers of hybrid models, shrunk too (their slow CPU
# paths dominate a forward pass at the default sizes); dropped again if a config refuses.
TINY_HYBRID = {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 16,
               "ssm_state_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16, "linear_key_head_dim": 16,
               "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
               "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32, "n_groups": 1,
               "mamba_n_groups": 1}
# Vision encoders: a 32 x 32 image in 8 x 8 patches (16 patches, and a class token where the family has one).
VISION_TINY = {"image_size": 32, "patch_size": 8}
ATTENTION_WORDS = ("attention", "attn", "mla")  # in the class name of a module that attends (LongcatFlashMLA)
MAX_PARAMETERS = 5_000_000  # a "tiny" build above this is refused (a config ignored the tiny sizes)
MULTIMODAL_WORDS = ("vision", "audio", "speech", "image", "vq", "patcher", "projector", "acoustic", "semantic",
                    "depth", "timestamp", "esmfold")


class Skip(Exception):
    """A family that cannot be built as a tiny text model; the message is the reason.
    ``final``: no other tiny size can help (multimodal, too big, no base model class)."""

    def __init__(self, reason: str, final: bool = False):
        super().__init__(reason)
        self.final = final


@dataclass
class Family:
    model_type: str
    kinds: tuple[str, ...]  # "causal", "masked", "seq2seq"


def text_families() -> list[Family]:
    """Every decoder, encoder and encoder-decoder family of the installed transformers."""
    from transformers.models.auto import modeling_auto

    mappings = {"causal": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                "masked": modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
                "seq2seq": modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES}
    kinds: dict[str, list[str]] = {}
    for kind, mapping in mappings.items():
        for model_type in mapping:
            kinds.setdefault(model_type, []).append(kind)
    return [Family(name, tuple(kinds[name])) for name in sorted(kinds)]


def all_families() -> list[Family]:
    """The text families (:func:`text_families`) and every other model type with a base model
    class (vision and audio encoders, composites, models without attention): each is audited
    or skipped with what it lacks."""
    from transformers.models.auto import modeling_auto

    text = {family.model_type: family for family in text_families()}
    others = [Family(name, ("base",)) for name in modeling_auto.MODEL_MAPPING_NAMES if name not in text]
    return sorted([*text.values(), *others], key=lambda family: family.model_type)


def config_class(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]
    except KeyError:
        raise UserError(f"unknown model family {model_type!r}; accepted: a model_type of the installed transformers "
                         "(attnscale audit --list shows them)") from None


def field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def tiny_kwargs(cls, overrides: dict | None = None) -> dict:
    """The TINY sizes under the names this config class uses, then ``overrides`` as given."""
    names = field_names(cls)
    attribute_map = getattr(cls, "attribute_map", {}) or {}
    kwargs = {}
    for name, value in {**TINY, **TINY_HYBRID}.items():
        if name in names:
            kwargs.setdefault(name, value)
        elif attribute_map.get(name) in names:
            kwargs.setdefault(attribute_map[name], value)
    if set(VISION_TINY) <= names:
        kwargs.update(VISION_TINY)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    conv = defaults.get("conv_dim")
    if isinstance(conv, (list, tuple)) and conv:  # a wav2vec2-style feature encoder: its convolutions shrunk
        kwargs["conv_dim"] = (32,) * len(conv)
    vocab = kwargs.get("vocab_size", TINY["vocab_size"])
    for token in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
                  "cls_token_id", "mask_token_id", "unk_token_id"):
        default = defaults.get(token)
        if isinstance(default, int) and default >= vocab:
            kwargs[token] = min(3, vocab - 1)
    kwargs.update(overrides or {})
    return kwargs


def optional_sub_configs(cls, sub_configs: dict) -> set[str]:
    """The sub-configs with a tower's name that a default config of ``cls`` leaves unset: parts of
    the family the base model may do without (ESM's folding head, Moshi's audio codec); a composite
    whose towers then keep their own sizes is refused by the parameter bound, with its towers named."""
    if not dataclasses.is_dataclass(cls):
        return set()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return {name for name in sub_configs if name in defaults and defaults[name] is None
            and any(word in name for word in MULTIMODAL_WORDS)}


def towers(cls, sub_configs: dict) -> str:
    """The towers of a composite, each with its model type, and whether it is audited on its own."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    try:
        built = cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments: name the sub-configs alone
        return ", ".join(sub_configs)
    parts = []
    for name in sub_configs:
        model_type = getattr(getattr(built, name, None), "model_type", None)
        if not model_type:
            parts.append(name)
        else:
            own = "audited as its own family" if model_type in MODEL_MAPPING_NAMES else "no base model of its own"
            parts.append(f"{name}: {model_type}, {own}")
    return "; ".join(parts)


def tiny_config(model_type: str, hybrid: bool = True, **overrides):
    """The family's config at the tiny sizes (``overrides`` win; ``hybrid=False`` keeps the
    recurrent layers' own sizes); raises Skip with a reason."""
    cls = config_class(model_type)
    sub_configs = dict(getattr(cls, "sub_configs", {}) or {})
    optional = optional_sub_configs(cls, sub_configs)  # ESM's esmfold_config: None unless asked for
    sub_configs = {name: sub for name, sub in sub_configs.items() if name not in optional}
    multimodal = [name for name in sub_configs if any(word in name for word in MULTIMODAL_WORDS)]
    if multimodal:
        raise Skip(f"multimodal composite ({towers(cls, sub_configs)})", final=True)
    kwargs = tiny_kwargs(cls, {**FAMILY_TINY.get(model_type, {}), **(overrides or {})})
    for name, sub_cls in sub_configs.items():
        if name in kwargs:
            continue
        if getattr(sub_cls, "__name__", "") == "AutoConfig":
            raise Skip(f"a composite of other families ({towers(cls, dict(getattr(cls, 'sub_configs', {}) or {}))})",
                       final=True)
        try:
            kwargs[name] = sub_cls(**tiny_kwargs(sub_cls))
        except Exception as error:  # noqa: BLE001 - any refusal of the tiny sizes is a reason to skip
            raise Skip(f"sub-config {name} rejects the tiny sizes: {first_line(error)}") from None
    from ..probing.loading import quiet_transformers

    refusal = None
    with quiet_transformers():
        for change in ({}, *FALLBACKS, {"hybrid": "default"}) if hybrid else ({"hybrid": "default"},):
            tried = {**kwargs, **change}
            if change.get("layer_types") == "default":
                tried.pop("layer_types")
            elif change.get("hybrid") == "default":
                tried = {k: v for k, v in kwargs.items() if k not in TINY_HYBRID or k in (overrides or {})}
            elif any(name not in kwargs for name in change):
                continue
            try:
                return cls(**tried)
            except Exception as error:  # noqa: BLE001 - any refusal is a reason to try the next change, then skip
                refusal = refusal or error
    raise Skip(f"config rejects the tiny sizes: {first_line(refusal)}")


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    return f"{type(error).__name__}: {line}"[:200]


def count_parameters(config) -> int:
    """Parameters of the model ``config`` builds, counted on the meta device (nothing allocated);
    raises Skip for a model with no attention module (a CNN, a state-space model; not final: a
    hybrid's attention layers can appear only with more layers, which the next tries give)."""
    from transformers import AutoModel

    with torch.device("meta"):
        model = AutoModel.from_config(config, trust_remote_code=False)
    if not any(word in type(module).__name__.lower() for module in model.modules() for word in ATTENTION_WORDS):
        raise Skip(f"no attention module ({type(model).__name__} has no module whose class is an attention)")
    return sum(p.numel() for p in model.parameters())


def build(config, seed: int = 0, attn_implementation: str = "eager", max_parameters: int = MAX_PARAMETERS):
    """The base model (no LM head) for ``config``, random init under ``seed``, eval mode, CPU."""
    from transformers import AutoModel

    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from ..probing.loading import quiet_transformers

    model_type = getattr(config, "model_type", "")
    if model_type not in MODEL_MAPPING_NAMES:
        raise Skip(f"no base model class (AutoModel) for {model_type!r}", final=True)
    with quiet_transformers():
        try:
            parameters = count_parameters(config)
        except Skip:
            raise
        except Exception as error:  # noqa: BLE001 - a family transformers cannot build: skipped with the reason
            raise Skip(f"cannot be built from its config: {first_line(error)}",
                       final="Unrecognized configuration class" in str(error)) from None
        if parameters > max_parameters:
            sub_configs = dict(getattr(type(config), "sub_configs", {}) or {})
            tower_names = [name for name in sub_configs if any(word in name for word in MULTIMODAL_WORDS)]
            if tower_names:
                raise Skip(f"multimodal composite ({towers(type(config), sub_configs)}): "
                           f"{parameters:,} parameters at the tiny sizes, its towers keep their own", final=True)
            raise Skip(f"{parameters:,} parameters at the tiny sizes (more than {max_parameters:,}): the config "
                       "ignores them", final=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                model = AutoModel.from_config(config, attn_implementation=attn_implementation, trust_remote_code=False)
            except Exception as error:  # noqa: BLE001
                raise Skip(f"cannot be built from its config: {first_line(error)}") from None
    return model.eval()
