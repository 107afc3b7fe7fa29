"""The build stage: the families listed, their tiny configs (sizes.py) and the models built from them
(families.py), with what is taken for attention, a composite and a tower."""

from __future__ import annotations

import os

import pytest
import torch

from attnscale.audit import families, feed, pipeline, record, verdicts
from attnscale.audit import composite as composites
from attnscale.audit import measure as audit

from audit_helpers import FACTOR_REL, run_cli


def test_every_base_model_type_is_listed(capsys):
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    listed = [name for _, name in pipeline.plan(None)]
    assert len(listed) == len(set(listed)) >= 400
    assert set(MODEL_MAPPING_NAMES) <= set(listed)
    assert {family.model_type for family in families.text_families()} <= set(listed)
    code, out, _ = run_cli(["audit", "--list"], capsys)  # --list prints what a no-argument audit audits
    assert code in (0, None) and [line.split()[0] for line in out.splitlines()] == listed


def test_skips_name_what_the_family_lacks():
    no_attention = audit.audit_family("resnet", ("eager",))
    assert no_attention.status == "skipped" and no_attention.reason.startswith("no attention module")
    composite = audit.audit_family("llava", ("eager",))
    assert composite.reason == ("a composite of other families (vision_config: clip_vision_model, audited as its own "
                                "family; text_config: llama, audited as its own family)")
    towers = audit.audit_family("align", ("eager",)).reason
    assert towers.startswith("multimodal composite (vision_config: align_vision_model, no base model of its own; ")
    # every family of the installed release takes an input the audit feeds; a model whose main input is
    # none of them (here a BERT told its main input is a point cloud) is refused with what it takes
    model = families.build(families.tiny_config("bert"))
    model.main_input_name = "point_cloud"
    unfed = audit.audit_model(model, "bert", ("eager",))
    assert unfed.backends["eager"]["reason"] == f"takes point_cloud (not token ids); the audit feeds {feed.FED_TEXT} only"
    assert unfed.verdict == "not measured" and not unfed.layers


def test_multimodal_rope_sections_are_scaled_to_the_tiny_head():
    """Multimodal RoPE splits each head's rotary half into (temporal, height, width) sections sized for
    the default head: Qwen2-VL's rotary embedding falls back to [16, 24, 24] (head dim 128), which at
    head dim 16 becomes [2, 3, 3]; HunYuan-V4's config states [12, 10, 10] for a rotary part of 64 and
    checks it, so it is scaled before the config is built ([2, 1, 1] for 8).  The text tower is measured."""
    model = families.build(families.tiny_config("qwen2_vl_text"))
    assert [m.mrope_section for m in model.modules() if hasattr(m, "mrope_section")] == [[2, 3, 3]]
    assert families.tiny_config("hy_v4_vl_text").rope_parameters["mrope_section"] == [2, 1, 1]
    assert families.shares_of([8, 12, 12], 4) == [1, 2, 1] and families.shares_of([1, 1, 30], 4) == [1, 1, 2]
    result = audit.audit_family("qwen2_vl_text", ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert verdicts.family_row(result, ("eager", "sdpa"))["eager"] == "0.25"


def test_hierarchical_vision_encoders_get_tiny_stages():
    """Swin's per-stage heads keep their proportions ([3, 6, 12, 24] -> [1, 2, 4, 8]), each stage one
    layer, every head 16 wide, 2 x 2 windows tiling every stage of a 64 x 64 image: the factor the
    source states, head_dim^-0.5 = 0.25, at every stage.  PVT's stage widths follow its heads."""
    config = families.tiny_config("swin")
    assert list(config.num_heads) == [1, 2, 4, 8] and list(config.depths) == [1] * 4 and config.embed_dim == 16
    assert (config.image_size, config.patch_size, config.window_size) == (64, 4, 2)
    pvt = families.tiny_config("pvt_v2")
    assert list(pvt.num_attention_heads) == [1, 2, 5, 8] and list(pvt.hidden_sizes) == [16, 32, 80, 128]
    result = audit.audit_family("swin", ("eager",))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert {layer.d_k for layer in result.layers} == {16} and len(result.layers) == 4
    assert verdicts.family_row(result, ("eager",))["eager"] == "0.25"


def test_a_tower_config_with_widths_under_names_of_its_own_is_built_tiny():
    """Qwen2-VL's vision config names its widths embed_dim, depth and num_heads (hidden_size is the
    merger's output): built at the tiny sizes (it had 67 million parameters), the tower is measured
    and Qwen2-VL is covered."""
    rows = [r for name in ("qwen2_vl", "qwen2_vl_text") for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    tower = by_name["qwen2_vl.vision_config"]
    assert tower.verdict == "ok" and verdicts.family_row(tower, ("eager",))["eager"] == "0.25", tower.reason
    assert by_name["qwen2_vl"].status == "covered"


def test_an_image_size_per_axis_is_shrunk_per_axis():
    """YOLOS takes (height, width) = (512, 864); the tiny image is (32, 32), and the family is measured."""
    assert tuple(families.tiny_config("yolos").image_size) == (32, 32)
    result = audit.audit_family("yolos", ("eager",))
    assert result.verdict == "ok" and verdicts.family_row(result, ("eager",))["eager"] == "0.25", result.findings


def test_a_detector_is_built_whole_on_a_tiny_backbone_of_its_default_type():
    """DETR's config builds a ResNet backbone by default (its sub-config spec): the audit builds it
    at the tiny sizes (one block a stage, widths / 8) and feeds a 128 x 128 image, whose 4 x 4
    feature map gives the encoder 16 keys; every attention layer, encoder, decoder and cross, reads
    head_dim^-0.5 (DetrAttention's self.scaling = head_dim**-0.5)."""

    config = families.tiny_config("detr")
    backbone = config.backbone_config
    assert backbone.model_type == "resnet" and set(backbone.depths) == {1}
    assert backbone.hidden_sizes == [size // families.CNN_WIDTH_DIVISOR for size in type(backbone)().hidden_sizes]
    assert feed.pixel_values(config, 1).shape[-2:] == (feed.BACKBONE_IMAGE,) * 2
    result = audit.audit_family("detr", backends=("eager", "sdpa"))
    # its ResNet has no attention: sdpa is set on the attention layers, the backbone keeps eager
    assert result.backends["sdpa"]["accepted"] and result.backends["sdpa"]["parity"] < verdicts.PARITY_TOL[torch.float32]
    layers = result.layers
    assert result.verdict == "ok" and {layer.name.split(".")[0] for layer in layers} == {"encoder", "decoder"}
    assert all(abs(layer.backends["eager"].function["factor"] - layer.d_k ** -0.5) < 1e-6 for layer in layers)


def test_cnn_backbones_shrink_widths_and_depths_but_keep_the_image_channels():
    shrunk = families.cnn_kwargs({"depths": [3, 4, 6, 3], "hidden_sizes": [256, 512, 1024, 2048], "embedding_size": 64,
                                  "stem_channels": [3, 32, 48], "layer_type": "bottleneck"})
    assert shrunk == {"depths": [1, 1, 1, 1], "hidden_sizes": [32, 64, 128, 256], "embedding_size": 8,
                      "stem_channels": [3, 8, 8]}
    # a config without a backbone, or whose backbone needs timm, keeps its composite skip
    assert families.tiny_backbone(families.config_class("llama"), "backbone_config") is None
    from types import SimpleNamespace

    needs_timm = SimpleNamespace(sub_configs={"backbone_config": None}, sub_configs_defaults={
        "backbone_config": SimpleNamespace(model_type="timm_backbone", init_kwargs={})})
    assert families.tiny_backbone(needs_timm, "backbone_config") is None


def test_a_modeling_file_that_asks_the_hub_for_kernels_imports_silently():
    """GPT-Neo's modeling file asks the hub for flash-attention kernels on import (transformers 5.25);
    with attnscale's offline set-up the kernels package's "Skipping publisher trust check" lines stay
    off stderr, and the import still works."""
    import subprocess
    import sys

    code = ("import attnscale.audit.families, transformers.models.gpt_neo.modeling_gpt_neo as m; "
            "print(m.GPTNeoModel.__name__)")
    env = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "GPTNeoModel", done.stderr
    assert "Skipping publisher trust check" not in done.stderr, done.stderr


def test_widths_a_validator_ties_to_the_hidden_size_follow_the_tiny_sizes():
    """WavTokenizer's validator requires codebook_dim == hidden_size, Pocket TTS's its flow head's
    condition_dim == the backbone's hidden_size, Inkling 2 its (optional) vision tower's
    text_hidden_size == the text hidden size: each is built at the tiny width, the fields that
    default to a hidden size under another name set to it; a validator's refusal names its cause."""
    assert families.tiny_config("wavtokenizer").codebook_dim == families.TINY["hidden_size"]
    pocket = families.tiny_config("pocket_tts")
    assert pocket.flow_head_config.condition_dim == pocket.hidden_size == families.TINY["hidden_size"]
    inkling = families.tiny_config("inkling2")
    assert inkling.vision_config.text_hidden_size == inkling.text_config.hidden_size == families.TINY["hidden_size"]
    # Mamba 2 at 4 heads (its FAMILY_TINY entry has 8, which fits): the refusal names what it requires
    with pytest.raises(families.CannotAudit, match="hidden_size \\* expand .* must equal num_heads \\* head_dim"):
        families.tiny_config("mamba2", num_heads=4)


def test_every_token_id_beyond_the_tiny_vocabulary_is_moved_inside_it():
    kwargs = families.tiny_kwargs(families.config_class("nemotron3_5_transcribe_word_timestamp"))
    assert kwargs["blank_token_id"] < families.TINY["vocab_size"]


@pytest.mark.parametrize("family, head_dim", [("layoutlmv3", 16), ("lilt", 24)])
def test_layout_embeddings_sized_to_the_tiny_width_let_document_models_run(family, head_dim):
    """LayoutLMv3 lays 4 coordinate and 2 shape embeddings side by side (4 x 12 + 2 x 8 = 64 wide);
    LiLT six of hidden / 6, so its tiny width is 96 (head dim 24): built so, each is measured at
    head_dim^-0.5 as its source states."""
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", (result.reason, result.findings)
    factors = [row.backends["eager"].path["factor"] for row in result.layers]
    assert factors and all(f == pytest.approx(head_dim**-0.5, rel=FACTOR_REL) for f in factors)


def test_a_feed_forward_block_named_after_its_attention_is_not_attention():
    """EdgeTAM's memory attention MLP is up_proj, act_fn, down_proj (modeling_edgetam_video.py): no q.k."""
    assert not families.is_attention_class("EdgeTamVideoMemoryAttentionMLP")
    assert families.is_attention_class("EdgeTamVideoRoPECrossAttention")
    assert families.is_attention_class("LongcatFlashMLA")


def test_a_composite_whose_base_class_is_a_tower_is_built_from_its_own_class():
    """AutoModel maps MusicGen to its decoder, which a MusicgenConfig does not build: the composite
    class of its own package is used, so its decoder is found to be a tower (MusicgenAttention is not
    its own) and the decoder row measures it at head_dim^-0.5."""
    config = families.whole_config("musicgen")
    assert type(families.composite_model(config)).__name__ == "MusicgenForConditionalGeneration"
    skipped = audit.audit_family("musicgen", ("eager",))
    assert skipped.own_attention == []
    decoder = composites.audit_tower("musicgen", {"name": "decoder", "model_type": "musicgen_decoder", "own": False},
                                ("eager",))
    assert decoder.verdict == "ok"
    assert all(row.backends["eager"].function["factor"] == pytest.approx(0.25, rel=FACTOR_REL)
               for row in decoder.layers)


@pytest.mark.parametrize("family, factor", [
    ("glm5_next_text", 0.25),  # its validator: kv heads = heads, no RoPE part in its MLA
    ("cosmos3_edge", 0.25),  # a sub-config's multimodal RoPE sections at the tiny head (built whole)
    ("inkling2_loop", None),  # an AutoConfig vision sub-config tied to the text width (head dims 128 and 64)
    ("t5gemma2", 0.0625),  # its encoder's own text config tiny too; query_pre_attn_scalar 256
    ("granitemoehybrid", 1.0),  # a layer pattern with an attention layer; attention_multiplier 1
    ("dbrx", 0.25), ("axk1", 0.25), ("dory", 0.25), ("mimi", 0.25), ("trocr", 0.25), ("voxtral_realtime_text", 0.25),
    ("gemma4_vision", 1.0), ("fun_asr_nano_encoder", 0.25), ("speecht5", 0.25)])
def test_families_whose_tiny_build_needed_more_than_the_tiny_sizes_are_measured(family, factor):
    """Validators, layer patterns, nested and AutoConfig sub-configs, a mono waveform (Mimi), a causal LM
    with no base class (TrOCR's decoder), a time condition only the composite computes (Voxtral Realtime's
    text model), patches with their (x, y) ids (Gemma 4's
    vision), stacked frames (Fun-ASR), hidden-wide frames both sides (SpeechT5): each runs and every layer
    reads the factor its source states (head_dim^-0.5 where None; the whole path where no attention
    function is called)."""
    result = pipeline.audit_item(("family", family), ("eager",), 0)[0]
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert result.layers
    for row in result.layers:
        expected = row.d_k ** -0.5 if factor is None else factor
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(expected, rel=FACTOR_REL), row.name


@pytest.mark.parametrize("family, names", [
    ("lxmert", ("LxmertAttentionOutput",)),  # dense, dropout, LayerNorm(hidden + input)
    ("funnel", ("FunnelAttentionStructure",)),  # position embeddings and masks for FunnelRelMultiheadAttention
])
def test_an_attention_s_output_layer_or_helper_structure_is_not_attention(family, names):
    """Parts named after an attention that compute no q.k (modeling_lxmert.py, modeling_funnel.py): not
    counted as attention, so the family leaves nothing unread; the attention beside them still is."""
    for name in names:
        assert not families.is_attention_class(name)
    assert families.is_attention_class("LxmertSelfAttentionLayer") and families.is_attention_class(
        "FunnelRelMultiheadAttention")
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok" and composites.nothing_left(result), result.unread_attention


def test_a_relative_position_bias_table_is_not_counted_as_attention():
    """Phi-4's audio tower computes one learned logit per relative position in a module of its own
    (Phi4MultimodalAudioRelativeAttentionBias, an nn.Embedding over distances) and passes it to every
    layer: no q.k of its own, so it leaves nothing unread, and Phi-4 multimodal is measured whole."""
    assert not families.is_attention_class("Phi4MultimodalAudioRelativeAttentionBias")
    assert families.is_attention_class("Phi4MultimodalAudioAttention")
    rows = pipeline.audit_item(("family", "phi4_multimodal"), ("eager",), 0)
    assert record.is_measured(rows[0]) and not rows[0].own_attention, rows[0].reason
    audio = next(row for row in rows if row.family == "phi4_multimodal.audio_config")
    assert composites.nothing_left(audio)
