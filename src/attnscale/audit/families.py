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
from dataclasses import dataclass

import torch

from ..errors import UserError, first_line
from ..hub import offline
from .record import SkipKind
from .known import KNOWN
from .sizes import FALLBACKS, TINY, TINY_HYBRID, VISION_TINY  # noqa: F401 - families.TINY etc.

offline()

ATTENTION_WORDS = ("attention", "attn")  # in the class name of a module that attends
ATTENTION_SUFFIXES = ("MLA",)  # or at its end, in capitals (LongcatFlashMLA; not LayerNorm, ConvNormLayer)
NO_ATTENTION = SkipKind.NO_ATTENTION.value  # how the reason of a model without one begins
MAX_PARAMETERS = 32_000_000  # a "tiny" build above this is refused (a config ignored the tiny sizes)
# a composite above this is not built whole: its towers are audited as their own rows instead
MAX_COMPOSITE_PARAMETERS = 5_000_000
MULTIMODAL_WORDS = ("vision", "audio", "speech", "image", "vq", "patcher", "projector", "acoustic", "semantic",
                    "depth", "timestamp", "esmfold")


# parts named after the attention they sit in but computing no q.k: a table of what an attention adds to its
# logits (Phi-4's audio relative-position bias, passed to every layer), a feed-forward block
# (EdgeTamVideoMemoryAttentionMLP: up, act, down), the dense layer after an attention (LxmertAttentionOutput,
# NeighborhoodAttentionOutput: dense, dropout, norm) and a holder of position and mask helpers
# (FunnelAttentionStructure, whose tensors FunnelRelMultiheadAttention takes)
NOT_ATTENTION_SUFFIXES = ("AttentionBias", "MLP", "AttentionOutput", "AttentionStructure")


def is_attention_class(name: str) -> bool:
    return ((any(word in name.lower() for word in ATTENTION_WORDS) or name.endswith(ATTENTION_SUFFIXES))
            and not name.endswith(NOT_ATTENTION_SUFFIXES))


class CannotAudit(Exception):
    """A family that cannot be built as a tiny text model; the message is the reason.
    ``final``: no other tiny size can help (multimodal, too big, no base model class).  A
    composite's CannotAudit also names its ``towers`` and the ``own_attention`` classes of its own file."""

    def __init__(self, reason: str, final: bool = False, kind: SkipKind = SkipKind.NONE, towers: list[dict] = (),
                 own_attention: list[str] = ()):
        super().__init__(reason)
        self.final = final
        self.kind = kind  # the record's skip kind: a model without any attention module says so
        self.towers = list(towers)
        self.own_attention = list(own_attention)


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
    """The TINY sizes under the names this config class uses, its model type's ``tiny`` in :mod:`.known` (a
    family or a tower alike; a sub-config class with no model type under its class name), then ``overrides``."""
    names = field_names(cls)
    attribute_map = getattr(cls, "attribute_map", {}) or {}
    defaults = {f.name: f.default for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    per_axis = {name for name, value in defaults.items() if isinstance(value, (list, tuple))}
    stages = stage_kwargs(defaults)
    kwargs = {}
    for name, value in {**TINY, **TINY_HYBRID}.items():
        target = name if name in names else attribute_map.get(name)
        if target in names and not (stages and target in per_axis):  # lists per stage: shrunk by stage_kwargs
            kwargs.setdefault(target, value)
    if set(VISION_TINY) <= names:
        for name, value in VISION_TINY.items():  # (32, 32) where the config takes a size per axis
            kwargs[name] = (value,) * len(defaults[name]) if name in per_axis else value
    kwargs.update(stages)
    conv = defaults.get("conv_dim")
    if isinstance(conv, (list, tuple)) and conv:  # a wav2vec2-style feature encoder: its convolutions shrunk
        kwargs["conv_dim"] = (32,) * len(conv)
    vocab = kwargs.get("vocab_size", TINY["vocab_size"])
    for token in [name for name in defaults if name.endswith("_token_id")]:  # pad, bos, eos, blank, ...
        default = defaults.get(token)
        if isinstance(default, int) and default >= vocab:
            kwargs[token] = min(3, vocab - 1)
    family = getattr(cls, "model_type", "") or cls.__name__  # a sub-config with no model type: by its class
    kwargs.update({**KNOWN.get(family).tiny, **(overrides or {})})
    return kwargs


WIDTH_SUFFIXES = ("_dim", "_size", "_groups")  # how a field holding a width (or one group per channel) ends
NOT_WIDTHS = ("vocab_size", "image_size", "patch_size")


def default_width(cls) -> int | None:
    """The default hidden size of a config class (under its own name for it), if it has one."""
    if not dataclasses.is_dataclass(cls):
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    name = "hidden_size" if "hidden_size" in defaults else (getattr(cls, "attribute_map", {}) or {}).get("hidden_size")
    value = defaults.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tied_widths(cls, widths: set[int], kwargs: dict) -> dict:
    """Fields that default to a hidden size (this config's, its parent's or a sibling's) under another
    name, set to the tiny hidden size: a validator may require them equal (WavTokenizer's
    codebook_dim, Pocket TTS's flow head condition_dim, a vision tower's text_hidden_size)."""
    if not dataclasses.is_dataclass(cls):
        return {}
    tied = {}
    for f in dataclasses.fields(cls):
        if (f.name not in kwargs and f.name.endswith(WIDTH_SUFFIXES) and f.name not in NOT_WIDTHS
                and isinstance(f.default, int) and not isinstance(f.default, bool) and f.default in widths):
            tied[f.name] = TINY["hidden_size"]
    return tied


def tied_sub_configs(cls, sub_configs: dict, kwargs: dict, widths: set[int]) -> dict:
    """The sub-configs built at the tiny sizes again with their tied widths, where they have any
    (a vision tower's out_hidden_size that the composite requires equal to its text width); an
    optional one too, which the composite would otherwise build at its default sizes."""
    out = {}
    for name, sub_cls in sub_configs.items():
        stated = {}
        if not dataclasses.is_dataclass(sub_cls):  # AutoConfig: the model type and settings its spec states
            sub_cls, stated = spec_class(cls, name)
        if not dataclasses.is_dataclass(sub_cls) or (name in kwargs and not hasattr(kwargs[name], "to_dict")):
            continue  # no config class to build, or a value given as is
        tiny = {**stated, **tiny_kwargs(sub_cls)}  # the spec's settings, under the tiny sizes
        tied = tied_widths(sub_cls, widths, tiny)
        if tied or name not in kwargs:
            try:
                out[name] = sub_cls(**tiny, **tied)
            except Exception:  # noqa: BLE001 - kept as first built
                continue
    return out


def spec_class(cls, name: str) -> tuple[type | None, dict]:
    """An AutoConfig sub-config's class and settings as ``cls``'s spec for it states them (its model
    type's config class and init_kwargs); (None, {}) where it states no model type of this release."""
    spec = (getattr(cls, "sub_configs_defaults", None) or {}).get(name)
    model_type = getattr(spec, "model_type", None)
    try:
        sub_cls = config_class(model_type) if model_type else None
    except UserError:  # a model type with no config class in the installed release
        return None, {}
    return sub_cls, dict(getattr(spec, "init_kwargs", None) or {})


def nested_sub_configs(sub_cls, kwargs: dict, widths: set[int]) -> dict:
    """A sub-config's own sub-configs at the tiny sizes (T5Gemma 2's encoder holds a text and a vision
    config, which would otherwise keep their default widths); an AutoConfig one as its default's model type."""
    out = {}
    for name, nested in (getattr(sub_cls, "sub_configs", None) or {}).items():
        if name in kwargs:
            continue
        if getattr(nested, "__name__", "") == "AutoConfig":
            nested = spec_class(sub_cls, name)[0]
        if nested is None or not dataclasses.is_dataclass(nested):
            continue
        try:
            out[name] = sub_config(nested, widths)
        except Exception:  # noqa: BLE001 - left to the sub-config's own default
            continue
    return out


def first_accepted(cls, kwargs: dict, tied: dict | None = None):
    """``cls(**kwargs)``, or where the config refuses it, with its ``tied`` widths, then with each of the
    FALLBACKS (for fields it has) in turn; the first refusal is raised if none is accepted."""
    refusal = None
    for change in ({}, *([tied] if tied else []), *FALLBACKS):
        if change is not tied and any(name not in kwargs for name in change):
            continue  # a fallback for fields it has
        tried = {**kwargs, **change}
        if change.get("layer_types") == "default":
            tried.pop("layer_types")
        try:
            return cls(**tried)
        except Exception as error:  # noqa: BLE001 - the next change; the first refusal is raised
            refusal = refusal or error
    raise refusal


def sub_config(sub_cls, widths: set[int]):
    """A sub-config at the tiny sizes (its own sub-configs too, its multimodal RoPE sections at the tiny
    head); where it refuses them, again with its tied widths, then with the FALLBACKS."""
    kwargs = tiny_kwargs(sub_cls)
    kwargs.update(nested_sub_configs(sub_cls, kwargs, widths))
    kwargs.update(tiny_rope(sub_cls, kwargs))
    return first_accepted(sub_cls, kwargs, tied_widths(sub_cls, widths, kwargs))


STAGE_HEAD_DIM = 16  # the tiny head dimension of every stage of a hierarchical vision encoder
STAGE_IMAGE = {"image_size": 64, "patch_size": 4, "window_size": 2}  # its image, patches and attention window


def stage_kwargs(defaults: dict) -> dict:
    """A hierarchical vision encoder (Swin, PVT, SegFormer, LeViT, ...) sets its heads per stage: one
    layer per stage, the heads scaled down by the first stage's count (keeping their proportions),
    and the widths set so that every head has STAGE_HEAD_DIM dimensions."""
    heads_name = next((name for name in ("num_heads", "num_attention_heads")
                       if isinstance(defaults.get(name), (list, tuple)) and defaults[name]), None)
    if heads_name is None:
        return {}
    first = defaults[heads_name][0] or 1
    heads = [max(1, round(count / first)) for count in defaults[heads_name]]
    out = {heads_name: heads}
    if isinstance(defaults.get("depths"), (list, tuple)):
        out["depths"] = [1] * len(defaults["depths"])
    if isinstance(defaults.get("hidden_sizes"), (list, tuple)):
        out["hidden_sizes"] = [count * STAGE_HEAD_DIM for count in heads]
    if isinstance(defaults.get("embed_dim"), int):  # stage widths embed_dim x 2^i (Swin) or embed_dim throughout
        out["embed_dim"] = heads[0] * STAGE_HEAD_DIM
    # Each stage halves the resolution: 64 x 64 pixels in 4 x 4 patches leave 16, 8, 4, 2 a side,
    # each a multiple of a 2 x 2 window (Swin's windows must tile every stage).
    for name, value in STAGE_IMAGE.items():
        if isinstance(defaults.get(name), int):
            out[name] = value
        elif isinstance(defaults.get(name), (list, tuple)) and name != "window_size":
            out[name] = (value,) * len(defaults[name])
    if "sr_ratios" in defaults and "image_size" not in defaults:
        # keys reduced by up to 8 a side (SegFormer, GLPN): the 64 x 64 image leaves them 2 x 2, not
        # the one key the default 32 x 32 image would leave (no p_0 / p_1 to read)
        out["image_size"] = STAGE_IMAGE["image_size"]
    return out


def optional_sub_configs(cls, sub_configs: dict) -> set[str]:
    """The sub-configs with a tower's name that a default config of ``cls`` leaves unset: parts of
    the family the base model may do without (ESM's folding head, Moshi's audio codec); a composite
    whose towers then keep their own sizes is refused by the parameter bound, with its towers named."""
    if not dataclasses.is_dataclass(cls):
        return set()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return {name for name in sub_configs if name in defaults and defaults[name] is None
            and any(word in name for word in MULTIMODAL_WORDS)}


def tower_types(cls, sub_configs: dict) -> list[dict]:
    """The towers of a composite: each sub-config's name, its model type (None where the default
    config leaves it unset or has none) and whether that type has a base model of its own."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    try:
        built = cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments: the sub-configs' names alone
        built = None
    found = []
    for name in sub_configs:
        # where the default config leaves it unset, the type its AutoConfig spec states (Gemma 4 assistant's text)
        model_type = (getattr(getattr(built, name, None), "model_type", None)
                      or getattr(spec_class(cls, name)[0], "model_type", None) or None)
        found.append({"name": name, "model_type": model_type, "own": model_type in MODEL_MAPPING_NAMES})
    return found


def towers(cls, sub_configs: dict) -> str:
    """The towers of a composite, each with its model type, and whether it is audited on its own."""
    parts = []
    for tower in tower_types(cls, sub_configs):
        if not tower["model_type"]:
            parts.append(tower["name"])
        else:
            own = "audited as its own family" if tower["own"] else "no base model of its own"
            parts.append(f"{tower['name']}: {tower['model_type']}, {own}")
    return "; ".join(parts)


def own_attention_classes(cls, sub_configs: dict, tower_names=None) -> list[str]:
    """The attention classes a composite runs outside its towers (cross-attention, a Q-Former, a
    perceiver): built on the meta device at the tiny sizes, every module with an attention class
    name that no tower (a module built from a sub-config's class; those of ``tower_names`` where
    given) contains.  Where the composite cannot be built so, every attention class of its own
    modeling file counts (the towers' too)."""
    tower_names = list(sub_configs) if tower_names is None else tower_names
    import importlib

    import torch.nn as nn
    from transformers import AutoModel

    from ..probing.loading import quiet_transformers

    try:
        with quiet_transformers():
            defaults, kwargs = cls(), tiny_kwargs(cls)
            for name in sub_configs:  # each tower's own config class (AutoConfig sub-configs: the default's)
                sub = getattr(defaults, name, None)
                if sub is not None and name not in kwargs:
                    kwargs[name] = type(sub)(**tiny_kwargs(type(sub)))
            config = cls(**kwargs)
            tower_classes = tuple({type(getattr(config, name)) for name in tower_names
                                   if getattr(config, name, None) is not None})
            with torch.device("meta"):
                model = composite_model(config)
    except Exception:  # noqa: BLE001 - cannot be built at the tiny sizes: read its modeling file instead
        module_name = cls.__module__.replace(".configuration_", ".modeling_")
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - no modeling file of its own, or one that needs a missing package
            return []
        in_towers = tower_attention_classes(cls, {name: sub_configs[name] for name in tower_names})
        return sorted(name for name, obj in vars(module).items() if isinstance(obj, type) and issubclass(obj, nn.Module)
                      and obj.__module__ == module.__name__ and is_attention_class(name) and name not in in_towers)
    inside: set[int] = set()
    for module in model.modules():
        if module is not model and isinstance(getattr(module, "config", None), tower_classes):
            inside.update(id(m) for m in module.modules())
    return sorted({type(m).__name__ for m in model.modules() if id(m) not in inside and is_attention_class(type(m).__name__)})


def tower_attention_classes(cls, sub_configs: dict) -> set[str]:
    """The attention classes the towers of a composite run, each tower built alone on the meta device
    from its model class of the composite's package (Granite 4 Vision's text model): where the
    composite cannot be built, its modeling file's attention classes that a tower runs are not its own."""
    from ..probing.loading import quiet_transformers

    found: set[str] = set()
    for sub_cls in sub_configs.values():
        model_cls = tower_class(cls, sub_cls) if isinstance(sub_cls, type) and dataclasses.is_dataclass(sub_cls) else None
        if model_cls is None:
            continue
        try:
            with quiet_transformers(), torch.device("meta"):
                tower = model_cls(sub_cls(**tiny_kwargs(sub_cls)))
        except Exception:  # noqa: BLE001 - a tower that cannot be built alone names nothing
            continue
        found.update(type(m).__name__ for m in tower.modules() if is_attention_class(type(m).__name__))
    return found


def composite_model(config, **kwargs):
    """The composite's model for ``config``: AutoModel's, or where AutoModel maps its type to a tower
    (MusicGen's base model is its decoder, which a MusicgenConfig does not build), the model class of
    its own package that takes this config (MusicgenForConditionalGeneration); for a family with a
    causal LM and no base model class (TrOCR), the LM's decoder."""
    from transformers import AutoModel, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    if getattr(config, "model_type", "") not in MODEL_MAPPING_NAMES:  # a causal LM with no base class: its decoder
        return decoder_of(AutoModelForCausalLM.from_config(config, trust_remote_code=False, **kwargs))
    try:
        return AutoModel.from_config(config, trust_remote_code=False, **kwargs)
    except Exception:  # noqa: BLE001 - AutoModel's class refused the composite's config: its own class, if any
        own = tower_class(type(config), type(config))
        if own is None:
            raise
        return own._from_config(config, **kwargs) if kwargs else own(config)


def composite_skip(cls, sub_configs: dict, reason: str) -> CannotAudit:
    """A final CannotAudit for a composite, carrying its towers and its own attention classes (the audit's
    report marks it covered where every tower is measured as its own family and it has none)."""
    towers = tower_types(cls, sub_configs)
    typed = [tower["name"] for tower in towers if tower["model_type"]]
    own = own_attention_classes(cls, sub_configs) if len(typed) == len(towers) else []  # only then can towers cover it
    rowed = [tower["name"] for tower in towers if has_row(cls, sub_configs, tower)]
    if rowed and len(rowed) < len(towers) and not own_attention_classes(cls, sub_configs, rowed):
        # no attention outside the towers a row audits: the parts no row can (a head's or a streaming cache's
        # settings with no model type: Nemotron 3 Diarization's; a part with no model class of its own:
        # VibeVoice's diffusion head, AdaLN-modulated MLPs) run none, and leave nothing to measure
        towers = [{**tower, "attention": tower.get("attention", tower["name"] in rowed)} for tower in towers]
    return CannotAudit(reason, final=True, towers=towers, own_attention=own)


def has_row(cls, sub_configs: dict, tower: dict) -> bool:
    """Whether a row can audit a composite's tower: a family of its own, or a model class of the
    composite's package built from the tower's config (audited as ``composite.tower``)."""
    sub_cls = sub_configs.get(tower["name"])
    return bool(tower["model_type"]) and (tower["own"] or isinstance(sub_cls, type) and tower_class(cls, sub_cls) is not None)


def tower_class(cls, sub_cls):
    """The model class a composite builds its tower from: a PreTrainedModel of the composite's own
    package whose config class is the tower's (AlignVisionModel for AlignVisionConfig), preferring a
    name ending in Model (not ...WithProjection or a bare ...Transformer); None if there is none."""
    import importlib
    import pkgutil

    from transformers import PreTrainedModel

    package = cls.__module__.rsplit(".", 1)[0]
    found = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if not info.name.startswith("modeling_"):
            continue
        try:
            module = importlib.import_module(f"{package}.{info.name}")
        except Exception:  # noqa: BLE001 - a modeling file that needs a missing package
            continue
        found += [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, PreTrainedModel)
                  and obj.__module__ == module.__name__ and getattr(obj, "config_class", None) is sub_cls]
    if not found:
        return None
    return min(found, key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__), c.__name__))


def build_tower(composite_type: str, tower: str, seed: int = 0, attn_implementation: str = "eager"):
    """A composite's tower that has no base model of its own, at the tiny sizes, random init under
    ``seed``, eval mode; raises CannotAudit with the reason."""
    from ..probing.loading import quiet_transformers

    cls = config_class(composite_type)
    sub_cls = dict(getattr(cls, "sub_configs", {}) or {}).get(tower)
    model_cls = tower_class(cls, sub_cls) if isinstance(sub_cls, type) else None
    if model_cls is None:
        raise CannotAudit(f"no model class of its own for {tower} in {composite_type}'s modeling files", final=True)
    with quiet_transformers():
        tiny = tiny_kwargs(sub_cls)
        widths = {width for width in (default_width(cls), default_width(sub_cls)) if width}
        # its own sub-configs at the tiny sizes too (a vision tower's SAM and CLIP encoders, which it
        # would otherwise build at their defaults), as a composite's sub-config has them (sub_config)
        tiny.update(nested_sub_configs(sub_cls, tiny, widths))
        tied = tied_widths(sub_cls, widths, tiny)
        try:
            config = first_accepted(sub_cls, tiny, tied)
        except Exception as refusal:  # noqa: BLE001 - every change refused
            raise CannotAudit(f"config rejects the tiny sizes: {first_line(refusal)}") from None
        try:
            with torch.device("meta"):
                shell = model_cls(config)
        except Exception as error:  # noqa: BLE001
            raise CannotAudit(f"cannot be built from its config: {first_line(error)}") from None
        parameters = shell_parameters(shell, final=True)
        if parameters > MAX_PARAMETERS:
            raise too_big(parameters, MAX_PARAMETERS)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                model = model_cls._from_config(config, attn_implementation=attn_implementation)
            except Exception as error:  # noqa: BLE001
                raise CannotAudit(f"cannot be built from its config: {first_line(error)}") from None
    return with_round_trip(fit_rotary_sections(model)).eval()


def with_round_trip(model):
    """A VQ image tokenizer with no forward of its own (Chameleon's and Emu3's: encode and decode methods,
    which their composites call) runs as Janus's VQ-VAE forward does: the image encoded to its tokens, then
    decoded where it has a decoder (Emu3's), so every attention block of both halves runs."""
    if type(model).forward is not torch.nn.Module.forward or not hasattr(model, "encode"):
        return model
    import inspect

    takes_sizes = "image_sizes" in inspect.signature(model.encode).parameters

    def forward(pixel_values):
        sizes = {"image_sizes": torch.tensor([list(pixel_values.shape[-2:])] * len(pixel_values))} if takes_sizes else {}
        encoded = model.encode(pixel_values, **sizes)
        if not hasattr(model, "decode"):
            return encoded
        tokens = encoded.image_tokens
        return model.decode(torch.stack(tokens) if isinstance(tokens, (list, tuple)) else tokens)

    model.forward = forward
    return model


def whole_config(model_type: str):
    """A composite's config with every sub-config at the tiny sizes (each with its model type's
    ``tiny``), nested ones too (a vision config's backbone) and those its fields leave None but
    its default config builds (SAM's vision_config); one the default leaves unset stays unset (ESM's
    folding head); a sub-config the composite's ``whole_tiny`` names takes those fields beside its
    own.  Raises CannotAudit with the refusal."""
    from ..probing.loading import quiet_transformers

    def tiny_tree(cls, extra=None):
        kwargs = tiny_kwargs(cls, extra)
        try:
            defaults = cls()
        except Exception:  # noqa: BLE001 - a config that needs arguments: its sub-configs as it builds them
            defaults = None
        for name in dict(getattr(cls, "sub_configs", {}) or {}):
            built = getattr(defaults, name, None)
            if name not in kwargs and built is not None:
                # a detector's backbone as tiny_backbone shrinks it; another AutoConfig sub-config: the type
                # its default builds
                widened = KNOWN.get(cls.model_type).whole_tiny.get(name)
                kwargs[name] = tiny_backbone(cls, name) or tiny_tree(type(built), widened)
        kwargs.update(tiny_rope(cls, kwargs))
        return first_accepted(cls, kwargs, tied_widths(cls, {width for width in (default_width(cls),) if width}, kwargs))

    with quiet_transformers():
        try:
            return tiny_tree(config_class(model_type))
        except Exception as error:  # noqa: BLE001
            raise CannotAudit(f"built whole, the config rejects the tiny sizes: {first_line(error)}", final=True) from None


def build_whole(model_type: str, seed: int = 0, attn_implementation: str = "eager"):
    """The composite built whole from :func:`whole_config`, bounded by MAX_PARAMETERS (not the
    composite bound: every part is at the tiny sizes)."""
    return build(whole_config(model_type), seed, attn_implementation, max_composite=MAX_PARAMETERS)


def tiny_config(model_type: str, hybrid: bool = True, tied_first: bool = False, **overrides):
    """The family's config at the tiny sizes (``overrides`` win; ``hybrid=False`` keeps the
    recurrent layers' own sizes; ``tied_first``: with its tied widths from the first try, for a model
    that refuses what its config accepts); raises CannotAudit with a reason."""
    cls = config_class(model_type)
    sub_configs = dict(getattr(cls, "sub_configs", {}) or {})
    optional = optional_sub_configs(cls, sub_configs)  # ESM's esmfold_config: None unless asked for
    sub_configs = {name: sub for name, sub in sub_configs.items() if name not in optional}
    multimodal = [name for name in sub_configs if any(word in name for word in MULTIMODAL_WORDS)]
    if multimodal:
        raise composite_skip(cls, sub_configs, f"multimodal composite ({towers(cls, sub_configs)})")
    kwargs = tiny_kwargs(cls, overrides)
    kwargs.update(tiny_rope(cls, kwargs))
    every = dict(getattr(cls, "sub_configs", {}) or {})  # optional ones too
    widths = {width for width in map(default_width, (cls, *every.values())) if width}
    for name, sub_cls in sub_configs.items():
        if name in kwargs:
            continue
        if getattr(sub_cls, "__name__", "") == "AutoConfig":
            backbone = tiny_backbone(cls, name)
            if backbone is not None:
                kwargs[name] = backbone
                continue
            raise composite_skip(cls, every, f"a composite of other families ({towers(cls, every)})")
        try:
            kwargs[name] = sub_config(sub_cls, widths)
        except Exception as error:  # noqa: BLE001 - any refusal of the tiny sizes is a reason to skip
            raise CannotAudit(f"sub-config {name} rejects the tiny sizes: {first_line(error)}") from None
    from ..probing.loading import quiet_transformers

    refusal = None
    with quiet_transformers():
        tied = {**tied_widths(cls, widths, kwargs), **tied_sub_configs(cls, every, kwargs, widths)}
        if tied_first and not tied:
            raise CannotAudit("no tied widths to try")
        first = [tied] if tied_first else [{}, *([tied] if tied else [])]
        for change in (*first, *FALLBACKS, {"hybrid": "default"}) if hybrid \
                else ({"hybrid": "default"},):
            tried = {**kwargs, **change}
            if change.get("layer_types") == "default":
                tried.pop("layer_types")
            elif change.get("hybrid") == "default":
                tried = {k: v for k, v in kwargs.items() if k not in TINY_HYBRID or k in (overrides or {})}
            elif change is not tied and any(name not in kwargs for name in change):  # a fallback for fields it has
                continue
            try:
                return cls(**tried)
            except Exception as error:  # noqa: BLE001 - any refusal is a reason to try the next change, then skip
                refusal = refusal or error
    raise CannotAudit(f"config rejects the tiny sizes: {first_line(refusal)}")


BACKBONE = "backbone_config"  # the sub-config of a detector or segmenter's image backbone (ResNet, Swin, HGNetV2)
CNN_WIDTH_DIVISOR = 8  # a convolutional backbone's channel widths at the tiny sizes: its own / 8, at least 8


def cnn_kwargs(defaults: dict) -> dict:
    """A convolutional backbone (stages of channel widths and depths, no heads) shrunk: one block a
    stage, every channel width divided by CNN_WIDTH_DIVISOR.  The attention it feeds is the
    composite's own; the backbone only has to turn the image into a few feature vectors."""
    out = {}
    for name, value in defaults.items():
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            if name in ("depths", "stage_num_blocks", "stage_numb_of_layers"):
                out[name] = [1] * len(value)
            elif name == "hidden_sizes" or name.endswith("_channels"):
                # a width of at most 4 is the image's channels (HGNetV2's stem starts at 3)
                out[name] = [v if v <= 4 else max(8, v // CNN_WIDTH_DIVISOR) for v in value]
        elif isinstance(value, int) and not isinstance(value, bool) and name in ("embedding_size", "stem_channels"):
            out[name] = max(8, value // CNN_WIDTH_DIVISOR)
    return out


def tiny_backbone(cls, name: str):
    """A sub-config of a detector (a config with an image backbone) as its config would build it by
    default (its sub-config spec's model type and settings), at the tiny sizes: the backbone, and a
    text encoder or mask decoder beside it.  None for a config without a backbone, a spec without a
    model type of the installed transformers, or one that needs timm."""
    if BACKBONE not in (getattr(cls, "sub_configs", None) or {}):
        return None
    sub_cls, stated = spec_class(cls, name)
    model_type = getattr(sub_cls, "model_type", None)
    if sub_cls is None or KNOWN.get(model_type).cannot_build:
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(sub_cls)} if dataclasses.is_dataclass(sub_cls) else {}
    tiny = tiny_kwargs(sub_cls)
    if not stage_kwargs(defaults):  # no heads per stage: a CNN (a Swin backbone is shrunk by stage_kwargs)
        tiny.update(cnn_kwargs(defaults))
    refusal = None
    # the spec's stage selection may name stages the tiny sizes do not have: then the backbone's default
    for kwargs in ({**stated, **tiny}, {**{k: v for k, v in stated.items() if k not in STAGE_SELECTION}, **tiny}):
        try:
            return sub_cls(**kwargs)
        except Exception as error:  # noqa: BLE001 - a backbone that refuses the tiny sizes: skipped with the reason
            refusal = refusal or error
    raise CannotAudit(f"{name} ({model_type}) rejects the tiny sizes: {first_line(refusal)}")


STAGE_SELECTION = ("out_indices", "out_features", "return_idx")


def shares_of(sizes, total: int) -> list[int]:
    """``sizes`` scaled to sum to ``total`` (largest remainders), each at least 1."""
    whole = sum(sizes)
    exact = [size * total / whole for size in sizes]
    scaled = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(len(sizes)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[: max(0, total - sum(scaled))]:
        scaled[i] += 1
    while sum(scaled) > total:  # the floor of 1 overshot: take it back from the largest
        scaled[scaled.index(max(scaled))] -= 1
    return scaled


def tiny_rope(cls, kwargs: dict) -> dict:
    """Multimodal RoPE (Qwen2-VL, GLM-4V, HunYuan-VL) splits each head's rotary half into temporal,
    height and width sections sized for the default head, and the config checks that they fill it:
    at the tiny head they are scaled to its rotary half in the default proportions (the attention
    arithmetic is unchanged, only its sizes).  The rope_parameters to pass, or none."""
    from ..probing.loading import quiet_transformers

    try:
        with quiet_transformers():
            defaults = cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments has no default sections to scale
        return {}
    rope = getattr(defaults, "rope_parameters", None)
    sections = rope.get("mrope_section") if isinstance(rope, dict) else None
    if not isinstance(sections, (list, tuple)) or not sections or "rope_parameters" in kwargs:
        return {}
    heads = kwargs.get("num_attention_heads", TINY["num_attention_heads"])
    rotary = kwargs.get("qk_rope_head_dim") or kwargs.get("head_dim") or kwargs.get("hidden_size", TINY["hidden_size"]) // heads
    partial = rope.get("partial_rotary_factor", getattr(defaults, "partial_rotary_factor", 1.0)) or 1.0
    half = int(rotary * partial) // 2
    if half < len(sections):
        return {}
    return {"rope_parameters": {**rope, "mrope_section": shares_of(sections, half)}}


def count_parameters(config) -> int:
    """Parameters of the model ``config`` builds, counted on the meta device (nothing allocated);
    raises CannotAudit for a model with no attention module (a CNN, a state-space model; not final: a
    hybrid's attention layers can appear only with more layers, which the next tries give)."""
    with torch.device("meta"):
        model = composite_model(config)
    return shell_parameters(model)


def shell_parameters(model, final: bool = False) -> int:
    """The parameters of a (meta-device) model; CannotAudit if it has no attention module."""
    if not any(is_attention_class(type(module).__name__) for module in model.modules()):
        raise CannotAudit(f"{NO_ATTENTION} ({type(model).__name__} has no module whose class is an attention)", final=final,
                   kind=SkipKind.NO_ATTENTION)
    return sum(p.numel() for p in model.parameters())


def too_big(parameters: int, limit: int) -> CannotAudit:
    return CannotAudit(f"{parameters:,} parameters at the tiny sizes (more than {limit:,}): the config ignores them", final=True)


def build(config, seed: int = 0, attn_implementation: str = "eager", max_parameters: int = MAX_PARAMETERS,
          max_composite: int = MAX_COMPOSITE_PARAMETERS):
    """The base model (no LM head) for ``config``, random init under ``seed``, eval mode, CPU; a
    build over ``max_parameters`` (``max_composite`` for a composite with towers) is refused."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from ..probing.loading import quiet_transformers

    model_type = getattr(config, "model_type", "")
    if model_type not in MODEL_MAPPING_NAMES and model_type not in causal_lm_names():
        raise CannotAudit(f"no base model class (AutoModel) for {model_type!r}", final=True)
    register_base_model(config)
    with quiet_transformers():
        try:
            parameters = count_parameters(config)
        except CannotAudit:
            raise
        except Exception as error:  # noqa: BLE001 - a family transformers cannot build: skipped with the reason
            raise CannotAudit(f"cannot be built from its config: {first_line(error)}",
                              final=unmapped_config(error)) from None
        sub_configs = dict(getattr(type(config), "sub_configs", {}) or {})
        tower_names = [name for name in sub_configs if any(word in name for word in MULTIMODAL_WORDS)]
        if parameters > (min(max_parameters, max_composite) if tower_names else max_parameters):
            if tower_names:
                raise composite_skip(type(config), sub_configs,
                                     f"multimodal composite ({towers(type(config), sub_configs)}): "
                                     f"{parameters:,} parameters at the tiny sizes, its towers keep their own")
            raise too_big(parameters, max_parameters)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                model = composite_model(config, attn_implementation=attn_implementation)
            except Exception as error:  # noqa: BLE001
                raise CannotAudit(f"cannot be built from its config: {first_line(error)}") from None
    return with_video_session(with_time_condition(fit_rotary_sections(model))).eval()


def unmapped_config(error: BaseException) -> bool:
    """An Auto class's refusal of a config class it maps to no model (its ``from_config`` raised it): no other tiny
    size can help.  Told by where the error was raised, not by its message."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    code = frame.tb_frame.f_code if frame is not None else None
    return (isinstance(error, ValueError) and code is not None and code.co_name == "from_config"
            and code.co_filename.endswith("auto_factory.py"))


def causal_lm_names():  # read when called (the auto mappings load lazily)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def base_model_class(config):
    """AutoModel's class for the config's model type, found in the family's own modeling files where
    transformers does not export it (VoxtralRealtimeTextModel is missing from its module's __all__); None if none."""
    import importlib
    import pkgutil

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    if not isinstance(name, str):
        return None
    try:
        return getattr(transformers, name)
    except (AttributeError, ImportError, ValueError):
        pass
    package = type(config).__module__.rsplit(".", 1)[0]
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name.startswith("modeling_"):
            try:
                found = getattr(importlib.import_module(f"{package}.{info.name}"), name, None)
            except Exception:  # noqa: BLE001 - a modeling file that needs a missing package
                continue
            if found is not None:
                return found
    return None


def register_base_model(config) -> None:
    """Registers the config's class for AutoModel where AutoModel cannot resolve it: Evolla's config class
    name is also the alias model type "EvollaModel", which wins AutoModel's reverse lookup and has no model;
    Voxtral Realtime's text model is not exported."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    if type(config) in MODEL_MAPPING:  # what AutoModel.from_config asks (by the class name's model type)
        try:
            MODEL_MAPPING[type(config)]  # and its class can be loaded
            return
        except (KeyError, ValueError, AttributeError, ImportError):
            pass
    model_cls = base_model_class(config)
    if model_cls is not None:
        MODEL_MAPPING.register(type(config), model_cls, exist_ok=True)


def decoder_of(lm):
    decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else None
    return decoder if isinstance(decoder, torch.nn.Module) and decoder is not lm else lm.base_model


TIME_CONDITION = "t_cond"  # Voxtral Realtime's delay-time embedding, which its composite computes for its text model


def with_time_condition(model):
    """A text model whose layers read a time condition that only its composite computes (Voxtral Realtime:
    x * (1 + ada_rms_norm(t_cond)) before the MLP) gets a zero one where the caller gives none: the MLP input
    unscaled, the attention untouched."""
    import inspect

    if any(p == TIME_CONDITION for p in inspect.signature(type(model).forward).parameters):
        return model
    if not any(TIME_CONDITION in inspect.signature(type(m).forward).parameters for m in model.modules()):
        return model

    def fill(module, args, kwargs):
        if kwargs.get(TIME_CONDITION) is None:
            kwargs[TIME_CONDITION] = torch.zeros(1, module.config.hidden_size, dtype=next(module.parameters()).dtype)
        return args, kwargs

    model.register_forward_pre_hook(fill, with_kwargs=True)
    return model


VIDEO_SESSION = "inference_session"  # what a video tracker's forward runs on (SAM 2's video model, EdgeTAM's)


def session_class(model):
    """The inference session a video tracker's forward takes (its annotation), None for another model."""
    import inspect
    import sys
    import typing

    parameters = inspect.signature(type(model).forward).parameters
    if VIDEO_SESSION not in parameters:
        return None
    annotation = parameters[VIDEO_SESSION].annotation
    if isinstance(annotation, str):  # postponed annotations: resolved in the model's module
        annotation = typing.get_type_hints(type(model).forward, vars(sys.modules[type(model).__module__])).get(
            VIDEO_SESSION)
    return annotation if isinstance(annotation, type) else None


def prompted_session(model, image: torch.Tensor):
    """A fresh session of a two-frame clip (the image, then it mirrored) with one box prompt
    (feed.PROMPT_BOX, in pixels as the processor leaves it) on frame 0 for object 1, set up as
    the processor's add_inputs_to_inference_session does (the box as two points labelled 2 and 3)."""
    from .feed import PROMPT_BOX

    frames = torch.stack([image, image.flip(-1)])
    session = session_class(model)(video=frames, video_height=frames.shape[-2], video_width=frames.shape[-1],
                                   dtype=frames.dtype)
    obj_idx = session.obj_id_to_idx(1)
    corners = torch.tensor(PROMPT_BOX, dtype=frames.dtype).reshape(1, 1, 2, 2)
    session.add_point_inputs(obj_idx, 0, {"point_coords": corners,
                                          "point_labels": torch.tensor([[[2, 3]]], dtype=torch.int32)})
    session.obj_with_new_inputs = [1]
    return session


def with_video_session(model):
    """A video tracker (its forward takes an inference session and a frame index) run on an image as
    the audit feeds one: a fresh prompted session of two frames (:func:`prompted_session`, from the
    first image of the batch) in which the prompted frame 0 runs first (vision encoder, prompt encoder,
    the mask decoder's two-way transformer, the memory encoder) and the call then runs frame 1, which
    attends to frame 0's memory (the memory attention); the attention of both passes is read."""
    if session_class(model) is None:
        return model

    def open_session(module, args, kwargs):
        images = kwargs.pop("pixel_values", None)
        if images is None or kwargs.get(VIDEO_SESSION) is not None:
            return args, {**kwargs, **({"pixel_values": images} if images is not None else {})}
        session = prompted_session(module, images[0])
        module.forward(inference_session=session, frame_idx=0)  # the prompted frame, its memory stored
        return args, {**kwargs, VIDEO_SESSION: session, "frame_idx": 1}

    model.register_forward_pre_hook(open_session, with_kwargs=True)
    return model


def fit_rotary_sections(model):
    """A rotary embedding that falls back to the default head's multimodal sections where the config
    names none (Qwen2-VL's [16, 24, 24]) gets them scaled to its own rotary half (its inv_freq), in
    the same proportions, as tiny_rope does for configs that state them."""
    for module in model.modules():
        sections, inv_freq = getattr(module, "mrope_section", None), getattr(module, "inv_freq", None)
        if isinstance(sections, (list, tuple)) and sections and isinstance(inv_freq, torch.Tensor):
            half = inv_freq.numel()
            if sum(sections) != half and half >= len(sections):
                module.mrope_section = shares_of(sections, half)
    return model
