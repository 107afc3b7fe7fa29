"""The tiny sizes the audit builds every family at, by standard config field name.

:data:`TINY` holds the sizes; :data:`FALLBACKS` what is tried when a validator refuses,
:data:`RUN_RETRIES` when a model built cannot run;
:data:`TINY_HYBRID` the recurrent layers of hybrid models; :data:`VISION_TINY` an image.  What a
particular family needs beside them is its entry's ``tiny`` in :mod:`.known`.  :mod:`.families`
builds the configs from both.
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
# When a config refuses the tiny sizes, these changes are tried in turn (validators ask for
# equal key/value heads, one expert per token, their own layer pattern).
FALLBACKS = ({"num_key_value_heads": 4}, {"num_experts_per_tok": 1}, {"layer_types": "default"})
# When a model built at the tiny sizes cannot run a forward pass, it is built again with these in turn (the first:
# as built): its tied widths first, equal key/value heads, then deeper (a layer pattern whose first attention
# layer sits past the tiny depth).
RUN_RETRIES = ({}, {"tied_first": True}, {"num_key_value_heads": 4}, {"num_hidden_layers": 4}, {"num_hidden_layers": 8})
# The recurrent and linear-attention layers of hybrid models, shrunk too (their slow CPU
# paths dominate a forward pass at the default sizes); dropped again if a config refuses.
TINY_HYBRID = {"mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 16,
               "ssm_state_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16, "linear_key_head_dim": 16,
               "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
               "shared_expert_intermediate_size": 32, "moe_shared_expert_intermediate_size": 32, "n_groups": 1,
               "mamba_n_groups": 1, "linear_head_dim": 16, "linear_num_heads": 4}
# Vision encoders: a 32 x 32 image in 8 x 8 patches (16 patches, and a class token where the family has one).
VISION_TINY = {"image_size": 32, "patch_size": 8}

# What the audit spends on one backend's designed passes of one model (the whole path's 14 designs): about a minute on
# 2 CPU cores.  A folder's model beyond it (a video model at its real size) is measured on its attention function
# alone, the whole path named as not run with its cost; a folder's tower beyond it is not audited at its own sizes.
# ATTNSCALE_DESIGN_TFLOP sets another (design_flop_budget).
DESIGN_FLOP_BUDGET = 5e12


def design_flop_budget() -> float:
    """DESIGN_FLOP_BUDGET, or ATTNSCALE_DESIGN_TFLOP where set."""
    from ..environment import DESIGN_TFLOP, parse_tflop, value

    text = value(DESIGN_TFLOP)
    return parse_tflop(text) if text is not None else DESIGN_FLOP_BUDGET
