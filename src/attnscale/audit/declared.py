"""The factor a config declares: what its fields should make the attention apply to q.k.

Each rule is what a config field does in the installed transformers, quoted from its
source as a :class:`SourceRule` (file under ``transformers/`` and a line it contains; a
test checks every quote against the installed files).  The audit measures the factor and
compares it with what these rules give; a family whose code applies a factor no field
declares shows up as a mismatch, with its own source line next to it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .known import KNOWN
from .source_lines import source_of


@dataclass(frozen=True)
class SourceRule:
    path: str  # relative to the transformers package
    quote: str  # a line (or part of one) the file contains
    says: str  # what it means for the factor
    # Where other transformers releases keep the line: a shared file (5.25 moved DeepSeek's
    # mscale folding into modeling_rope_utils.py), and the call a family's code then makes.
    moved_to: tuple[str, ...] = ()
    called_as: tuple[str, ...] = ()

    def in_code(self, code: str) -> bool:
        """Whether ``code`` applies the rule: holds its line, or calls the shared copy of it."""
        return self.quote in code or any(call in code for call in self.called_as)


HEAD_DIM = SourceRule("models/llama/modeling_llama.py", "self.scaling = self.head_dim**-0.5",
                      "the default: factor = head_dim^-0.5, head_dim the width of q.k per head")
T5_NO_SCALING = SourceRule("models/t5/modeling_t5.py", "does not scale the query/key dot product",
                           "T5 and its copies apply no factor (self.scaling = 1.0); the init folds it into W_q")
QUERY_PRE_ATTN_SCALAR = SourceRule("models/gemma2/modeling_gemma2.py",
                                   "self.scaling = config.query_pre_attn_scalar**-0.5",
                                   "factor = query_pre_attn_scalar^-0.5")
MPT_SOFTMAX_SCALE = SourceRule("models/mpt/modeling_mpt.py", "self.softmax_scale = config.attn_config.softmax_scale",
                               "factor = attn_config.softmax_scale (head_dim^-0.5 when it is None)")
DISENTANGLED_TERMS = SourceRule("models/deberta/modeling_deberta.py", "scale_factor = 1 + len(self.pos_att_type)",
                                "factor = (head_dim * (1 + len(pos_att_type)))^-0.5: DeBERTa scales by its number of "
                                "attention terms (content, and each relative-position term)")
DISENTANGLED_COUNTED = SourceRule("models/deberta_v2/modeling_deberta_v2.py", "scale_factor += 1",
                                  "factor = (head_dim * scale_factor)^-0.5, scale_factor 1 plus one for each of c2p "
                                  "and p2c in pos_att_type (DeBERTa-v2 and its copies)")
WIDTH_SCALE = SourceRule("models/cvt/modeling_cvt.py", "self.scale = embed_dim**-0.5",
                         "factor = embed_dim^-0.5, the layer's whole width (all heads), not head_dim (CvT, as its "
                         "original code)")
HEAD_COUNT_SCALE = SourceRule("models/evolla/modeling_evolla.py", "self.scale = self.num_attention_heads**-0.5",
                              "factor = num_attention_heads^-0.5, the number of heads, not head_dim (Evolla's "
                              "sequence aligner cross-attention)")
ATTENTION_MULTIPLIER = SourceRule("models/granite/modeling_granite.py", "self.scaling = config.attention_multiplier",
                                  "factor = attention_multiplier")
SCALE_ATTN_WEIGHTS = SourceRule("models/gpt2/modeling_gpt2.py", "self.scaling = self.head_dim**-0.5",
                                "factor = head_dim^-0.5 only if scale_attn_weights, else 1")
INVERSE_LAYER_IDX = SourceRule("models/gpt2/modeling_gpt2.py", "self.scaling /= float(self.layer_idx + 1)",
                               "factor divided by layer_idx + 1 if scale_attn_by_inverse_layer_idx")
YARN_MSCALE_ALL_DIM = SourceRule("models/deepseek_v3/modeling_deepseek_v3.py", "scaling = scaling * mscale * mscale",
                                 "factor times mscale^2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (rope_type "
                                 "not default), in the families whose attention code has this line or calls "
                                 "yarn_apply_mscale (DeepSeek's and its copies; not, e.g., Ministral 3, whose rope "
                                 "parameters carry mscale_all_dim too)",
                                 moved_to=("modeling_rope_utils.py",), called_as=("yarn_apply_mscale(",))
YARN_GET_MSCALE = SourceRule("models/deepseek_v3/modeling_deepseek_v3.py", "return 0.1 * mscale * math.log(scale) + 1.0",
                             "yarn_get_mscale(scale, mscale) = 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1)",
                             moved_to=("modeling_rope_utils.py",))
YARN_ATTENTION_FACTOR = SourceRule("modeling_rope_utils.py",
                                   "get_mscale(factor, mscale_all_dim))",  # yarn_get_mscale from 5.25 on
                                   "YaRN's cos and sin carry attention_factor (given, or mscale ratio, or "
                                   "0.1 ln(factor) + 1): q.k on rotary coordinates times attention_factor^2")
LONGROPE_ATTENTION_FACTOR = SourceRule("modeling_rope_utils.py",
                                       "attention_factor = math.sqrt(1 + math.log(factor) / math.log(original_max_position_embeddings))",
                                       "LongRoPE's attention factor (when not given)")
BATCH_MSCALE = SourceRule("models/phimoe/modeling_phimoe.py", 'self.config.rope_parameters["long_mscale"]',
                          "Phi-MoE's rotary multiplies cos and sin by short_mscale (long_mscale once the batch's largest "
                          "position passes original_max_position_embeddings) for any rope_type but default, in place of "
                          "that type's attention factor: q.k on rotary coordinates times short_mscale^2 at position 0")
SOFTCAP = SourceRule("models/gemma2/modeling_gemma2.py", "attn_weights = attn_weights / softcap",
                     "logits = softcap * tanh(factor * q.k / softcap) with softcap = attn_logit_softcapping")
SOFTCAP_PASSED = SourceRule("models/gemma2/modeling_gemma2.py", "softcap=self.attn_logit_softcapping,",
                            "the layer hands attn_logit_softcapping to its attention function (Gemma 3 stores it "
                            "and does not)")
KEY_MULTIPLIER = SourceRule("models/falcon_h1/modeling_falcon_h1.py", "* self.key_multiplier",
                            "keys times key_multiplier before the product")
QUERY_PRESCALE = SourceRule("models/esm/modeling_esm.py", "query_layer = query_layer * self.attention_head_size**-0.5",
                            "q times head_dim^-0.5 before RoPE, and the attention function's factor 1 (ESM): the whole "
                            "path applies head_dim^-0.5")
Q_SCALED_FIRST = SourceRule("models/whisper/modeling_whisper.py",
                            "# and enforce no scaling (1.0) in the attention call below.",
                            "q times the factor (self.scaling) before the product and the attention function called "
                            "with scaling=1.0 (Whisper, OPT and their copies): the function applies 1, the whole path "
                            "the factor")
UNIT_SCALING = SourceRule("models/gemma3n/modeling_gemma3n.py", "self.scaling = 1.0",
                         "the layer's code sets factor 1 and no config field changes it (Gemma 3n: q and k are "
                         "normalised, QK-norm)")
UNIT_SCALING_INT = SourceRule("models/dia/modeling_dia.py", "self.scaling = 1",
                             "the layer's code sets factor 1 (as an int) and no config field changes it (Dia's self- "
                             "and cross-attention, as its original code: the factor is left to the weights)")
INVERSE_HEAD_DIM = SourceRule("models/inkling/modeling_inkling.py", "self.scaling = 1.0 / self.head_dim",
                              "factor = 1/head_dim: q and k are RMS-normalised per head (Inkling)")
HALF_HEAD_DIM = SourceRule("models/zamba2/modeling_zamba2.py", "self.scaling = (self.head_dim / 2) ** -0.5",
                           "factor = (head_dim / 2)^-0.5: the shared block's heads see the input embedding "
                           "concatenated to the hidden state, twice the width")
TEMPERATURE_TUNING = SourceRule("models/llama4/modeling_llama4.py",
                                "torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale)) * self.attn_scale + 1.0",
                                "layers without RoPE scale q by log1p(floor((i + 1) / floor_scale)) * attn_scale + 1 "
                                "at sequence index i")
LEARNED_QUERY_SCALE = SourceRule("models/timesfm/modeling_timesfm.py",
                                  "scale = F.softplus(self.scaling).mul(1.442695041 / math.sqrt(self.head_dim))",
                                  "q scaled per coordinate by a learned softplus(s_j) / (ln 2 sqrt(d_k)) before the "
                                  "product (TimesFM); the attention function gets scaling=1.0; at s_j = 0 this is "
                                  "1/sqrt(d_k)")
PER_DIM_QUERY_SCALE = SourceRule("models/gemma4/modeling_gemma4.py",
                                  "query_states = query_states * self.q_scale * F.softplus(self.per_dim_scale)",
                                  "q scaled per coordinate by q_scale softplus(s_j), q_scale = head_dim^-0.5 / "
                                  "softplus(0) (Gemma 3n's and Gemma 4's audio encoders): at s_j = 0 this is "
                                  "head_dim^-0.5",
                                  called_as=("query_states * self.q_scale * per_dim_scale_sp_broadcast",))
KEY_SCALE = SourceRule("models/gemma4/modeling_gemma4.py", "self.k_scale = math.log(1 + math.e) / math.log(2)",
                      "k scaled by k_scale = ln(1 + e) / ln 2 (1.8946) before the product (Gemma 4's audio "
                      "encoder), beside q's q_scale softplus(s_j) = softplus(s_j) / (ln 2 sqrt(d_k)): at s_j = 0 "
                      "the factor is ln(1 + e) / (ln 2 sqrt(d_k)), 1.89 times head_dim^-0.5")
COSINE_LOGIT_SCALE = SourceRule("models/swinv2/modeling_swinv2.py",
                                "logit_scale = torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp()",
                                "cosine attention: q and k normalised, their cosine times a learned per-head "
                                "temperature exp(min(logit_scale, ln 100)) (Swin V2); no factor on q.k")
MLA_Q_LORA_SCALE = SourceRule("models/longcat_flash/modeling_longcat_flash.py",
                              "self.mla_scale_q_lora = (config.hidden_size / self.q_lora_rank) ** 0.5",
                              "q times (hidden_size / q_lora_rank)^0.5 after q_b_proj, both its no-RoPE and RoPE parts "
                              "(q_pass = q_pass * self.mla_scale_q_lora, q_rot = q_rot * self.mla_scale_q_lora), "
                              "before the product (LongCat-Flash's LoRA scaling): the whole path applies the "
                              "function's factor times it")
# Mechanisms outside the factor: they change the logits of real inputs, not the factor the whole
# path applies to the q and k that reach the product (named next to the measured factor).
ATTENTION_IN_MULTIPLIER = SourceRule("models/falcon_h1/modeling_falcon_h1.py",
                                     "hidden_states=hidden_states * self.attention_in_multiplier",
                                     "the attention layer's input times attention_in_multiplier m: q, k and v of a "
                                     "given hidden state scale by m, q.k by m^2, before the factor")
CLIP_QKV = SourceRule("models/mpt/modeling_mpt.py", "mixed_qkv = mixed_qkv.clamp(min=-self.clip_qkv, max=self.clip_qkv)",
                      "q, k and v clamped to [-clip_qkv, clip_qkv] after the projections (MPT, DBRX, OLMo, OLMoE): "
                      "|q.k| at most d_k clip^2, the path linear only inside the clip")
CONTENT_BIAS = SourceRule("models/parakeet/modeling_parakeet.py",
                          "query_states_with_bias_u = query_states + self.bias_u.view(",
                          "a learned bias u added to q before the product (Transformer-XL's content bias, in "
                          "Conformer-style encoders and XLNet's r_w_bias): the logit gap of a designed q = m e is "
                          "factor x (m + u_e) g, and its u_e g part is linear in the keys alone, which the whole "
                          "path's designs cancel (q = 0 at gap 1): the path reads the factor the config declares")
MLA_KV_LORA_SCALE = SourceRule("models/longcat_flash/modeling_longcat_flash.py",
                               "k_pass = k_pass * self.mla_scale_kv_lora",
                               "the normalised key latent times (hidden_size / kv_lora_rank)^0.5 before kv_b_proj: the "
                               "no-RoPE part of k of a given hidden state scales by it upstream of k's projection (not "
                               "the RoPE part), outside the factor")
RULES = {name: rule for name, rule in globals().items() if isinstance(rule, SourceRule)}


@dataclass
class Declared:
    """What the config declares, for one attention layer."""

    head_dim: int | None
    function: float | None  # factor the attention function should apply
    rope_gain: float  # attention_factor^2: extra factor on q.k over rotary coordinates
    key_multiplier: float  # extra factor on every coordinate
    rotary_first: bool  # the head's first coordinate is rotary
    rotary_last: bool  # the head's last coordinate is rotary
    cap: float | None
    position: str | None  # declared dependence on position or length
    rules: list[str] = field(default_factory=list)
    fields: dict = field(default_factory=dict)
    outside: list[str] = field(default_factory=list)  # mechanisms outside the factor, named
    coordinate_scale: tuple[float, float] | None = None  # a learned factor on q's first and last coordinates
    cosine_temperature: float | None = None  # cosine attention: the temperature on cos(q, k) (median over heads)
    cap_unapplied: float | None = None  # the config's attn_logit_softcapping, which this layer's code never applies

    def path(self, last: bool) -> float | None:
        """The factor the whole path should apply along the first (or last) coordinate."""
        if self.function is None:
            return None
        rotary = self.rotary_last if last else self.rotary_first
        learned = self.coordinate_scale[last] if self.coordinate_scale else 1.0
        return self.function * self.key_multiplier * (self.rope_gain if rotary else 1.0) * learned

    def to_dict(self) -> dict:
        return {**asdict(self), "path_first": self.path(False), "path_last": self.path(True)}


@functools.lru_cache(maxsize=None)
def family_source(model_type: str) -> str:
    """The text of the family's own modeling files in the installed transformers ('' if none)."""
    import transformers
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    folder = Path(transformers.__file__).parent / "models" / model_type_to_module_name(str(model_type))
    return "".join(path.read_text(encoding="utf-8") for path in sorted(folder.glob("modeling_*.py")))


def family_applies_text(model_type: str, rule: SourceRule) -> bool:
    """Whether the family's own modeling files hold the rule's line (or call its shared copy)."""
    return rule.in_code(family_source(model_type))


@functools.lru_cache(maxsize=None)
def code_of(module_name: str) -> str:
    """The source of a loaded Python module ('' if it has none)."""
    import inspect
    import sys

    try:
        return inspect.getsource(sys.modules[module_name])
    except (KeyError, OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=None)
def class_code(cls) -> str:
    """The source of a transformers class, of the transformers classes it inherits from and of the
    module functions they call by name: where an attention layer's own lines are (its file can
    hold other attention classes, an audio tower's, with other factors)."""
    import inspect
    import sys

    def source(obj) -> str:
        try:
            return source_of(obj)
        except (OSError, TypeError):
            return ""

    classes = [klass for klass in cls.__mro__ if klass.__module__.startswith("transformers.")]
    code = "".join(source(klass) for klass in classes)
    # and the module functions the classes call by name (DeepSeek's yarn_apply_mscale sets the factor)
    functions = {function for klass in classes for name, function in vars(sys.modules[klass.__module__]).items()
                 if inspect.isfunction(function) and function.__module__ == klass.__module__ and f"{name}(" in code}
    return code + "".join(source(function) for function in sorted(functions, key=lambda f: f.__qualname__))


def source_for(module) -> str | None:
    """The source of an attention module's class (and the classes it inherits from); where that is
    unknown, its modeling file's; None if neither is."""
    if module is None:
        return None
    return class_code(type(module)) or code_of(type(module).__module__) or None


def get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YARN_GET_MSCALE."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def head_dim_of(config) -> int | None:
    for getter in (lambda c: c.qk_nope_head_dim + c.qk_rope_head_dim, lambda c: c.head_dim, lambda c: c.d_kv,
                   lambda c: c.hidden_size // c.num_attention_heads):
        try:
            value = getter(config)
        except Exception:  # noqa: BLE001 - configs raise their own errors for fields that vary by layer
            continue
        if isinstance(value, int) and value > 0:
            return value
    return None


def rope_parameters_for(config, layer_type: str | None) -> dict:
    rope = getattr(config, "rope_parameters", None) or {}
    if not isinstance(rope, dict):
        return {}
    if layer_type is not None and isinstance(rope.get(layer_type), dict):
        return rope[layer_type]
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return next(iter(rope.values()))
    return rope


def rope_attention_factor(rope: dict, config) -> tuple[float, str | None]:
    kind = rope.get("rope_type", "default")
    given = rope.get("attention_factor")
    factor = rope.get("factor")
    if kind in ("yarn", "longrope") and factor is None:
        original = rope.get("original_max_position_embeddings")
        maximum = getattr(config, "max_position_embeddings", None)
        factor = maximum / original if original and maximum else None
    if kind == "yarn":
        if given is not None:
            return float(given), "YARN_ATTENTION_FACTOR"
        mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")
        if factor is None:
            return 1.0, None
        if mscale and mscale_all:
            return get_mscale(factor, mscale) / get_mscale(factor, mscale_all), "YARN_ATTENTION_FACTOR"
        return get_mscale(factor), "YARN_ATTENTION_FACTOR"
    if kind == "longrope":
        if given is not None:
            return float(given), "LONGROPE_ATTENTION_FACTOR"
        original = rope.get("original_max_position_embeddings")
        if factor is None or factor <= 1 or not original:
            return 1.0, None
        return math.sqrt(1 + math.log(factor) / math.log(original)), "LONGROPE_ATTENTION_FACTOR"
    return 1.0, None


def rotary_coordinates(config, rope: dict, head_dim: int | None) -> tuple[bool, bool]:
    """Whether the head's first and last coordinates are rotated (no RoPE: neither)."""
    if not rope or head_dim is None:
        return False, False
    nope = getattr(config, "qk_nope_head_dim", None)
    if isinstance(nope, int) and nope > 0:  # MLA: [no RoPE | RoPE]
        return False, True
    partial = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    rotary = int(head_dim * partial)
    return rotary > 0, rotary >= head_dim


def relative_terms(config) -> list[str]:
    """DeBERTa's pos_att_type as a list ("p2c|c2p" in older configs)."""
    kinds = getattr(config, "pos_att_type", None)
    return [kind.strip() for kind in kinds.lower().split("|")] if isinstance(kinds, str) else list(kinds or [])


@dataclass(frozen=True)
class Layer:
    """What the declared rules read of one attention layer: its config, its model type, the code that runs it, its
    q.k width per head, its whole width, and the module itself."""

    config: object
    model_type: str
    code: str
    head_dim: int | None
    width: int | None
    module: object
    index: int | None = None  # its layer index

    def applies(self, rule: SourceRule) -> bool:
        return rule.in_code(self.code)

    def has_line(self, rule: SourceRule) -> bool:
        """The quote as a whole statement ("self.scaling = 1.0", not a prefix of "... = 1.0 / d")."""
        return any(line.split("#")[0].strip() == rule.quote for line in self.code.splitlines())


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mpt_softmax_scale(config):
    attn_config = getattr(config, "attn_config", None)
    return attn_config.get("softmax_scale") if isinstance(attn_config, dict) else getattr(attn_config, "softmax_scale", None)


def counted_terms(kinds: list[str]) -> int:
    return sum(kind in kinds for kind in ("c2p", "p2c"))


@dataclass(frozen=True)
class FactorRule:
    """One way a layer's code or config sets the factor its attention function applies: ``factor`` gives (the
    factor, the fields it read) where the rule holds for the layer, None where it does not."""

    name: str
    factor: Callable[[Layer], tuple[float, dict] | None]


def when(holds: bool, factor, fields: dict | None = None) -> tuple[float, dict] | None:
    return (factor(), fields or {}) if holds else None


# The factor rules, in the order they are tried: where several hold, the last one sets the factor (so the
# unscaled T5 family comes after the rules it would otherwise fall under, DeBERTa's terms after its count).
# A family differs here by a line and a value; a new way of scaling is a new entry.
FACTOR_RULES = (
    FactorRule("UNIT_SCALING_INT", lambda l: when(l.has_line(UNIT_SCALING_INT) and not l.applies(HEAD_DIM), lambda: 1.0)),
    FactorRule("UNIT_SCALING", lambda l: when(l.has_line(UNIT_SCALING) and not l.applies(HEAD_DIM), lambda: 1.0)),
    FactorRule("T5_NO_SCALING", lambda l: when("T5_NO_SCALING" in KNOWN.get(l.model_type).declares, lambda: 1.0)),
    FactorRule("HALF_HEAD_DIM", lambda l: when(l.applies(HALF_HEAD_DIM) and bool(l.head_dim),
                                               lambda: (l.head_dim / 2) ** -0.5)),
    FactorRule("INVERSE_HEAD_DIM", lambda l: when(l.has_line(INVERSE_HEAD_DIM) and bool(l.head_dim),
                                                  lambda: 1.0 / l.head_dim)),
    FactorRule("QUERY_PRE_ATTN_SCALAR", lambda l: when(
        number(qpas := getattr(l.config, "query_pre_attn_scalar", None)) and qpas > 0 and l.applies(QUERY_PRE_ATTN_SCALAR),
        lambda: qpas**-0.5, {"query_pre_attn_scalar": qpas})),
    FactorRule("WIDTH_SCALE", lambda l: when(bool(l.width) and l.has_line(WIDTH_SCALE), lambda: l.width**-0.5,
                                             {"embed_dim": l.width})),
    FactorRule("HEAD_COUNT_SCALE", lambda l: when(
        isinstance(heads := getattr(l.module, "num_attention_heads", None), int) and heads > 0
        and l.has_line(HEAD_COUNT_SCALE), lambda: heads**-0.5, {"num_attention_heads": heads})),
    FactorRule("DISENTANGLED_COUNTED", lambda l: when(
        bool(l.head_dim) and l.has_line(DISENTANGLED_COUNTED) and not l.applies(DISENTANGLED_TERMS),
        lambda: (l.head_dim * (1 + counted_terms(relative_terms(l.config)))) ** -0.5,
        {"pos_att_type": relative_terms(l.config)})),
    FactorRule("DISENTANGLED_TERMS", lambda l: when(
        bool(l.head_dim) and l.applies(DISENTANGLED_TERMS),
        lambda: (l.head_dim * (1 + len(relative_terms(l.config)))) ** -0.5, {"pos_att_type": relative_terms(l.config)})),
    FactorRule("MPT_SOFTMAX_SCALE", lambda l: when(
        number(scale := mpt_softmax_scale(l.config)) and l.applies(MPT_SOFTMAX_SCALE), lambda: float(scale),
        {"attn_config.softmax_scale": scale})),
    FactorRule("ATTENTION_MULTIPLIER", lambda l: when(
        number(multiplier := getattr(l.config, "attention_multiplier", None)), lambda: float(multiplier),
        {"attention_multiplier": multiplier})),
    FactorRule("SCALE_ATTN_WEIGHTS", lambda l: when(getattr(l.config, "scale_attn_weights", None) is False,
                                                    lambda: 1.0, {"scale_attn_weights": False})),
)


@dataclass
class Draft:
    """One layer's declaration as the modifiers build it, after the factor rules (:data:`FACTOR_RULES`) set its
    factor: what multiplies q.k beyond it, and the rules and config fields read on the way."""

    function: float | None  # the attention function's factor
    rules: list[str]
    fields: dict
    rope: dict  # the layer's rope parameters
    key_multiplier: float = 1.0  # a config's multiplier on the keys
    q_first: float = 1.0  # a factor applied to q before the product, outside the attention function
    key_scale: float = 1.0  # a scale the layer applies to its keys
    gain: float = 1.0  # RoPE's attention factor (on the rotary coordinates)
    coordinate_scale: tuple[float, float] | None = None
    cosine: float | None = None
    cap: float | None = None
    position: str | None = None
    cap_unapplied: float | None = None

    def read(self, rule: str, **fields) -> None:
        self.rules.append(rule)
        self.fields.update(fields)


def inverse_layer_idx(layer: Layer, draft: Draft) -> None:
    if getattr(layer.config, "scale_attn_by_inverse_layer_idx", False) and draft.function is not None \
            and layer.index is not None:
        draft.function /= layer.index + 1
        draft.read("INVERSE_LAYER_IDX", scale_attn_by_inverse_layer_idx=True)


def q_scaled_first(layer: Layer, draft: Draft) -> None:
    """Whisper's and OPT's q scaled by the factor before the product, the function called with scaling=1.0."""
    code = layer.code
    if draft.function is not None and "scaling=1.0" in code and ("* self.scaling" in code or "self.scaling *" in code):
        draft.q_first, draft.function = draft.function, 1.0
        draft.read("Q_SCALED_FIRST")


def yarn_mscale_all_dim(layer: Layer, draft: Draft) -> None:
    rope = draft.rope
    mscale_all, factor = rope.get("mscale_all_dim"), rope.get("factor")
    if (rope.get("rope_type", "default") != "default" and mscale_all and draft.function is not None
            and layer.applies(YARN_MSCALE_ALL_DIM) and factor is not None):
        draft.function *= get_mscale(factor, mscale_all) ** 2
        draft.read("YARN_MSCALE_ALL_DIM", mscale_all_dim=mscale_all, rope_factor=factor)


def rope_gain(layer: Layer, draft: Draft) -> None:
    gain, rule = rope_attention_factor(draft.rope, layer.config)
    if "BATCH_MSCALE" in KNOWN.get(layer.model_type).declares and draft.rope.get("rope_type", "default") != "default":
        # its code discards the RoPE type's attention factor for short_mscale (at the designs' position 0)
        short = draft.rope.get("short_mscale")
        if number(short):
            draft.gain = float(short)
            draft.read("BATCH_MSCALE", short_mscale=short)
        return
    if rule:
        draft.gain = gain
        draft.read(rule, attention_factor=gain)


def key_multiplier(layer: Layer, draft: Draft) -> None:
    value = getattr(layer.config, "key_multiplier", None)
    if isinstance(value, (int, float)):
        draft.key_multiplier = float(value)
        draft.read("KEY_MULTIPLIER", key_multiplier=value)


def query_prescale(layer: Layer, draft: Draft) -> None:
    if layer.applies(QUERY_PRESCALE) and layer.head_dim:
        draft.q_first *= layer.head_dim**-0.5
        draft.read("QUERY_PRESCALE")


def mla_q_lora_scale(layer: Layer, draft: Draft) -> None:
    q_lora, hidden = getattr(layer.config, "q_lora_rank", None), getattr(layer.config, "hidden_size", None)
    if layer.applies(MLA_Q_LORA_SCALE) and isinstance(q_lora, int) and q_lora > 0 and isinstance(hidden, int):
        draft.q_first *= (hidden / q_lora) ** 0.5
        draft.read("MLA_Q_LORA_SCALE", hidden_size=hidden, q_lora_rank=q_lora)


def learned_query_scale(layer: Layer, draft: Draft) -> None:
    """TimesFM's learned per-coordinate query scale: softplus(s) / (ln 2 sqrt(head_dim)), in place of the factor."""
    learned, head_dim = getattr(layer.module, "scaling", None), layer.head_dim
    if (layer.applies(LEARNED_QUERY_SCALE) and head_dim and isinstance(learned, torch.Tensor)
            and learned.shape == (head_dim,)):
        per_coordinate = torch.nn.functional.softplus(learned.detach().double()) / (math.log(2) * math.sqrt(head_dim))
        draft.function, draft.coordinate_scale = 1.0, (float(per_coordinate[0]), float(per_coordinate[-1]))
        draft.fields["scaling (learned, first and last coordinate)"] = [float(learned[0].detach()),
                                                                        float(learned[-1].detach())]
        draft.rules[:] = [rule for rule in draft.rules if rule != "HEAD_DIM"] + ["LEARNED_QUERY_SCALE"]


def per_dim_query_scale(layer: Layer, draft: Draft) -> None:
    per_dim, head_dim = getattr(layer.module, "per_dim_scale", None), layer.head_dim
    if (layer.applies(PER_DIM_QUERY_SCALE) and head_dim and isinstance(per_dim, torch.Tensor)
            and per_dim.shape == (head_dim,)):
        per_coordinate = torch.nn.functional.softplus(per_dim.detach().double()) / math.log(2)  # 1 at s_j = 0
        draft.coordinate_scale = (float(per_coordinate[0]), float(per_coordinate[-1]))
        draft.read("PER_DIM_QUERY_SCALE",
                   **{"per_dim_scale (learned, first and last coordinate)": [float(per_dim[0]), float(per_dim[-1])]})


def key_scale(layer: Layer, draft: Draft) -> None:
    value = getattr(layer.module, "k_scale", None)
    if layer.applies(KEY_SCALE) and isinstance(value, float):
        draft.key_scale = value
        draft.read("KEY_SCALE", k_scale=value)


def cosine_logit_scale(layer: Layer, draft: Draft) -> None:
    """Swin V2's cosine attention: a learned temperature per head on cos(q, k), no factor on q.k."""
    logit_scale = getattr(layer.module, "logit_scale", None)
    if layer.applies(COSINE_LOGIT_SCALE) and isinstance(logit_scale, torch.Tensor):
        temperatures = logit_scale.detach().double().clamp(max=math.log(100.0)).exp().flatten()
        draft.cosine, draft.function = float(temperatures.median()), None
        draft.fields["logit_scale (learned, per head)"] = [round(float(v), 6) for v in logit_scale.detach().flatten()]
        draft.rules[:] = ["COSINE_LOGIT_SCALE"]


def softcap(layer: Layer, draft: Draft) -> None:
    cap = getattr(layer.config, "attn_logit_softcapping", None)
    if not isinstance(cap, (int, float)):
        return
    if not (layer.applies(SOFTCAP) or layer.applies(SOFTCAP_PASSED)):
        # Gemma 3 stores the field and never applies it (a finding, cap_never_applied); VideoPrism's pooling head
        # skips the cap its encoder layers apply from the same config (by design: measure.caps_skipped_by_design)
        draft.cap_unapplied = float(cap)
        return
    draft.cap = float(cap)
    draft.read("SOFTCAP", attn_logit_softcapping=cap)


def cap_never_applied(cap: float) -> str:
    return (f"attn_logit_softcapping = {cap:g} is set in the config, but the layer's code never applies it (its class "
            f"neither caps the logits nor passes {SOFTCAP_PASSED.quote.rstrip(',')!r} to its attention function, as "
            f"{SOFTCAP_PASSED.path} does)")


def temperature_tuning(layer: Layer, draft: Draft) -> None:
    config = layer.config
    if getattr(config, "attn_temperature_tuning", False):
        draft.position = "temperature grows with the sequence index in layers without RoPE"
        draft.read("TEMPERATURE_TUNING", attn_temperature_tuning=True, floor_scale=getattr(config, "floor_scale", None),
                   attn_scale=getattr(config, "attn_scale", None))


# What changes q.k beside the factor, in the order applied (a later one reads what an earlier one set: q scaled
# first takes the factor the rules found, a learned scale replaces it, cosine attention drops it and the rules
# named so far).
# Each reads the layer's code or config; a small function where one value cannot say it.
MODIFIERS = (inverse_layer_idx, q_scaled_first, yarn_mscale_all_dim, rope_gain, key_multiplier, query_prescale,
             mla_q_lora_scale, learned_query_scale, per_dim_query_scale, key_scale, cosine_logit_scale, softcap,
             temperature_tuning)


def declared_for(config, model_type: str, layer_index: int | None = None, layer_type: str | None = None,
                 d_k: int | None = None, source: str | None = None, width: int | None = None,
                 module=None) -> Declared:
    """The factors ``config`` declares for the attention layer ``layer_index`` (of ``layer_type``).

    ``d_k``: the width of q.k per head as the layer computes it (the default rule's
    1/sqrt(d_k)); without it, the config's head dimension.  ``width``: the layer's embed_dim (all
    heads), for code that scales by it.  ``source``: the text of the modeling
    file whose code runs the layer (default: the family's modeling files); a rule whose line that
    code lacks is not applied: a config field the code never reads sets no factor.  ``module``: the
    layer itself, whose learned per-coordinate query scale (TimesFM's) is part of its factor."""
    code = family_source(model_type) if source is None else source
    head_dim = d_k or head_dim_of(config)
    layer = Layer(config, model_type, code, head_dim, width, module, layer_index)
    fields: dict = {"head_dim": head_dim}
    rules = ["HEAD_DIM"]
    function = head_dim**-0.5 if head_dim else None
    for rule in FACTOR_RULES:  # the last rule that holds sets the factor; every one that holds names its fields
        found = rule.factor(layer)
        if found is not None:
            function, read = found
            fields.update(read)
            rules = [rule.name]
    draft = Draft(function, rules, fields, rope_parameters_for(config, layer_type))
    for modify in MODIFIERS:
        modify(layer, draft)
    first, last = rotary_coordinates(config, draft.rope, head_dim)
    multiplier = draft.key_multiplier * draft.q_first * draft.key_scale  # on every coordinate of q.k
    outside = outside_the_factor(config, model_type, code, fields, draft.rules) + \
        rounded_keys(module, code, fields, draft.rules)
    return Declared(head_dim, draft.function, draft.gain**2, multiplier, first, last, draft.cap, draft.position,
                    draft.rules, fields, outside, draft.coordinate_scale, draft.cosine,
                    draft.cap_unapplied)


@dataclass(frozen=True)
class Rounding:
    """Keys rounded to a number format before the product, by a line of the layer's code that runs where the
    layer's ``attribute`` is set: the designed keys reach the product rounded, so the whole path reads the
    rounding with the factor and is not judged (the attention function's factor still is)."""

    format: str
    quote: str
    attribute: str


ROUNDINGS = (  # Kolibri 1.1's sparse layers (those with an indexer) attend to NVFP4 keys and values
    Rounding("NVFP4", "key_states = key_states + (nvfp4_fake_quantize(key_states) - key_states).detach()", "indexer"),
)


def rounded_keys(module, code: str, fields: dict, rules: list[str]) -> list[str]:
    found = []
    for rounding in ROUNDINGS:
        if module is not None and rounding.quote in code and getattr(module, rounding.attribute, None) is not None:
            fields["keys rounded to"] = rounding.format
            rules.append("ROUNDED_KEYS")
            found.append(f"keys and values rounded to {rounding.format} before the product (read from the code, where "
                         f"the layer's {rounding.attribute} is set): the whole path is read with the rounding, not judged")
    return found


def clip_of(config) -> float | None:
    attn_config = getattr(config, "attn_config", None)
    value = (attn_config.get("clip_qkv") if isinstance(attn_config, dict) else getattr(attn_config, "clip_qkv", None))
    value = getattr(config, "clip_qkv", None) if value is None else value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


CONTENT_BIASES = ("bias_u", "pos_bias_u", "r_w_bias")  # what Parakeet, Conformers and XLNet call u


def outside_the_factor(config, model_type: str, code: str, fields: dict, rules: list[str]) -> list[str]:
    """The config fields that change the logits outside the factor, where the code reads them."""
    found = []
    multiplier = getattr(config, "attention_in_multiplier", None)
    if (isinstance(multiplier, (int, float)) and multiplier != 1
            and family_applies_text(model_type, ATTENTION_IN_MULTIPLIER)):
        fields["attention_in_multiplier"] = multiplier
        rules.append("ATTENTION_IN_MULTIPLIER")
        found.append(f"attention input x{multiplier:g} (attention_in_multiplier, read from the code: q.k of a given "
                     f"hidden state x{multiplier**2:.4g})")
    bias = next((name for name in CONTENT_BIASES if f"+ self.{name}" in code), None)
    if bias is not None:
        rules.append("CONTENT_BIAS")
        found.append(f"a learned bias added to q before the product ({bias}, Transformer-XL's content bias: its term "
                     "u.k is linear in the keys alone, cancelled by the whole path's designs)")
    kv_lora, hidden = getattr(config, "kv_lora_rank", None), getattr(config, "hidden_size", None)
    if MLA_KV_LORA_SCALE.in_code(code) and isinstance(kv_lora, int) and kv_lora > 0 and isinstance(hidden, int):
        scale = (hidden / kv_lora) ** 0.5
        fields.update(hidden_size=hidden, kv_lora_rank=kv_lora)
        rules.append("MLA_KV_LORA_SCALE")
        found.append(f"the key latent x{scale:.4g} before kv_b_proj (mla_scale_kv_lora = (hidden_size / kv_lora_rank)"
                     f"^0.5, read from the code: the no-RoPE part of k of a given hidden state x{scale:.4g}, upstream "
                     "of k's projection)")
    clip = clip_of(config)
    if clip is not None and "clip_qkv" in code and ".clamp" in code:
        fields["clip_qkv"] = clip
        rules.append("CLIP_QKV")
        found.append(f"q, k, v clipped at +-{clip:g} (clip_qkv, read from the code)")
    return found


def scaling_lines(model) -> list[str]:
    """The lines of the model's own modeling file that set a factor (quoted next to a mismatch)."""
    import inspect
    import sys

    lines = []
    # in the order the modules first appear (a set's order changes from run to run)
    for module in dict.fromkeys(sys.modules.get(type(m).__module__) for m in model.modules()):
        try:
            source = inspect.getsource(module) if module is not None else ""
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            text = line.strip()
            if text.startswith(("self.scaling =", "self.scale =", "self.softmax_scale =", "scaling =")) and \
                    text not in lines:
                lines.append(text)
    return lines[:6]
