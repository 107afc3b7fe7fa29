"""What the audit knows of particular families: one :class:`FamilyEntry` entry per family that needs more than the
general rules, all in one registry, :data:`KNOWN`.

Most of what the audit does is general, keyed by the names transformers uses and the lines its code holds, never
by a family's name: the tiny sizes by standard config field (:mod:`.sizes`), how a model is fed by its forward's
argument names (:mod:`.feed`), where its q and k are by attribute names and code lines (:mod:`.whole_path`,
:mod:`.inline`), the declared factor by lines of code and config fields (:mod:`.declared`, :mod:`.qk_norm`).  A
family has an entry here only for what those rules cannot say of it:

* ``tiny``: the config fields it needs beside the tiny sizes to be consistent (each with why, read from the
  installed source); ``whole_tiny``: those a sub-config takes when the composite is built whole;
* ``cannot_build``: why the audit cannot build it (a composite that would build it as its backbone is built
  without);
* ``declares``: the factor rules (:data:`.declared.FACTOR_RULES`) that hold for it by its name, where no line of
  code says so;
* ``multipliers`` and ``roundings``: the entries of :data:`.qk_norm.MULTIPLIERS` and :data:`.declared.ROUNDINGS`
  its code applies (found at run time by the lines they quote; a test checks each is in the family's source);
* ``far``: its long-context factor (:class:`.position_rules.PositionFamily`), measured at far positions by
  :mod:`.positions`.

A family differs by a value and a key, not by a branch.  Where data cannot say it, a field holds a small function
(a far-position formula, how a learned factor is drawn).  :meth:`Registry.register` adds an entry for a family
this list does not know, as transformers' ``AttentionInterface.register`` adds an attention function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

from .position_rules import (PositionFamily, beam_scalable_softmax, draw_log_position, inkling_log_scaling,
                             learned_log_position, llama4_scaling_beta, llama4_temperature)
from .sizes import TINY


@dataclass(frozen=True)
class FamilyEntry:
    key: str                                  # the model_type (or, for a config class with none, the class name)
    tiny: Mapping = field(default_factory=dict)
    whole_tiny: Mapping[str, Mapping] = field(default_factory=dict)  # sub-config name -> fields when built whole
    cannot_build: str = ""                    # why the audit cannot build it (where a composite would, as its backbone)
    declares: tuple[str, ...] = ()            # rule names (a FACTOR_RULES rule or a modifier's) that hold by name
    multipliers: tuple[str, ...] = ()         # qk_norm.MULTIPLIERS names its code applies
    roundings: tuple[str, ...] = ()           # declared.ROUNDINGS formats its code applies
    far: PositionFamily | None = None


class Registry:
    """The entries by key, in the order they were registered; :meth:`get` gives an empty entry for a family with
    none (nothing beyond the general rules)."""

    def __init__(self, entries=()):
        self._entries: dict[str, FamilyEntry] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: FamilyEntry) -> FamilyEntry:
        if not isinstance(entry, FamilyEntry):
            raise ValueError(f"a registry entry must be a FamilyEntry, got {type(entry).__name__}")
        if entry.key in self._entries:
            raise ValueError(f"family {entry.key!r} already has an entry; one entry a family")
        if entry.far is not None and entry.far.family != entry.key:
            raise ValueError(f"family {entry.key!r}: its far-position entry is for {entry.far.family!r}")
        self._entries[entry.key] = entry
        return entry

    def get(self, key: str) -> FamilyEntry:
        return self._entries.get(key) or FamilyEntry(key)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[FamilyEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def far_families(self) -> tuple[PositionFamily, ...]:
        """The long-context entries, in registry order."""
        return tuple(entry.far for entry in self if entry.far is not None)


# Chameleon's and Emu3's VQ-VAE image tokenizers: 2 resolutions of 32 and 64 channels, a 64-code codebook
CHAMELEON_VQ = {"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "embed_dim": 16,
                "latent_channels": 16, "num_embeddings": 64, "resolution": 32}
EMU3_VQ = {"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "attn_resolutions": [1],
           "codebook_size": 64, "hidden_size": 64, "num_attention_heads": 4}
# far-position sizes: small models beside the config's own defaults (the factor's fields keep theirs)
_MOE = dict(n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1, moe_intermediate_size=32)
_MLA = dict(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)
_SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64)
_INKLING = dict(**_SMALL, **_MOE, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=16, sliding_window_size=8,
                rel_extent=8, d_rel=4, layer_types=["hybrid", "hybrid_sliding"])  # a full layer, then a sliding one

# the speech encoder, text-to-unit model and vocoder of SeamlessM4T (v1 and v2) under sizes of their own
SEAMLESS = {"speech_encoder_layers": 1, "speech_encoder_attention_heads": 4, "speech_encoder_intermediate_size": 128,
            "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4, "conv_depthwise_kernel_size": 7,
            "t2u_encoder_layers": 1, "t2u_encoder_ffn_dim": 128, "t2u_encoder_attention_heads": 4, "t2u_decoder_layers": 1,
            "t2u_decoder_ffn_dim": 128, "t2u_decoder_attention_heads": 4, "t2u_vocab_size": 128,
            "upsample_initial_channel": 32, "unit_hifi_gan_vocab_size": 128, "unit_embed_dim": 64, "lang_embed_dim": 16,
            "spkr_embed_dim": 16}
# the video trackers' memory at width 128 (see their entries), and their image as SAM 2's (64 x 64)
SAM_VIDEO = {"image_size": 64, "memory_attention_hidden_size": 128, "memory_attention_num_layers": 2,
             "memory_attention_rope_feat_sizes": [4, 4], "memory_encoder_hidden_size": 128,
             "mask_downsampler_embed_dim": 128, "memory_fuser_embed_dim": 128, "memory_fuser_intermediate_dim": 256}
# built whole, the vision tower (shared with SAM 2's image model, measured at width 64) widened to the memory's
SAM_VIDEO_WHOLE = {"vision_config": {"fpn_hidden_size": 128}}

def scaling_beta(family: str, config_class: str, sizes: dict) -> PositionFamily:
    """Ministral 3's and Mistral 4's llama_4_scaling_beta on the queries: the same line in both modeling files."""
    return PositionFamily(family, config_class, sizes, "position_ids", llama4_scaling_beta,
                          "1 + beta ln(1 + floor(p / original_max_position_embeddings))", "every layer",
                          f"{family}/modeling_{family}.py",
                          "scaling = 1 + beta * torch.log(1 + torch.floor(positions_ids / max_position_embeddings))")


T5_DECLARES = ("T5_NO_SCALING",)  # T5Attention "does not scale the query/key dot product" (a comment, not code)

KNOWN = Registry([
    FamilyEntry("gpt_neo", tiny={"attention_types": [[["global", "local"], 1]]}),
    # every 4th layer has no RoPE (and the temperature)
    FamilyEntry("llama4_text", tiny={"num_hidden_layers": 4},
           far=PositionFamily(
            "llama4_text", "Llama4TextConfig",
            dict(**_SMALL, intermediate_size_mlp=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=16, num_local_experts=2, num_experts_per_tok=1, no_rope_layers=[1, 0], attention_chunk_size=None),
            "cache", llama4_temperature, "1 + attn_scale ln(1 + floor((p + 1) / floor_scale))", "layers without RoPE",
            "llama4/modeling_llama4.py",
            "torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale)) * self.attn_scale + 1.0")),
    FamilyEntry("bamba", tiny={"attn_layer_indices": [1]}),  # no attention layer by default
    # its rotary's mscale, short or long by the batch's largest position id, in place of the RoPE type's factor
    FamilyEntry("phimoe", declares=("BATCH_MSCALE",)),
    # the last num_kv_shared_layers reuse the keys and values of an earlier layer of their type
    FamilyEntry("gemma3n_text", tiny={"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                                 "layer_types": ["sliding_attention", "full_attention"] * 2}),
    FamilyEntry("zamba2", tiny={"layers_block_type": ["linear_attention", "hybrid"]}),
    FamilyEntry("esm", tiny={"pad_token_id": 1}),  # its attention mask is input_ids != pad_token_id (None by default)
    FamilyEntry("xmod", tiny={"default_language": "en_XX"}),  # its adapters need a language; en_XX is its default list's
    # its adapter takes the pixel-shuffled patches (hidden / ratio^2 = 4 x hidden wide) as intermediate_size
    FamilyEntry("llama4_vision_model", tiny={"intermediate_size": 256, "projector_input_dim": 64, "projector_output_dim": 64,
                                        "vision_output_dim": 64}),
    # its widths under names of its own (embed_dim, depth, num_heads; hidden_size is the merger's output)
    FamilyEntry("qwen2_vl_vision", tiny={"embed_dim": 64, "depth": 2, "num_heads": 4, "hidden_size": 64}),
    # the layers whose states it also returns (3, 7, 15, 23, 30 by default) inside the tiny depth
    FamilyEntry("mllama_vision_model", tiny={"intermediate_layers_indices": [0, 1], "num_global_layers": 1,
                                        "vision_output_dim": 192}),
    # forecasters: a short history and horizon (the Time Series Transformers need a horizon stated)
    *(FamilyEntry(family, tiny={"prediction_length": 8, "context_length": 16})
      for family in ("time_series_transformer", "informer", "autoformer", "patchtst")),
    # PatchTSMixer attends only when asked to (self_attn): its attention is what there is to audit
    FamilyEntry("patchtsmixer", tiny={"self_attn": True, "self_attn_heads": 4, "d_model": 64, "context_length": 32,
                                 "prediction_length": 8}),
    *(FamilyEntry(family, tiny={"patch_length": 8, "context_length": 32, "horizon_length": 8})
      for family in ("timesfm", "timesfm2_5")),
    FamilyEntry("decision_transformer", tiny={"state_dim": 4, "act_dim": 2, "max_ep_len": 64}),
    # their decoder's queries are the top proposals of the encoder's 4 x 4 feature map (900 by default)
    *(FamilyEntry(family, tiny={"num_queries": 8}) for family in ("grounding-dino", "mm-grounding-dino")),
    # its prompt image stacked above its image: the model's height is twice the image's
    FamilyEntry("seggpt", tiny={"image_size": [64, 32]}),
    # its image size is typed a list (height, width), None by default
    FamilyEntry("molmo2_vision", tiny={"image_size": [32, 32]}),
    # their acoustic encoders double the channels at each of 5 downsamplings (48 -> 1536: 34M parameters);
    # the quantizer projects quantization_dim (2048) = twice the hidden width (the semantic and acoustic
    # features side by side); RoPE runs over the heads (position_ids of shape (1, heads)), so k has them all
    *(FamilyEntry(family, tiny={"encoder_hidden_size": 8, "quantization_dim": 128, "num_key_value_heads": 4})
      for family in ("xcodec2", "neucodec")),
    # Fun-ASR-Nano's adaptor (a config class with no model type): its FFN a quarter of the text width
    FamilyEntry("FunAsrNanoAdaptorConfig", tiny={"intermediate_size": 16, "projector_hidden_size": 64}),
    # a token's layout embedding: 4 coordinates and 2 sizes side by side, hidden_size wide
    FamilyEntry("layoutlmv3", tiny={"coordinate_size": 12, "shape_size": 8}),
    FamilyEntry("rf_detr", tiny={"num_queries": 8}),
    # validators: kv heads = heads and no RoPE part in GLM-5-Next's MLA; 2 layers hold an attention
    # layer (its indexer shrunk too: its CPU path dominates a pass)
    FamilyEntry("glm5_next_text", tiny={"num_key_value_heads": 4, "qk_rope_head_dim": 0, "qk_nope_head_dim": 16,
                                   "layer_types": ["linear_attention", "indexed_attention"], "index_n_heads": 4,
                                   "index_head_dim": 16}),
    FamilyEntry("dots3_note_vision_encoder", tiny={"mlp_layer_types": ["dense", "sparse"]}),  # per-layer keys past 2 layers
    FamilyEntry("mamba2", tiny={"num_heads": 8}),  # heads x head_dim = expand x hidden (2 x 64)
    # its image and audio token ranges inside the tiny vocabulary
    FamilyEntry("apertus1p5", tiny={"image_token_offset": 16, "audio_token_offset": 80,
                               "audio_config": {"model_type": "wavtokenizer_encoder", "codebook_size": 32}}),
    # BLT: its byte n-gram hash embeddings (6 tables of 500,002 rows: 192M parameters at the tiny width) at
    # 64 rows; no cache (its forward builds one from BltConfig, which has no num_hidden_layers:
    # modeling_blt.py:1190); the local encoder's and decoder's view of the global transformer's width tiny
    FamilyEntry("blt", tiny={"encoder_hash_byte_group_vocab": 64, "use_cache": False}),
    *(FamilyEntry(family, tiny={"hidden_size_global": TINY["hidden_size"]})
      for family in ("blt_local_encoder", "blt_local_decoder")),
    # its VQGAN encoder shrunk as Chameleon's is (184M parameters at its defaults): 2 stages of one block
    # (the second, at resolution 16, carries attention as attn_resolutions (16,) says) and the middle block,
    # which attends in every encoder
    FamilyEntry("apertus1p5_vision_tokenizer", tiny={"codebook_size": 64, "base_channels": 32, "channel_multiplier": [1, 2],
                                                "num_res_blocks": 1, "embed_dim": 16, "latent_channels": 16,
                                                "resolution": 32}),
    # its projector's learned queries per image, by the image's patches (1225 and 4900 by default): the
    # 32 x 32 image's 16 patches read by 4 queries
    FamilyEntry("aria", tiny={"projector_patch_to_query_dict": {16: 4}}),
    # hidden = the last stage's width; its RoPE fits 8 heads; its attention runs on the 1/8-scale
    # features pooled again by 4 (one token of a 32 x 32 image): pooled by 2, it sees 2 x 2
    FamilyEntry("efficientloftr", tiny={"out_features": [16, 16, 32, 64], "stage_num_blocks": [1, 1, 1, 1],
                                   "num_attention_heads": 8, "num_attention_layers": 2,
                                   "q_aggregation_kernel_size": 2, "kv_aggregation_kernel_size": 2,
                                   "q_aggregation_stride": 2, "kv_aggregation_stride": 2}),
    FamilyEntry("kolibri1_1", tiny={"index_num_heads": 2, "layer_types": ["sliding_attention", "indexed_attention"],
                               "mlp_only_intermediate_size": 128},
           roundings=("NVFP4",)),  # its sparse layers attend to NVFP4-rounded keys
    FamilyEntry("muse_spark_audio", tiny={"patch_sizes": [16, 6], "hidden_sizes": [32, 64], "depths": [1, 1]}),  # 2 stages
    # expert widths a list per modality; multimodal RoPE sections of the tiny head (8 = 3 + 3 + 2)
    FamilyEntry("ernie4_5_vl_moe_text", tiny={"moe_intermediate_size": [32, 32],
                                         "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                                                             "mrope_section": [3, 3, 2]}}),
    FamilyEntry("hunyuan_vl_text", tiny={"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                        "mrope_section": [2, 2, 2, 2]}}),
    # its 8 input and 8 output layers inside the depth (2 recurrent layers between)
    FamilyEntry("dory", tiny={"num_hidden_layers": 4, "n_input_layers": 1, "n_output_layers": 1},
           multipliers=("(sqk x sqk_scale)^2",)),  # its nGPT queries: normalised, then scaled by learned values
    # hybrids whose default pattern puts no attention layer within 2 layers
    *(FamilyEntry(family, tiny={"layer_types": ["linear_attention", "full_attention"]})
      for family in ("bailing_hybrid", "kimi_linear", "granitemoehybrid")),
    FamilyEntry("qwen4_exp_text", tiny={"layer_types": ["linear_attention", "indexed_attention"], "indexer_n_heads": 4,
                                   "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8,
                                   "indexer_compress_ratio": 4}),
    FamilyEntry("swin2sr", tiny={"patch_size": 1, "image_size": 16}),  # its patch embedding keeps every pixel
    # MobileViT unfolds each stage into patch_size x patch_size patches (2 by default); on a 128 x 128
    # image every stage keeps more than one patch, so each attention row has keys to compare
    FamilyEntry("mobilevit", tiny={"patch_size": 2, "image_size": 128}),
    # a token's layout embedding: six embeddings of hidden / 6, its layout stream hidden / channel_shrink_ratio wide
    FamilyEntry("lilt", tiny={"hidden_size": 96, "intermediate_size": 192}),
    # DbrxAttention reads attn_config.rope_theta, a field DbrxAttentionConfig lacks (unused: the rotary
    # embedding reads rope_parameters), and clamps q, k, v by clip_qkv, which fails at its default None
    FamilyEntry("dbrx", tiny={"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0}}),
    # the image-token map the model reads at build (None by default), and the VQ-VAE image tokenizer
    # it always builds, shrunk (its defaults alone are 29M parameters); the tokenizer's own row alike
    FamilyEntry("chameleon", tiny={"vocabulary_map": {"<image>": 127}, "vq_config": CHAMELEON_VQ}),
    FamilyEntry("chameleon_vqgan", tiny=CHAMELEON_VQ),
    FamilyEntry("emu3", tiny={"vocabulary_map": {"<image>": 127}, "vq_config": EMU3_VQ}),
    FamilyEntry("emu3_vqgan", tiny=EMU3_VQ),
    # AutoModel maps funnel to two classes and picks by config.architectures, which is None by default
    FamilyEntry("funnel", tiny={"architectures": ["FunnelModel"], "d_head": 16}),
    # layer_types is None by default and the model indexes it (no default pattern)
    FamilyEntry("lfm2_moe", tiny={"layer_types": ["conv", "full_attention"], "num_dense_layers": 1}),
    # mlp_layer_types is None by default and the decoder layers index it
    FamilyEntry("deepseek_ocr2_text", tiny={"mlp_layer_types": ["dense", "sparse"]}),
    # per-layer-type rope_parameters: the default config leaves them empty
    FamilyEntry("cohere_compass_text", tiny={"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                                                               "mrope_section": [3, 3, 2]}}}),
    # set only by T5Gemma2Config for its encoder's text config; the encoder alone needs it stated
    FamilyEntry("t5gemma2_text", tiny={"dropout_rate": 0.0}),
    # axial position embeddings: their widths sum to hidden_size, their shape covers the positions
    FamilyEntry("reformer", tiny={"attention_head_size": 16, "attn_layers": ["local", "lsh"], "axial_pos_embds_dim": [16, 48],
                             "axial_pos_shape": [8, 8], "max_position_embeddings": 64, "feed_forward_size": 128,
                             "local_attn_chunk_length": 8, "lsh_attn_chunk_length": 8}),
    # SeamlessM4T (v1, v2): its speech encoder, text-to-unit model and vocoder at the sizes of SEAMLESS
    FamilyEntry("seamless_m4t", tiny=SEAMLESS),
    FamilyEntry("seamless_m4t_v2", tiny={**SEAMLESS, "char_vocab_size": 128, "t2u_variance_predictor_embed_dim": 64,
                                    "t2u_variance_predictor_hidden_dim": 64}),  # its duration predictor's widths
    # its sequence compressor (perceiver resampler) at 4 heads of 16 over 8 latents, 2 deep (64 latents,
    # 8 heads of 64 and 6 layers by default); its aligner's 4 heads of 16 scale by heads**-0.5 = 0.5, not 0.25
    FamilyEntry("evolla", tiny={"resampler_depth": 2, "resampler_dim_head": 16, "resampler_heads": 4,
                           "resampler_num_latents": 8}),
    # local blocks of 4 tokens (512 by default) beside 4 global tokens (32): the 8-token probe spans 2 blocks
    FamilyEntry("pegasus_x", tiny={"block_size": 4, "num_global_tokens": 4}),
    # the Vocos backbone's own widths
    FamilyEntry("wavtokenizer", tiny={"decoder_hidden_size": 64, "decoder_intermediate_size": 128, "decoder_num_layers": 2,
                                 "decoder_attention_num_groups": 8, "codebook_size": 128, "codebook_dim": 64}),
    FamilyEntry("perceiver", tiny={"num_latents": 16, "d_latents": 64, "d_model": 64, "num_self_attends_per_block": 2,
                              "num_self_attention_heads": 4, "num_cross_attention_heads": 4, "max_position_embeddings": 64}),
    # a CNN text detector: its intra-class blocks' convolutions (None by default), to say it has no attention
    FamilyEntry("pp_ocrv6_medium_det", tiny={
                    "intraclass_block_config": {
                        "reduce_channel": [1, 1, 0], "return_channel": [1, 1, 0],
                        "vertical_long_to_small_conv_longratio": [[7, 1], 1, [3, 0]],
                        "vertical_long_to_small_conv_midratio": [[5, 1], 1, [2, 0]],
                        "vertical_long_to_small_conv_shortratio": [[3, 1], 1, [1, 0]],
                        "horizontal_small_to_long_conv_longratio": [[1, 7], 1, [0, 3]],
                        "horizontal_small_to_long_conv_midratio": [[1, 5], 1, [0, 2]],
                        "horizontal_small_to_long_conv_shortratio": [[1, 3], 1, [0, 1]],
                        "symmetric_conv_long_longratio": [7, 1, 3], "symmetric_conv_long_midratio": [5, 1, 2],
                        "symmetric_conv_long_shortratio": [3, 1, 1]},
                    "kernel_list": [3, 2, 2], "scale_factor_list": [8, 4, 2, 1]}),
    # SAM (and SAM-HQ): the neck's output and the shared positional embedding (2 x num_pos_feats) at the
    # mask decoder's width; a global layer inside the tiny depth and 2 x 2 windows on the 4 x 4 patches
    *(FamilyEntry(family, tiny={"output_channels": 64, "num_pos_feats": 32, "global_attn_indexes": [1], "window_size": 2})
      for family in ("sam_vision_model", "sam_hq_vision_model")),
    *(FamilyEntry(family, tiny={"mlp_dim": 128, "iou_head_hidden_dim": 64})
      for family in ("sam_mask_decoder", "sam2_mask_decoder", "sam3_tracker_mask_decoder")),
    # the HQ decoder also reads the ViT's early features: vit_dim is the vision tower's width
    FamilyEntry("sam_hq_mask_decoder", tiny={"mlp_dim": 128, "iou_head_hidden_dim": 64, "vit_dim": 64}),
    # Hiera: its stem is its first stage's width; 4 stages of 1, 1, 2, 1 blocks (heads 1, 2, 4, 8 of 16
    # dims) on a 64 x 64 image (stride 4, then 2 a stage: 16, 8, 4, 2 a side), windows 4, 4, 2, 2; a
    # stage's first block pools its queries (its window halves), so the global block is the third
    # stage's second, as 5, 7, 9 are by default
    FamilyEntry("sam2_hiera_det_model", tiny={"hidden_size": 16, "image_size": [64, 64], "blocks_per_stage": [1, 1, 2, 1],
                                         "embed_dim_per_stage": [16, 32, 64, 128],
                                         "num_attention_heads_per_stage": [1, 2, 4, 8],
                                         "window_size_per_stage": [4, 4, 2, 2], "global_attention_blocks": [3],
                                         "window_positional_embedding_background_size": [4, 4]}),
    # its FPN reads the Hiera stages (widths last to first) into the mask decoder's width, strides 4, 8, 16
    FamilyEntry("sam2_vision_model", tiny={"backbone_channel_list": [128, 64, 32, 16], "fpn_hidden_size": 64,
                                      "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]}),
    # the image embedding (image_size / patch_size a side) is the last FPN level: 64 / 16 = 4
    FamilyEntry("sam2_prompt_encoder", tiny={"image_size": 64, "patch_size": 16}),
    # SAM 2's video tracker (and SAM 3's, EdgeTAM's): the image and its 4 x 4 embedding as SAM 2's; the
    # memory attention's cross-attention reads 64-wide memories whatever the config says (kv_in_dim=64,
    # modeling_sam2_video.py:946) and the object pointers are cut into hidden / 64 of them (line 433: at
    # hidden 64 the uncut pointer keeps an axis too many), so every width is 128 (whole_tiny: the FPN's too)
    # (SAM 3's: its ViT's 32 x 32 image in 8 x 8 patches, which its image_size setter passes on)
    FamilyEntry("sam2_video", tiny={**SAM_VIDEO, "memory_attention_feed_forward_hidden_size": 128},
           whole_tiny=SAM_VIDEO_WHOLE),
    FamilyEntry("sam3_tracker_video", tiny={**SAM_VIDEO, "image_size": 32, "memory_attention_feed_forward_hidden_size": 128},
           whole_tiny=SAM_VIDEO_WHOLE),
    # EdgeTAM's memory attention has an MLP and a perceiver resampler of its own, and RoPE of its keys' own sizes
    FamilyEntry("edgetam_video", tiny={**SAM_VIDEO, "memory_attention_mlp_hidden_size": 128,
                                  "perceiver_resampler_num_latents": 8, "perceiver_resampler_num_latents_2d": 4,
                                  "memory_attention_rope_k_sizes": [2, 2], "perceiver_resampler_mlp_intermediate_size": 128},
           whole_tiny=SAM_VIDEO_WHOLE),
    *(FamilyEntry(f"{family}_prompt_encoder", tiny={"hidden_size": 128, "image_size": 64, "patch_size": 16})
      for family in ("sam2_video", "edgetam_video")),
    FamilyEntry("sam3_tracker_video_prompt_encoder", tiny={"hidden_size": 128}),
    *(FamilyEntry(f"{family}_mask_decoder", tiny={"hidden_size": 128, "mlp_dim": 128, "iou_head_hidden_dim": 64})
      for family in ("sam2_video", "sam3_tracker_video", "edgetam_video")),
    # SAM 3's ViT: a global layer inside the tiny depth, 2 x 2 windows; its position table at the tiny
    # image (336 / 8 patches a side by default, tiled)
    FamilyEntry("sam3_vit_model", tiny={"window_size": 2, "global_attn_indexes": [1], "pretrain_image_size": 32}),
    # its FPN (scales 4, 2, 1, 0.5 of the 4 x 4 patches) at the decoders' width; the tracker reads three
    FamilyEntry("sam3_vision_model", tiny={"fpn_hidden_size": 64, "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]}),
    *(FamilyEntry(family, tiny={"num_queries": 8}) for family in ("sam3_detr_decoder", "sam3_lite_text_detr_decoder")),
    # its first and last text layers are RepMixer convolutions: 3 layers leave one attention layer
    FamilyEntry("sam3_lite_text_text_model", tiny={"num_hidden_layers": 3}),
    # HTS-AT: the last stage's frequency rows (spec_size / 32) must be at least spec_size / num_mel_bins
    # (modeling_clap.py:887: c_freq_bin = n_frequencies // freq_ratio, 0 at 16 mels of 256)
    FamilyEntry("clap_audio_model", tiny={"num_mel_bins": 64, "spec_size": 64}),
    # its k and v projections have num_attention_heads heads, whatever num_key_value_heads says
    # (modeling_granite_speech5.py:110-112, repeated by num_key_value_groups in eager_attention_forward)
    FamilyEntry("granite_speech5_encoder", tiny={"num_key_value_heads": 4}),
    # its conformer attends within blocks of context_size frames (200 by default), the last block padded
    # and its padded rows dropped (modeling_granite_speech.py:174-209): one block of the 32 frames fed
    *(FamilyEntry(family, tiny={"context_size": 32})
      for family in ("granite_speech_encoder", "granite_speech_plus_encoder")),
    # the width of its backbone's first-stage map (HGNetV2's 128, divided as cnn_kwargs divides it)
    FamilyEntry("pp_doclayout_v3", tiny={"x4_feat_dim": 128 // 8}),
    # its blocks unfold the image / 8, / 16, / 32 maps into patch_size patches (2 by default)
    FamilyEntry("mobilevitv2", tiny={"patch_size": 2, "image_size": 64}),
    # its rotary embedding is head_dim wide (modeling_longcat_flash.py:96), applied to the qk_rope_head_dim
    # part of q and k (64 = 64 by default): head_dim is the tiny qk_rope_head_dim
    FamilyEntry("longcat_flash", tiny={"head_dim": TINY["qk_rope_head_dim"]}),
    # LW-DETR's ViT: the stages it returns (2, 4, 5, 9 of 10 by default) inside the tiny depth, a windowed
    # first layer, 2 x 2 windows (image_size / num_windows divisible by their side: 32 / 4 % 2); one
    # projector level (none by default: nothing to concatenate) and 8 queries (300 x 13 groups)
    FamilyEntry("lw_detr_vit", tiny={"out_indices": [1, 2], "window_block_indices": [0], "num_windows": 4}),
    FamilyEntry("lw_detr", tiny={"projector_scale_factors": [1.0], "num_queries": 8}),
    # the vocoder reads the spectrogram model's mel channels (80 each by default)
    FamilyEntry("fastspeech2_conformer_hifigan", tiny={"model_in_dim": TINY["num_mel_bins"], "upsample_initial_channel": 32}),
    # VideoPrism's own depths and its 288 x 288 frames in 18 x 18 tubelets (its factor is the same at any
    # size; 12 + 4 layers at 288 px took 15 s a run): 2 + 2 layers, 32 x 32 frames in 8 x 8 tubelets
    FamilyEntry("videoprism_vision_model", tiny={"image_size": 32, "tubelet_size": [1, 8, 8], "num_spatial_layers": 2,
                                            "num_temporal_layers": 2, "num_auxiliary_layers": 1}),
    # its HF Swin backbone's stages (2, 3, 4: 32, 64, 128 wide at the tiny sizes) into the encoder; the
    # text tower's width into the class and task embeddings; a 128 x 128 image (640 by default) and 8
    # queries. The layer norms after the backbone expect timm's channels-last maps (Swin's are
    # channels-first): off, outside the attention
    FamilyEntry("omdet-turbo", tiny={"encoder_in_channels": [32, 64, 128], "text_projection_in_dim": 64,
                                "text_projection_out_dim": 64, "class_embed_dim": 64, "task_encoder_hidden_dim": 128,
                                "image_size": 128, "num_queries": 8, "apply_layernorm_after_vision_backbone": False}),
    # LeViT's stem is 4 stride-2 convolutions (16 a side, as patch_size says by default; its position
    # biases are sized by image_size / patch_size); 128 x 128 leaves 8, 4 and 2 patches a side to its
    # 3 stages (at 32 its last stage has one key)
    FamilyEntry("levit", tiny={"patch_size": 16, "image_size": 128}),
    # Hiera's stem: a 7 x 7 convolution at stride 4, padding 3 (the tiny patch 8 leaves a token count its
    # mask units do not tile); its first two stages attend within mask units (their tokens interleaved) and
    # each stage's first block pools its queries: the third stage's second block is a plain global one
    FamilyEntry("hiera", tiny={"patch_size": [7, 7], "depths": [1, 1, 2, 1]}),
    # the visual prompt is added to frames max_img_size a side (448 by default): the detector-sized
    # image (feed.BACKBONE_IMAGE), with a band narrower than half of it (96 by default)
    FamilyEntry("tvp", tiny={"max_img_size": 128, "visual_prompt_size": 16}),
    # Step 3.7's text model builds its sliding-window mask on every pass (modeling_step3p7.py:897),
    # sliding layers or not: the window must be set (None by default); 8 covers the 8-token probe
    FamilyEntry("step3p5", tiny={"sliding_window": 8}),
    # its full-attention layers' head (a constructor argument, 512 by default: not a field) at the tiny head
    FamilyEntry("diffusion_gemma_text", tiny={"global_head_dim": 16}),
    # its eager attention repeats no key/value heads (modeling_unlimited_ocr.py:635): as many as query heads
    FamilyEntry("unlimited_ocr_text", tiny={"num_key_value_heads": 4}),
    # DeepSeek-OCR-style SAM encoders feeding a second encoder: 2 x 2 patches of the 32 x 32 image (16 a
    # side), 4 x 4 windows and one global layer; the neck's two stride-2 convolutions end at the second
    # encoder's width (64) on a 4 x 4 map
    *(FamilyEntry(family, tiny={"patch_size": 2, "window_size": 4, "global_attn_indexes": [1], "output_channels": 16,
                           "downsample_channels": [32, 64], "mlp_dim": 128})
      for family in ("unlimited_ocr_sam_vision_model", "deepseek_ocr2_sam_vision_model")),
    # its conformer's convolution widths (its hidden size by default: the model, not the config, requires
    # them equal) and its depth under a name of its own
    FamilyEntry("phi4_multimodal_audio", tiny={"ext_pw_out_channel": 64, "depthwise_separable_out_channel": 64,
                                          "nemo_conv_channels": 64, "num_blocks": 2}),
    # Janus's VQ-VAE image tokenizer shrunk as Chameleon's is (its defaults alone are 72M parameters at the
    # tiny sizes); its projections into the text width; its token grid (32 x 32 image, one halving)
    FamilyEntry("janus_vqgan", tiny={"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "embed_dim": 8,
                                "latent_channels": 16, "num_embeddings": 64, "projection_dim": 64,
                                "image_token_embed_dim": 64, "num_patches": 16}),
    # MiniCPM-V 4.6/4.7 and MiniCPM-OCR: the window-attention merger (vit_merger) runs after encoder layer
    # insert_layer_id (6 by default, past the tiny depth: never run); after the first layer, its 2 x 2
    # windows tile the 4 x 4 patches. The composites copy theirs onto the vision config
    *(FamilyEntry(family, tiny={"insert_layer_id": 0})
      for family in ("minicpm_ocr_vision", "minicpmv4_6_vision", "minicpmv4_7_vision",
                     "minicpm_ocr", "minicpmv4_6", "minicpmv4_7")),
    # its rotary embedding turns max(projection_dim / (2 x heads), 32) dims of each head (modeling_clvp.py:255):
    # heads of 64 with 32 turned, as the default's (768 / 12 heads, 768 / 24 = 32 turned)
    FamilyEntry("clvp_encoder", tiny={"hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 256,
                                 "projection_dim": 128}),
    FamilyEntry("ministral3", far=scaling_beta("ministral3", "Ministral3Config", dict(
        **_SMALL, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16))),
    FamilyEntry("mistral4", far=scaling_beta("mistral4", "Mistral4Config", dict(
        **_SMALL, **_MOE, **_MLA, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
        first_k_dense_replace=1))),
    FamilyEntry("mistral_large4_text", far=PositionFamily(
            "mistral_large4_text", "MistralLarge4TextConfig",
            dict(**_SMALL, **_MOE, **_MLA, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 first_k_dense_replace=2, index_topk=4, index_head_dim=16, index_n_heads=2, no_rope_layers=[1, 0]),
            "position_ids", learned_log_position, "s_h ln(p + 1) + b_h, learned per head", "every layer",
            "mistral_large4/modeling_mistral_large4.py", "log_pos = (position_ids + 1).float().log()",
            learned="s_h and b_h drawn from N(0, 0.05^2) and 1 + N(0, 0.1^2) (the random init leaves the factor near 1)",
            draw_learned=draw_log_position)),
    FamilyEntry("beam", far=PositionFamily(
            "beam", "BeamConfig",
            dict(**_SMALL, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=16, num_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, sliding_window=8),
            "position_ids", beam_scalable_softmax, "(1 + (p + 1) / 2048)^0.1", "full-attention layers (no RoPE)",
            "beam/modeling_beam.py", "torch.exp(0.1 * torch.log1p((position_ids.float() + 1) / 2048))")),
    FamilyEntry("inkling_text", far=PositionFamily(
            "inkling_text", "InklingTextConfig",
            _INKLING,
            "cache", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))", "full (not sliding) layers",
            "inkling/modeling_inkling.py", "(effective_n / self.config.log_scaling_n_floor).clamp(min=1.0)",
            enable={"log_scaling_n_floor": 8192})),
    FamilyEntry("inkling2_text", far=PositionFamily(
            "inkling2_text", "Inkling2TextConfig",
            _INKLING,
            "position_ids", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))",
            "full (not sliding) layers", "inkling2/modeling_inkling2.py",
            "((position_ids + 1).float() / self.log_scaling_n_floor).clamp(min=1.0)")),
    # its looped layers (6 to 18 by default) inside the tiny depth, run twice, one block a layer: the
    # second pass's message attention reads the first's two last block states (a key per block)
    FamilyEntry("inkling2_loop_text", tiny={"num_hidden_layers": 4, "n_layers_per_attn_res_block": 1,
                                       "loop_layer_index_start": 1, "loop_layer_index_end": 3, "loop_num_passes": 2},
           far=PositionFamily(
            "inkling2_loop_text", "Inkling2LoopTextConfig",
            _INKLING,
            "position_ids", inkling_log_scaling, "1 + alpha ln(max((p + 1) / log_scaling_n_floor, 1))",
            "full (not sliding) layers", "inkling2_loop/modeling_inkling2_loop.py",
            "((position_ids + 1).float() / self.log_scaling_n_floor).clamp(min=1.0)")),
    # AutoBackbone's wrappers of timm models
    *(FamilyEntry(family, cannot_build="needs the timm package, which the audit does without")
      for family in ("timm_backbone", "timm_wrapper")),
    # T5 and the families built on its attention: the factor is folded into W_q's initialisation, none applied
    *(FamilyEntry(family, declares=T5_DECLARES)
      for family in ("t5", "mt5", "umt5", "longt5", "switch_transformers", "udop", "pop2piano")),
    # their code multiplies the normalised queries by a config field
    *(FamilyEntry(family, multipliers=("qk_scale_factor",)) for family in ("muse_spark", "muse_glimmer")),
])
