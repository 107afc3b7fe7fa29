"""The tiny sizes the audit builds every family at, and what some families need beyond them.

:data:`TINY` holds the sizes by standard config field name; :data:`FAMILY_TINY` the fields a
family's (or a tower's) config needs beside them to be consistent, each with why (read from the
installed transformers source); :data:`FALLBACKS` what is tried when a validator refuses;
:data:`TINY_HYBRID` the recurrent layers of hybrid models; :data:`VISION_TINY` an image.
:mod:`.families` builds the configs from them.
"""

# The tiny sizes, by standard config field name (a config's attribute_map translates them,
# e.g. hidden_size -> n_embd).  Head dim 16 with 4 query and 2 key/value heads.
TINY = {
    "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "intermediate_size": 128,
    "encoder_layers": 1, "decoder_layers": 1, "num_layers": 2, "num_decoder_layers": 1,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
    "d_ff": 128, "d_kv": 16, "ffn_dim": 128, "n_inner": 128, "ffn_hidden_size": 128,
    "num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4, "moe_num_experts": 4, "num_experts_per_tok": 2,
    "top_k_experts": 2,  # Gemma 4's name for experts per token (None by default in DiffusionGemma's text config)
    "moe_top_k": 2, "moe_intermediate_size": 32, "n_shared_experts": 1, "kv_n_heads": 2,
    "n_group": 1, "topk_group": 1,  # DeepSeek-V3-style routers: groups of the (4) experts
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "layer_types": None, "vocab_size_per_layer_input": 128, "entity_vocab_size": 16, "pronunciation_vocab_size": 16,
    "shape_vocab_size": 16, "block_size": 8, "rotary_dim": 8,
    # Llama 4's attention temperature starts at position floor_scale (8192 by default); at 4
    # it shows within a 16-token probe.  A size, like the others: the formula is unchanged.
    "floor_scale": 4,
    # audio encoders: 16 mel channels over 32 frames (Whisper's encoder sees 2 x max_source_positions)
    "num_mel_bins": 16, "max_source_positions": 16,
    # video encoders: clips of 4 frames (2 tubelets of 2), also their position tables; V-JEPA 2's 32 x 32 crop
    "num_frames": 4, "frames_per_clip": 4, "crop_size": 32,
    # vision towers' projections into their text model's width (GLM-4V's merger, Inkling's projector)
    "out_hidden_size": 64, "projection_intermediate_size": 128, "projection_hidden_dim": 64, "text_hidden_size": 64,
    "adapter_out_dim": 64,  # Dots3 Note's vision and audio adapters (their output must be the text width)
}
# Chameleon's and Emu3's VQ-VAE image tokenizers: 2 resolutions of 32 and 64 channels, a 64-code codebook
CHAMELEON_VQ = {"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "embed_dim": 16,
                "latent_channels": 16, "num_embeddings": 64, "resolution": 32}
EMU3_VQ = {"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "attn_resolutions": [1],
           "codebook_size": 64, "hidden_size": 64, "num_attention_heads": 4}
# Families whose config needs more than the tiny sizes to be consistent.
FAMILY_TINY = {"gpt_neo": {"attention_types": [[["global", "local"], 1]]},
               "llama4_text": {"num_hidden_layers": 4},  # every 4th layer has no RoPE (and the temperature)
               "bamba": {"attn_layer_indices": [1]},  # no attention layer by default
               # the last num_kv_shared_layers reuse the keys and values of an earlier layer of their type
               "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2,
                                "layer_types": ["sliding_attention", "full_attention"] * 2},
               "zamba2": {"layers_block_type": ["linear_attention", "hybrid"]},
               "esm": {"pad_token_id": 1},  # its attention mask is input_ids != pad_token_id (None by default)
               "xmod": {"default_language": "en_XX"},  # its adapters need a language; en_XX is its default list's
               # its adapter takes the pixel-shuffled patches (hidden / ratio^2 = 4 x hidden wide) as intermediate_size
               "llama4_vision_model": {"intermediate_size": 256, "projector_input_dim": 64, "projector_output_dim": 64,
                                       "vision_output_dim": 64},
               # its widths under names of its own (embed_dim, depth, num_heads; hidden_size is the merger's output)
               "qwen2_vl_vision": {"embed_dim": 64, "depth": 2, "num_heads": 4, "hidden_size": 64},
               # the layers whose states it also returns (3, 7, 15, 23, 30 by default) inside the tiny depth
               "mllama_vision_model": {"intermediate_layers_indices": [0, 1], "num_global_layers": 1,
                                       "vision_output_dim": 192},
               # forecasters: a short history and horizon (the Time Series Transformers need a horizon stated)
               **{family: {"prediction_length": 8, "context_length": 16}
                  for family in ("time_series_transformer", "informer", "autoformer", "patchtst")},
               # PatchTSMixer attends only when asked to (self_attn): its attention is what there is to audit
               "patchtsmixer": {"self_attn": True, "self_attn_heads": 4, "d_model": 64, "context_length": 32,
                                "prediction_length": 8},
               **{family: {"patch_length": 8, "context_length": 32, "horizon_length": 8}
                  for family in ("timesfm", "timesfm2_5")},
               "decision_transformer": {"state_dim": 4, "act_dim": 2, "max_ep_len": 64},
               # their decoder's queries are the top proposals of the encoder's 4 x 4 feature map (900 by default)
               **{family: {"num_queries": 8} for family in ("grounding-dino", "mm-grounding-dino")},
               # its prompt image stacked above its image: the model's height is twice the image's
               "seggpt": {"image_size": [64, 32]},
               # its image size is typed a list (height, width), None by default
               "molmo2_vision": {"image_size": [32, 32]},
               # their acoustic encoders double the channels at each of 5 downsamplings (48 -> 1536: 34M parameters);
               # the quantizer projects quantization_dim (2048) = twice the hidden width (the semantic and acoustic
               # features side by side); RoPE runs over the heads (position_ids of shape (1, heads)), so k has them all
               **{family: {"encoder_hidden_size": 8, "quantization_dim": 128, "num_key_value_heads": 4}
                  for family in ("xcodec2", "neucodec")},
               # Fun-ASR-Nano's adaptor (a config class with no model type): its FFN a quarter of the text width
               "FunAsrNanoAdaptorConfig": {"intermediate_size": 16, "projector_hidden_size": 64},
               # a token's layout embedding: 4 coordinates and 2 sizes side by side, hidden_size wide (LayoutLMv3),
               # or six embeddings of hidden / 6 (LiLT, whose layout stream is hidden / channel_shrink_ratio wide)
               "layoutlmv3": {"coordinate_size": 12, "shape_size": 8},
               "rf_detr": {"num_queries": 8},
               # validators: kv heads = heads and no RoPE part in GLM-5-Next's MLA; 2 layers hold an attention
               # layer (its indexer shrunk too: its CPU path dominates a pass)
               "glm5_next_text": {"num_key_value_heads": 4, "qk_rope_head_dim": 0, "qk_nope_head_dim": 16,
                                  "layer_types": ["linear_attention", "indexed_attention"], "index_n_heads": 4,
                                  "index_head_dim": 16},
               "dots3_note_vision_encoder": {"mlp_layer_types": ["dense", "sparse"]},  # per-layer keys past 2 layers
               "mamba2": {"num_heads": 8},  # heads x head_dim = expand x hidden (2 x 64)
               # its image and audio token ranges inside the tiny vocabulary
               "apertus1p5": {"image_token_offset": 16, "audio_token_offset": 80,
                              "audio_config": {"model_type": "wavtokenizer_encoder", "codebook_size": 32}},
               # its VQGAN encoder shrunk as Chameleon's is (184M parameters at its defaults): 2 stages of one block
               # (the second, at resolution 16, carries attention as attn_resolutions (16,) says) and the middle block's
               # BLT: its byte n-gram hash embeddings (6 tables of 500,002 rows: 192M parameters at the tiny width) at
               # 64 rows; no cache (its forward builds one from BltConfig, which has no num_hidden_layers:
               # modeling_blt.py:1190); the local encoder's and decoder's view of the global transformer's width tiny
               "blt": {"encoder_hash_byte_group_vocab": 64, "use_cache": False},
               **{family: {"hidden_size_global": TINY["hidden_size"]} for family in ("blt_local_encoder",
                                                                                     "blt_local_decoder")},
               "apertus1p5_vision_tokenizer": {"codebook_size": 64, "base_channels": 32, "channel_multiplier": [1, 2],
                                               "num_res_blocks": 1, "embed_dim": 16, "latent_channels": 16,
                                               "resolution": 32},
               # its projector's learned queries per image, by the image's patches (1225 and 4900 by default): the
               # 32 x 32 image's 16 patches read by 4 queries
               "aria": {"projector_patch_to_query_dict": {16: 4}},
               # hidden = the last stage's width; its RoPE fits 8 heads; its attention runs on the 1/8-scale
               # features pooled again by 4 (one token of a 32 x 32 image): pooled by 2, it sees 2 x 2
               "efficientloftr": {"out_features": [16, 16, 32, 64], "stage_num_blocks": [1, 1, 1, 1],
                                  "num_attention_heads": 8, "num_attention_layers": 2,
                                  "q_aggregation_kernel_size": 2, "kv_aggregation_kernel_size": 2,
                                  "q_aggregation_stride": 2, "kv_aggregation_stride": 2},
               "kolibri1_1": {"index_num_heads": 2, "layer_types": ["sliding_attention", "indexed_attention"],
                              "mlp_only_intermediate_size": 128},
               "muse_spark_audio": {"patch_sizes": [16, 6], "hidden_sizes": [32, 64], "depths": [1, 1]},  # 2 stages
               # expert widths a list per modality; multimodal RoPE sections of the tiny head (8 = 3 + 3 + 2)
               "ernie4_5_vl_moe_text": {"moe_intermediate_size": [32, 32],
                                        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                                                            "mrope_section": [3, 3, 2]}},
               "hunyuan_vl_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                       "mrope_section": [2, 2, 2, 2]}},
               # its 8 input and 8 output layers inside the depth (2 recurrent layers between)
               "dory": {"num_hidden_layers": 4, "n_input_layers": 1, "n_output_layers": 1},
               # hybrids whose default pattern puts no attention layer within 2 layers
               **{family: {"layer_types": ["linear_attention", "full_attention"]}
                  for family in ("bailing_hybrid", "kimi_linear", "granitemoehybrid")},
               "qwen4_exp_text": {"layer_types": ["linear_attention", "indexed_attention"], "indexer_n_heads": 4,
                                  "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8,
                                  "indexer_compress_ratio": 4},
               "swin2sr": {"patch_size": 1, "image_size": 16},  # its patch embedding keeps every pixel
               # MobileViT unfolds each stage into patch_size x patch_size patches (2 by default); on a 128 x 128
               # image every stage keeps more than one patch, so each attention row has keys to compare
               "mobilevit": {"patch_size": 2, "image_size": 128},
               "lilt": {"hidden_size": 96, "intermediate_size": 192},
               # DbrxAttention reads attn_config.rope_theta, a field DbrxAttentionConfig lacks (unused: the rotary
               # embedding reads rope_parameters), and clamps q, k, v by clip_qkv, which fails at its default None
               "dbrx": {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0}},
               # its looped layers (6 to 18 by default) inside the tiny depth, run twice, one block a layer: the
               # second pass's message attention reads the first's two last block states (a key per block)
               "inkling2_loop_text": {"num_hidden_layers": 4, "n_layers_per_attn_res_block": 1,
                                      "loop_layer_index_start": 1, "loop_layer_index_end": 3, "loop_num_passes": 2},
               # the image-token map the model reads at build (None by default), and the VQ-VAE image tokenizer
               # it always builds, shrunk (its defaults alone are 29M parameters); the tokenizer's own row alike
               "chameleon": {"vocabulary_map": {"<image>": 127}, "vq_config": CHAMELEON_VQ},
               "chameleon_vqgan": CHAMELEON_VQ,
               "emu3": {"vocabulary_map": {"<image>": 127}, "vq_config": EMU3_VQ},
               "emu3_vqgan": EMU3_VQ,
               # AutoModel maps funnel to two classes and picks by config.architectures, which is None by default
               "funnel": {"architectures": ["FunnelModel"], "d_head": 16},
               # layer_types is None by default and the model indexes it (no default pattern)
               "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
               # mlp_layer_types is None by default and the decoder layers index it
               "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"]},
               # per-layer-type rope_parameters: the default config leaves them empty
               "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                                                              "mrope_section": [3, 3, 2]}}},
               # set only by T5Gemma2Config for its encoder's text config; the encoder alone needs it stated
               "t5gemma2_text": {"dropout_rate": 0.0},
               # axial position embeddings: their widths sum to hidden_size, their shape covers the positions
               "reformer": {"attention_head_size": 16, "attn_layers": ["local", "lsh"], "axial_pos_embds_dim": [16, 48],
                            "axial_pos_shape": [8, 8], "max_position_embeddings": 64, "feed_forward_size": 128,
                            "local_attn_chunk_length": 8, "lsh_attn_chunk_length": 8},
               # the speech encoder, text-to-unit model and vocoder under sizes of their own
               **{family: {"speech_encoder_layers": 1, "speech_encoder_attention_heads": 4,
                           "speech_encoder_intermediate_size": 128, "num_conv_pos_embeddings": 16,
                           "num_conv_pos_embedding_groups": 4, "conv_depthwise_kernel_size": 7, "t2u_encoder_layers": 1,
                           "t2u_encoder_ffn_dim": 128, "t2u_encoder_attention_heads": 4, "t2u_decoder_layers": 1,
                           "t2u_decoder_ffn_dim": 128, "t2u_decoder_attention_heads": 4, "t2u_vocab_size": 128,
                           "upsample_initial_channel": 32, "unit_hifi_gan_vocab_size": 128, "unit_embed_dim": 64,
                           "lang_embed_dim": 16, "spkr_embed_dim": 16,
                           **({"char_vocab_size": 128, "t2u_variance_predictor_embed_dim": 64,
                               "t2u_variance_predictor_hidden_dim": 64} if family == "seamless_m4t_v2" else {})}
                  for family in ("seamless_m4t", "seamless_m4t_v2")},
               # its sequence compressor (perceiver resampler) at 4 heads of 16 over 8 latents, 2 deep (64 latents,
               # 8 heads of 64 and 6 layers by default); its aligner's 4 heads of 16 scale by heads**-0.5 = 0.5, not 0.25
               "evolla": {"resampler_depth": 2, "resampler_dim_head": 16, "resampler_heads": 4,
                          "resampler_num_latents": 8},
               # local blocks of 4 tokens (512 by default) beside 4 global tokens (32): the 8-token probe spans 2 blocks
               "pegasus_x": {"block_size": 4, "num_global_tokens": 4},
               # the Vocos backbone's own widths
               "wavtokenizer": {"decoder_hidden_size": 64, "decoder_intermediate_size": 128, "decoder_num_layers": 2,
                                "decoder_attention_num_groups": 8, "codebook_size": 128, "codebook_dim": 64},
               "perceiver": {"num_latents": 16, "d_latents": 64, "d_model": 64, "num_self_attends_per_block": 2,
                             "num_self_attention_heads": 4, "num_cross_attention_heads": 4, "max_position_embeddings": 64},
               # a CNN text detector: its intra-class blocks' convolutions (None by default), to say it has no attention
               "pp_ocrv6_medium_det": {
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
                   "kernel_list": [3, 2, 2], "scale_factor_list": [8, 4, 2, 1]},
               # SAM (and SAM-HQ): the neck's output and the shared positional embedding (2 x num_pos_feats) at the
               # mask decoder's width; a global layer inside the tiny depth and 2 x 2 windows on the 4 x 4 patches
               **{family: {"output_channels": 64, "num_pos_feats": 32, "global_attn_indexes": [1], "window_size": 2}
                  for family in ("sam_vision_model", "sam_hq_vision_model")},
               **{family: {"mlp_dim": 128, "iou_head_hidden_dim": 64}
                  for family in ("sam_mask_decoder", "sam2_mask_decoder", "sam3_tracker_mask_decoder")},
               # the HQ decoder also reads the ViT's early features: vit_dim is the vision tower's width
               "sam_hq_mask_decoder": {"mlp_dim": 128, "iou_head_hidden_dim": 64, "vit_dim": 64},
               # Hiera: its stem is its first stage's width; 4 stages of 1, 1, 2, 1 blocks (heads 1, 2, 4, 8 of 16
               # dims) on a 64 x 64 image (stride 4, then 2 a stage: 16, 8, 4, 2 a side), windows 4, 4, 2, 2; a
               # stage's first block pools its queries (its window halves), so the global block is the third
               # stage's second, as 5, 7, 9 are by default
               "sam2_hiera_det_model": {"hidden_size": 16, "image_size": [64, 64], "blocks_per_stage": [1, 1, 2, 1],
                                        "embed_dim_per_stage": [16, 32, 64, 128],
                                        "num_attention_heads_per_stage": [1, 2, 4, 8],
                                        "window_size_per_stage": [4, 4, 2, 2], "global_attention_blocks": [3],
                                        "window_positional_embedding_background_size": [4, 4]},
               # its FPN reads the Hiera stages (widths last to first) into the mask decoder's width, strides 4, 8, 16
               "sam2_vision_model": {"backbone_channel_list": [128, 64, 32, 16], "fpn_hidden_size": 64,
                                     "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]},
               # the image embedding (image_size / patch_size a side) is the last FPN level: 64 / 16 = 4
               "sam2_prompt_encoder": {"image_size": 64, "patch_size": 16},
               # SAM 2's video tracker (and SAM 3's, EdgeTAM's): the image and its 4 x 4 embedding as SAM 2's; the
               # memory attention's cross-attention reads 64-wide memories whatever the config says (kv_in_dim=64,
               # modeling_sam2_video.py:946) and the object pointers are cut into hidden / 64 of them (line 433: at
               # hidden 64 the uncut pointer keeps an axis too many), so every width is 128 (WHOLE_TINY: the FPN's)
               # (SAM 3's: its ViT's 32 x 32 image in 8 x 8 patches, which its image_size setter passes on)
               **{family: {"image_size": 32 if family == "sam3_tracker_video" else 64,
                           "memory_attention_hidden_size": 128, "memory_attention_num_layers": 2,
                           "memory_attention_rope_feat_sizes": [4, 4],
                           "memory_encoder_hidden_size": 128, "mask_downsampler_embed_dim": 128,
                           "memory_fuser_embed_dim": 128, "memory_fuser_intermediate_dim": 256,
                           **({"memory_attention_mlp_hidden_size": 128, "perceiver_resampler_num_latents": 8,
                               "perceiver_resampler_num_latents_2d": 4, "memory_attention_rope_k_sizes": [2, 2],
                               "perceiver_resampler_mlp_intermediate_size": 128}
                              if family == "edgetam_video" else {"memory_attention_feed_forward_hidden_size": 128})}
                  for family in ("sam2_video", "sam3_tracker_video", "edgetam_video")},
               **{f"{family}_prompt_encoder": {"hidden_size": 128, "image_size": 64, "patch_size": 16}
                  for family in ("sam2_video", "edgetam_video")},
               "sam3_tracker_video_prompt_encoder": {"hidden_size": 128},
               **{f"{family}_mask_decoder": {"hidden_size": 128, "mlp_dim": 128, "iou_head_hidden_dim": 64}
                  for family in ("sam2_video", "sam3_tracker_video", "edgetam_video")},
               # SAM 3's ViT: a global layer inside the tiny depth, 2 x 2 windows; its position table at the tiny
               # image (336 / 8 patches a side by default, tiled)
               "sam3_vit_model": {"window_size": 2, "global_attn_indexes": [1], "pretrain_image_size": 32},
               # its FPN (scales 4, 2, 1, 0.5 of the 4 x 4 patches) at the decoders' width; the tracker reads three
               "sam3_vision_model": {"fpn_hidden_size": 64, "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]},
               **{family: {"num_queries": 8} for family in ("sam3_detr_decoder", "sam3_lite_text_detr_decoder")},
               # its first and last text layers are RepMixer convolutions: 3 layers leave one attention layer
               "sam3_lite_text_text_model": {"num_hidden_layers": 3},
               # HTS-AT: the last stage's frequency rows (spec_size / 32) must be at least spec_size / num_mel_bins
               # (modeling_clap.py:887: c_freq_bin = n_frequencies // freq_ratio, 0 at 16 mels of 256)
               "clap_audio_model": {"num_mel_bins": 64, "spec_size": 64},
               # its k and v projections have num_attention_heads heads, whatever num_key_value_heads says
               # (modeling_granite_speech5.py:110-112, repeated by num_key_value_groups in eager_attention_forward)
               "granite_speech5_encoder": {"num_key_value_heads": 4},
               # its conformer attends within blocks of context_size frames (200 by default), the last block padded
               # and its padded rows dropped (modeling_granite_speech.py:174-209): one block of the 32 frames fed
               **{family: {"context_size": 32} for family in ("granite_speech_encoder", "granite_speech_plus_encoder")},
               # the width of its backbone's first-stage map (HGNetV2's 128, divided as cnn_kwargs divides it)
               "pp_doclayout_v3": {"x4_feat_dim": 128 // 8},
               # its blocks unfold the image / 8, / 16, / 32 maps into patch_size patches (2 by default)
               "mobilevitv2": {"patch_size": 2, "image_size": 64},
               # its rotary embedding is head_dim wide (modeling_longcat_flash.py:96), applied to the qk_rope_head_dim
               # part of q and k (64 = 64 by default): head_dim is the tiny qk_rope_head_dim
               "longcat_flash": {"head_dim": TINY["qk_rope_head_dim"]},
               # LW-DETR's ViT: the stages it returns (2, 4, 5, 9 of 10 by default) inside the tiny depth, a windowed
               # first layer, 2 x 2 windows (image_size / num_windows divisible by their side: 32 / 4 % 2); one
               # projector level (none by default: nothing to concatenate) and 8 queries (300 x 13 groups)
               "lw_detr_vit": {"out_indices": [1, 2], "window_block_indices": [0], "num_windows": 4},
               "lw_detr": {"projector_scale_factors": [1.0], "num_queries": 8},
               # the vocoder reads the spectrogram model's mel channels (80 each by default)
               "fastspeech2_conformer_hifigan": {"model_in_dim": TINY["num_mel_bins"], "upsample_initial_channel": 32},
               # VideoPrism's own depths and its 288 x 288 frames in 18 x 18 tubelets (its factor is the same at any
               # size; 12 + 4 layers at 288 px took 15 s a run): 2 + 2 layers, 32 x 32 frames in 8 x 8 tubelets
               "videoprism_vision_model": {"image_size": 32, "tubelet_size": [1, 8, 8], "num_spatial_layers": 2,
                                           "num_temporal_layers": 2, "num_auxiliary_layers": 1},
               # its HF Swin backbone's stages (2, 3, 4: 32, 64, 128 wide at the tiny sizes) into the encoder; the
               # text tower's width into the class and task embeddings; a 128 x 128 image (640 by default) and 8
               # queries. The layer norms after the backbone expect timm's channels-last maps (Swin's are
               # channels-first): off, outside the attention
               "omdet-turbo": {"encoder_in_channels": [32, 64, 128], "text_projection_in_dim": 64,
                               "text_projection_out_dim": 64, "class_embed_dim": 64, "task_encoder_hidden_dim": 128,
                               "image_size": 128, "num_queries": 8, "apply_layernorm_after_vision_backbone": False},
               # LeViT's stem is 4 stride-2 convolutions (16 a side, as patch_size says by default; its position
               # biases are sized by image_size / patch_size); 128 x 128 leaves 8, 4 and 2 patches a side to its
               # 3 stages (at 32 its last stage has one key)
               "levit": {"patch_size": 16, "image_size": 128},
               # Hiera's stem: a 7 x 7 convolution at stride 4, padding 3 (the tiny patch 8 leaves a token count its
               # mask units do not tile); its first two stages attend within mask units (their tokens interleaved) and
               # each stage's first block pools its queries: the third stage's second block is a plain global one
               "hiera": {"patch_size": [7, 7], "depths": [1, 1, 2, 1]},
               # the visual prompt is added to frames max_img_size a side (448 by default): the detector-sized
               # image (feed.BACKBONE_IMAGE), with a band narrower than half of it (96 by default)
               "tvp": {"max_img_size": 128, "visual_prompt_size": 16},
               # Step 3.7's text model builds its sliding-window mask on every pass (modeling_step3p7.py:897),
               # sliding layers or not: the window must be set (None by default); 8 covers the 8-token probe
               "step3p5": {"sliding_window": 8},
               # its full-attention layers' head (a constructor argument, 512 by default: not a field) at the tiny head
               "diffusion_gemma_text": {"global_head_dim": 16},
               # its eager attention repeats no key/value heads (modeling_unlimited_ocr.py:635): as many as query heads
               "unlimited_ocr_text": {"num_key_value_heads": 4},
               # DeepSeek-OCR-style SAM encoders feeding a second encoder: 2 x 2 patches of the 32 x 32 image (16 a
               # side), 4 x 4 windows and one global layer; the neck's two stride-2 convolutions end at the second
               # encoder's width (64) on a 4 x 4 map
               **{family: {"patch_size": 2, "window_size": 4, "global_attn_indexes": [1], "output_channels": 16,
                           "downsample_channels": [32, 64], "mlp_dim": 128}
                  for family in ("unlimited_ocr_sam_vision_model", "deepseek_ocr2_sam_vision_model")},
               # its conformer's convolution widths (its hidden size by default: the model, not the config, requires
               # them equal) and its depth under a name of its own
               "phi4_multimodal_audio": {"ext_pw_out_channel": 64, "depthwise_separable_out_channel": 64,
                                         "nemo_conv_channels": 64, "num_blocks": 2},
               # Janus's VQ-VAE image tokenizer shrunk as Chameleon's is (its defaults alone are 72M parameters at the
               # tiny sizes); its projections into the text width; its token grid (32 x 32 image, one halving)
               "janus_vqgan": {"base_channels": 32, "channel_multiplier": [1, 2], "num_res_blocks": 1, "embed_dim": 8,
                               "latent_channels": 16, "num_embeddings": 64, "projection_dim": 64,
                               "image_token_embed_dim": 64, "num_patches": 16},
               # MiniCPM-V 4.6/4.7 and MiniCPM-OCR: the window-attention merger (vit_merger) runs after encoder layer
               # insert_layer_id (6 by default, past the tiny depth: never run); after the first layer, its 2 x 2
               # windows tile the 4 x 4 patches. The composites copy theirs onto the vision config
               **{family: {"insert_layer_id": 0}
                  for family in ("minicpm_ocr_vision", "minicpmv4_6_vision", "minicpmv4_7_vision",
                                 "minicpm_ocr", "minicpmv4_6", "minicpmv4_7")},
               # its rotary embedding turns max(projection_dim / (2 x heads), 32) dims of each head (modeling_clvp.py:255):
               # heads of 64 with 32 turned, as the default's (768 / 12 heads, 768 / 24 = 32 turned)
               "clvp_encoder": {"hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 256,
                                "projection_dim": 128}}
# A composite built whole: (its model type, a sub-config) -> fields that sub-config takes there beside its own tiny
# sizes (a tower shared with a family measured at width 64, widened where the composite needs more)
WHOLE_TINY = {(family, "vision_config"): {"fpn_hidden_size": 128}
              for family in ("sam2_video", "sam3_tracker_video", "edgetam_video")}
# When a config refuses the tiny sizes, these changes are tried in turn (validators ask for
# equal key/value heads, one expert per token, their own layer pattern).
FALLBACKS = ({"num_key_value_heads": 4}, {"num_experts_per_tok": 1}, {"layer_types": "default"})
# The recurrent and linear-attention layers of hybrid models, shrunk too (their slow CPU
# paths dominate a forward pass at the default sizes); dropped again if a config refuses.
TINY_HYBRID = {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 16,
               "ssm_state_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16, "linear_key_head_dim": 16,
               "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
               "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32, "n_groups": 1,
               "mamba_n_groups": 1, "linear_head_dim": 16, "linear_num_heads": 4}
# Vision encoders: a 32 x 32 image in 8 x 8 patches (16 patches, and a class token where the family has one).
VISION_TINY = {"image_size": 32, "patch_size": 8}
