"""The feed stage: the inputs given to a model (feed.py): token ids and what runs
beside them, images, audio, patches, tiles, series, encoder states and prompts."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnscale.audit import families, feed, pipeline, verdicts
from attnscale.audit import composite as composites
from attnscale.audit import measure as audit

from audit_helpers import FACTOR_REL, run_cli


def test_an_audio_folder_is_fed_features(tmp_path, capsys):
    """A Whisper folder is not fed token ids: it gets mel features of the shape it takes."""
    config = {"model_type": "whisper", "d_model": 32, "encoder_layers": 1, "decoder_layers": 1,
              "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
              "vocab_size": 100, "num_mel_bins": 8, "max_source_positions": 16, "max_target_positions": 16,
              "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 3, "decoder_start_token_id": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, _ = run_cli(["audit", str(tmp_path), "--json"], capsys)
    family = json.loads(out)["families"][0]
    assert code == 0 and family["verdict"] == "ok", family["findings"]
    assert family["layers"][0]["d_k"] == 16 and family["layers"][0]["backends"]["eager"]["path"]["form"] == "linear"


@pytest.mark.parametrize("family", ["vit", "dinov2", "siglip_vision_model", "clip_vision_model", "vit_mae"])
def test_vision_encoders_are_audited_from_an_image(family):
    """A 32 x 32 image in 8 x 8 patches: every backend measured, the factor the source states
    (head_dim^-0.5 = 0.25 at head dim 16); ViT-MAE masks patches at random, with the same draws
    under every backend, so the outputs agree."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", result.findings
    assert row["eager"] == row["sdpa"] == row["declared"] == "0.25"
    assert all(layer.backends["eager"].path["form"] == "linear" for layer in result.layers)


@pytest.mark.parametrize("family", ["qwen2_5_vl_vision", "video_llama_3_vision", "glm4v_vision"])
def test_vision_towers_that_take_packed_patches_are_fed_them(family):
    """Qwen2-VL-style vision towers take flattened patches and a (t, h, w) grid, packed into one
    sequence: the attention function's factor is read from the real call (head_dim^-0.5 = 0.25 at
    head dim 16) and the whole path says why it was not driven.  GLM-4V's merger into the text
    width (out_hidden_size, 4096 by default) is shrunk with the rest."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert row["eager"] == row["sdpa"] == row["declared"] == "0.25"
    assert all(layer.path_missing == audit.PACKED for layer in result.layers)


def test_a_vision_tower_that_takes_its_image_cut_into_patches_is_fed_patches_and_their_grid():
    """SigLIP 2's vision tower (NaFlex) takes pixel_values already cut into patches, with each image's
    patch grid (spatial_shapes) and a patch mask: fed 4 x 4 patches of 3 x 16 x 16 values, it is
    measured under every backend, head_dim^-0.5 = 0.25 at head dim 16, and it covers SigLIP 2 and
    LFM2-VL (whose other towers are measured in the same audit)."""
    result = audit.audit_family("siglip2_vision_model", ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert row["eager"] == row["sdpa"] == row["declared"] == "0.25"
    rows = [r for item in (("family", "siglip2_vision_model"), ("family", "siglip2"), ("family", "lfm2_vl"),
                           ("family", "lfm2")) for r in pipeline.audit_item(item, ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    assert by_name["siglip2"].status == by_name["lfm2_vl"].status == "covered", (by_name["siglip2"].reason,
                                                                                 by_name["lfm2_vl"].reason)


def test_vision_towers_that_name_their_image_otherwise_or_take_its_patch_grid_are_measured():
    """GOT-OCR2's vision encoder keeps input_ids as its main input's name but takes pixel_values;
    MiniCPM-V's tower takes each image's patch grid (target_sizes) beside the pixels.  Both measured,
    head_dim^-0.5 = 0.25 at head dim 16."""
    got = {r.family: r for r in pipeline.audit_item(("family", "got_ocr2"), ("eager",), 0)}["got_ocr2.vision_config"]
    minicpm = audit.audit_family("minicpmv4_7_vision", ("eager", "sdpa"))
    for result in (got, minicpm):
        assert result.status == "audited" and result.verdict == "ok", (result.family, result.reason, result.findings)
        assert verdicts.family_row(result, ("eager",))["eager"] == "0.25"


def test_an_audio_encoder_that_reads_its_frame_mask_without_a_default_gets_every_frame_real():
    """AudioFlamingo 3's encoder sums input_features_mask, which defaults to None: given a mask of
    every frame real, it is measured (head_dim^-0.5 = 0.25 at head dim 16) and covers AudioFlamingo 3
    and Music Flamingo beside their Qwen2 text tower."""
    rows = [r for name in ("audioflamingo3_encoder", "audioflamingo3", "musicflamingo", "qwen2")
            for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    encoder = by_name["audioflamingo3_encoder"]
    assert encoder.verdict == "ok" and verdicts.family_row(encoder, ("eager",))["eager"] == "0.25", encoder.reason
    assert by_name["audioflamingo3"].status == by_name["musicflamingo"].status == "covered"


def test_a_vision_tower_that_takes_its_image_as_tiles_is_fed_them():
    """Mllama's vision tower takes (batch, images, tiles, channels, height, width) with each image's
    aspect-ratio id and tile mask, and returns the states of the layers in intermediate_layers_indices
    (kept inside the tiny depth): fed one image as its 4 tiles, all real, it is measured under every
    backend (head_dim^-0.5 = 0.25 at head dim 16) and, with its text tower, covers Mllama."""
    rows = pipeline.audit_item(("family", "mllama"), ("eager", "sdpa"), 0)
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    tower = by_name["mllama.vision_config"]
    assert tower.verdict == "ok", (tower.reason, tower.findings)
    row = verdicts.family_row(tower, ("eager", "sdpa"))
    assert row["eager"] == row["sdpa"] == row["declared"] == "0.25"
    assert by_name["mllama"].status == "covered"


@pytest.mark.parametrize("family", ["wav2vec2", "hubert", "whisper", "speech_to_text"])
def test_audio_encoders_are_audited_from_samples_or_features(family):
    """Raw samples (wav2vec2, HuBERT) or mel features (Whisper: channels x frames; Speech2Text:
    frames x channels), the first shape the model runs on; Whisper scales q first and calls the
    attention function with scaling=1.0, which is declared, so its decoder is no mismatch."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert any(layer.backends["eager"].path for layer in result.layers)  # the encoder's whole path read
    if family == "whisper":
        assert "Q_SCALED_FIRST" in result.layers[0].declared["rules"]


def test_a_video_model_gets_a_clip_of_its_own_frame_count():

    config = families.tiny_config("videomae")
    clip = feed.pixel_values(config, 2)
    assert clip.shape == (2, config.num_frames, config.num_channels, config.image_size, config.image_size)
    result = audit.audit_family("videomae", backends=("eager",))
    assert result.verdict == "ok"
    assert all(abs(layer.backends["eager"].function["factor"] - layer.d_k ** -0.5) < 1e-4
               for layer in result.layers)


def test_audio_shapes_keep_the_stated_channels_first_and_add_sub_configs_and_stacked_frames():
    from transformers import WhisperConfig


    shapes = feed.audio_shapes(WhisperConfig(num_mel_bins=16, max_source_positions=16), "input_features")
    assert shapes[:2] == [(16, 32), (32, 16)]  # the stated channel count first, frames 2 x positions
    # raw samples last, also as a mono waveform with its channel axis (Mimi, OmniASR)
    assert (32, 64) in shapes and (32, 80) in shapes and shapes[-2:] == [(6400,), (1, 6400)]


def test_cross_attention_that_runs_only_with_encoder_states_is_fed_them_and_measured():
    """A Q-Former's and a decoder tower's cross-attention run only when encoder states are given:
    the audit gives them 16 and measures those layers like the others (head_dim^-0.5 in both
    BLIP-2's Q-Former and Canary's decoder, whose attention classes scale by head_dim**-0.5)."""

    qformer = audit.audit_family("blip_2_qformer", backends=("eager",))
    cross = [layer for layer in qformer.layers if "crossattention" in layer.name]
    assert qformer.verdict == "ok" and cross and not qformer.unread_attention
    cls = families.config_class("canary")
    tower = next(t for t in families.tower_types(cls, dict(cls.sub_configs)) if t["name"] == "decoder_config")
    decoder = composites.audit_tower("canary", tower, backends=("eager",))
    assert decoder.verdict == "ok" and not decoder.unread_attention
    assert {layer.name.rsplit(".", 1)[1] for layer in decoder.layers} == {"self_attn", "encoder_attn"}
    for layer in cross + decoder.layers:
        assert abs(layer.backends["eager"].function["factor"] - layer.d_k ** -0.5) < 1e-5
    assert feed.encoder_states(families.build(families.tiny_config("bert")), 1) == {}  # no cross-attention


@pytest.mark.parametrize("family", ["patchtst", "patchtsmixer", "time_series_transformer", "decision_transformer"])
def test_forecasters_and_trajectory_models_are_fed_their_series_and_measured(family):
    """A forecaster takes its history as past_values (with the observed mask, time features and the
    future values its decoder reads where its forward takes them); Decision Transformer takes states,
    actions and returns.  Fed them, each is measured under every backend it supports: head_dim^-0.5
    = 0.25 at head dim 16, as their sources state (``self.scaling = self.head_dim**-0.5``;
    PatchTSMixer's attention exists only with self_attn, which the tiny config asks for)."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    assert result.verdict == "ok", (result.reason, result.findings)
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert row["eager"] == "0.25" and row["sdpa"] in ("0.25", "refused"), row


def test_series_inputs_follow_the_config_history_and_horizon():
    """The history is the context plus the furthest lag (the Time Series Transformer builds lagged
    copies of the series), and the decoder's future values span the prediction length."""
    model = families.build(families.tiny_config("time_series_transformer"))
    config = model.config
    inputs = feed.shaped_input(model, 3, feed.series_shapes(config)[0])
    history = config.context_length + max(config.lags_sequence)
    assert inputs["past_values"].shape == (3, history) and inputs["past_observed_mask"].shape == (3, history)
    assert inputs["future_values"].shape == (3, config.prediction_length)
    assert torch.equal(inputs["past_values"][0], inputs["past_values"][2])  # every design sees the same series


@pytest.mark.parametrize("family, beside", [("bros", {"bbox"}), ("lxmert", {"visual_feats", "visual_pos"}),
                                            ("vilt", {"pixel_values"}), ("udop", {"bbox"})])
def test_a_token_model_that_does_not_run_on_ids_alone_is_given_what_it_reads_beside_them(family, beside):
    """BROS and UDOP need each token's box on the page, LXMERT region features and their positions,
    ViLT an image: refused on token ids alone, each is given them (boxes well formed on the 0-1000
    grid) and measured (head_dim^-0.5 = 0.25 at head dim 16 for the BERT-style ones; UDOP is T5's
    attention, unscaled: 1)."""
    model = families.build(families.tiny_config(family))
    inputs = feed.first_inputs(model, feed.Feeding())
    assert beside <= set(inputs)
    if "bbox" in inputs:
        boxes = inputs["bbox"]
        assert boxes.shape == (*inputs["input_ids"].shape, 4)
        assert bool((boxes[..., 0] < boxes[..., 2]).all() and (boxes[..., 1] < boxes[..., 3]).all())
        assert int(boxes.min()) >= 0 and int(boxes.max()) < feed.PAGE
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", (result.reason, result.findings)
    assert verdicts.family_row(result, ("eager",))["eager"] == ("1" if family == "udop" else "0.25")


def test_a_token_model_that_runs_on_ids_alone_gets_nothing_beside_them():
    """LayoutLM takes boxes but runs without them (zeros by default): it is given ids only, as before."""
    model = families.build(families.tiny_config("layoutlm"))
    assert "bbox" not in feed.first_inputs(model, feed.Feeding())


@pytest.mark.parametrize("family, beside, shown", [("grounding-dino", {"input_ids", "attention_mask"}, "0.1768..0.25"),
                                                   ("oneformer", {"task_inputs"}, "0.25")])
def test_an_image_model_that_requires_a_text_or_task_beside_its_image_is_given_it(family, beside, shown):
    """Grounding DINO requires a text beside its image (its decoder's queries, 8 at the tiny sizes, are
    the top proposals of a 4 x 4 feature map), OneFormer a task prompt at its task length: given them,
    each is measured (0.25 at head dim 16; Grounding DINO's image-text fusion at its head dim 32, 0.1768)."""
    model = families.build(families.tiny_config(family))
    inputs = feed.first_inputs(model, feed.Feeding())
    assert beside <= set(inputs)
    if "task_inputs" in inputs:
        assert inputs["task_inputs"].shape[-1] == model.config.task_seq_len
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", (result.reason, result.findings)
    assert verdicts.family_row(result, ("eager",))["eager"] == shown


def test_a_byte_model_built_whole_is_given_patches_of_two_bytes_and_its_cross_attention_read():
    """BLT's local encoder and decoder run only inside the composite (they need the patcher's patches and the
    encoder's states): built whole (its hash embeddings shrunk) and fed bytes with patch_lengths of 2 (its own
    entropy patching always starts patches at bytes 0 and 1, so no patch query would see both designed keys),
    every BltCrossAttention (patches over bytes in the encoder, bytes over patches in the decoder) reads
    head_dim**-0.5, as the class states (self.scaling = self.head_dim**-0.5)."""
    rows = pipeline.audit_item(("family", "blt"), ("eager",), 0)
    whole = rows[0]
    assert whole.family == "blt" and whole.status == "audited" and whole.verdict == "ok", (whole.reason,
                                                                                          whole.findings)
    assert not whole.own_attention and not whole.relies_on
    model = families.build_whole("blt")
    cross = {name: module for name, module in model.named_modules() if type(module).__name__ == "BltCrossAttention"}
    read = {row.name: row for row in whole.layers if row.name in cross}
    assert set(read) == set(cross) and any(name.startswith("local_encoder") for name in read)
    for name, row in read.items():
        assert row.d_k == cross[name].head_dim
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(cross[name].scaling, rel=FACTOR_REL)
        assert cross[name].scaling == cross[name].head_dim ** -0.5


@pytest.mark.parametrize("family, factor", [
    ("longcat_flash", 0.25 * math.sqrt(2)),  # q times (hidden / q_lora_rank)^0.5 = sqrt(2) before the product
    ("dia", 1.0),  # self.scaling = 1; its decoder ids laid out per channel
    ("perceiver", 0.25), ("mimi_decoder", 0.25),  # continuous inputs (latents, embeddings) fed as they are
    ("levit", 0.25), ("hiera", 0.25), ("tvp", 0.25), ("lw_detr", None), ("omdet-turbo", None),
    ("kosmos-2.5", None), ("idefics2", None), ("step3p7", None), ("clvp", None), ("paddleocr_vl", None),
    ("efficientloftr", None), ("xclip", None), ("xcodec2", None), ("neucodec", None)])
def test_odd_inputs_and_composite_towers_are_fed_and_read_at_the_factor_their_source_states(family, factor):
    """LongCat's LoRA scale on q, Dia's channels of decoder ids, Perceiver's embeddings, a codec decoder's
    latents, LeViT's fused q/k/v with wider values, Hiera's global stage, TVP's one-image position
    embeddings (one design a pass), LW-DETR's ViT and decoder, OmDet-Turbo's class and task prompts,
    EfficientLoFTR's attention over pooled image features (2 x 2 of them at its tiny pooling), X-CLIP
    built whole on a clip of frames beside its text (one image refused), its prompt generator's cross-attention
    read at (its projection width)^-0.5, the X-Codec 2 and NeuCodec codecs fed their semantic encoder's
    features beside the waveform (a frame every encoder hop); the
    towers of Kosmos-2.5 (flattened patches), IDEFICS2 (its perceiver's context), Step 3.7, CLVP and
    PaddleOCR-VL (packed patches): every row of the family reads the factor its source states
    (head_dim^-0.5 where None)."""
    rows = [row for row in pipeline.audit_item(("family", family), ("eager",), 0) if row.status == "audited"]
    assert rows and all(row.verdict == "ok" for row in rows), [(row.family, row.findings) for row in rows]
    for result in rows:
        for layer in result.layers:
            expected = layer.d_k ** -0.5 if factor is None else factor
            assert verdicts.judged_factor(layer.backends["eager"]) == pytest.approx(expected, rel=FACTOR_REL), (
                result.family, layer.name)


def test_a_model_that_predicts_one_codebook_is_given_its_index_beside_ids_per_codebook():
    """Bark's fine acoustics model takes codebook_idx (its main_input_name; an int from n_codes_given on)
    beside input_ids of one id per Encodec codebook (batch, tokens, n_codes_total): given both, its
    non-causal BarkSelfAttention reads 1 / sqrt(head_dim) at every query, and with the semantic and
    coarse models and Encodec (no attention) it covers Bark."""
    rows = [r for name in ("bark", "encodec") for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    fine = by_name["bark.fine_acoustics_config"]
    assert fine.verdict == "ok" and fine.unread_attention == [], (fine.reason, fine.unread_attention)
    for row in fine.layers:
        path = row.backends["eager"].path
        assert all(factor == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL) for factor in path["per_query"])
    assert by_name["bark"].status == "covered", by_name["bark"].reason


@pytest.mark.skipif(__import__("importlib").util.find_spec("torchvision") is not None,
                    reason="with torchvision, SAM 3's box prompt runs")
def test_sam3s_geometry_encoder_left_unread_says_its_box_prompt_is_refused():
    """SAM 3 runs its geometry encoder only on a box prompt (has_geometry_prompts), whose features it pools
    with torchvision.ops.roi_align: without torchvision the box is refused, and each geometry encoder
    module left unread says so."""
    result = pipeline.audit_item(("family", "sam3"), ("eager",), 0)[0]
    unread = [u for u in result.unread_attention if u["mechanism"] == "not intercepted"]
    assert unread and all(u["name"].startswith("geometry_encoder.") for u in unread)
    assert all("box prompt" in u["why"] and "torchvision" in u["why"] for u in unread)


def test_evolla_s_protein_path_runs_on_protein_ids_beside_its_text_and_each_class_is_read_at_its_source_s_factor():
    """EvollaModel runs its protein encoder only on protein_input_ids with protein_attention_mask beside its text
    ids (modeling_evolla.py): given them, every class is read at what its code applies.  EvollaSaProtSelfAttention
    multiplies q by attention_head_size**-0.5 before its RoPE (positions an arange over the protein, pinned by
    the designs) and passes scaling=1.0; EvollaSequenceCompressorAttention scales q by dim_head**-0.5 over the
    protein and latents (to_kv fused); EvollaSequenceAlignerCrossAttention scales q by num_attention_heads**-0.5,
    the number of heads, not head_dim (4 heads of 16 here: 0.5, not 0.25).  Its config class is one AutoModel
    cannot resolve; it reads every class itself and relies on no tower row (SaProt's has no model type)."""
    result = pipeline.audit_item(("family", "evolla"), ("eager",), 0)[0]
    config = families.build_whole("evolla", 0).config
    protein = config.protein_encoder_config
    expected = {"EvollaSaProtSelfAttention": (protein.hidden_size // protein.num_attention_heads) ** -0.5,
                "EvollaSequenceCompressorAttention": config.resampler_dim_head ** -0.5,
                "EvollaSequenceAlignerCrossAttention": config.num_attention_heads ** -0.5}
    assert expected["EvollaSequenceAlignerCrossAttention"] != (config.hidden_size // config.num_attention_heads) ** -0.5
    suffixes = {"EvollaSaProtSelfAttention": ".attention.self", "EvollaSequenceCompressorAttention": ".0",
                "EvollaSequenceAlignerCrossAttention": ".adapter"}
    for cls, factor in expected.items():
        rows = [row for row in result.layers if row.name.endswith(suffixes[cls])
                and ("protein_encoder.model" in row.name) == (cls == "EvollaSaProtSelfAttention")]
        assert rows, cls
        for row in rows:
            assert row.backends["eager"].path["factor"] == pytest.approx(factor, rel=FACTOR_REL), row.name
            assert row.declared["path_first"] == pytest.approx(factor, rel=FACTOR_REL), row.name
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert composites.nothing_left(result) and not result.relies_on, result.unread_attention


def test_the_main_input_is_decided_once_a_model(monkeypatch):
    """Every stage asks what a model runs on; its forward's signature is read once for the whole audit."""
    from attnscale.audit import measure

    decided = []
    decide = feed.kinds.decide_main_input
    # patched where main_input reads it (the package re-exports the name; patching that copy would count nothing)
    monkeypatch.setattr(feed.kinds, "decide_main_input", lambda model: decided.append(type(model).__name__) or decide(model))
    result = measure.audit_family("llama", ("eager", "sdpa"), 0)
    assert result.verdict == "ok" and decided == ["LlamaModel"]


def test_a_prefix_lm_is_fed_its_segments_as_its_processor_gives_them(tmp_path):
    """PaliGemma's text attends both ways over its prefix, marked by token_type_ids, which its processor always
    returns. Fed ids alone, transformers' eager built a causal mask while sdpa, handed no mask, ran the layers' own
    bidirectional flag: a 'backend disagreement' of 0.17 on an input no processor makes. Fed the segments (all 0:
    a prompt with no suffix), every backend runs the same mask and the folder is ok."""
    config = families.whole_config("paligemma")
    config.save_pretrained(tmp_path / "pali")
    rows = composites.folder_rows(str(tmp_path / "pali"), ("eager", "sdpa"))
    folder = rows[0]
    assert folder.verdict == "ok", folder.findings
    assert folder.backends["sdpa"]["parity"] < verdicts.PARITY_TOL[torch.float32]
    model = families.build(config, 0)
    inputs = feed.first_inputs(model, feed.Feeding())
    assert torch.equal(inputs["token_type_ids"], torch.zeros_like(inputs["input_ids"]))
    gpt2 = families.build(families.tiny_config("gpt2"), 0)  # takes token_type_ids, attends causally: not given them
    assert "token_type_ids" not in feed.first_inputs(gpt2, feed.Feeding())
