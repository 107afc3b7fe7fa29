"""The compose stage: composites covered by their towers, built whole, relying on other rows (composite.py,
towers.py), and the coverage counts (pipeline.coverage)."""

from __future__ import annotations

import math

import pytest
import torch

from attnscale.audit import families, pipeline, record, verdicts
from attnscale.audit import composite as composites
from attnscale.audit import measure as audit

from audit_helpers import FACTOR_REL, assert_blocks_read_at_their_width


def test_a_composite_is_covered_only_where_every_tower_is_measured_and_it_has_no_attention_of_its_own():
    results = [audit.audit_family(name, ("eager",)) for name in ("llava", "llama", "clip_vision_model", "cohere_asr")]
    by_name = {r.family: r for r in results}
    assert by_name["llava"].own_attention == [] and [t["model_type"] for t in by_name["llava"].towers] == [
        "clip_vision_model", "llama"]
    # its decoder's own (the Parakeet encoder is its tower)
    assert {"CohereAsrSelfAttention", "CohereAsrCrossAttention"} <= set(by_name["cohere_asr"].own_attention)
    assert not any("Norm" in name for name in by_name["cohere_asr"].own_attention)
    composed = pipeline.compose(results)
    summary = pipeline.report(composed, ("eager",), 0.0)
    settled = {r.family: r for r in composed}
    assert settled["llava"].status == "covered" and settled["llava"].verdict == record.COVERED
    assert settled["llava"].reason == "every tower measured: vision_config = clip_vision_model (ok), text_config = llama (ok)"
    assert settled["cohere_asr"].status == "skipped" and "own attention classes are not audited" in settled["cohere_asr"].reason
    assert by_name["llava"].status == "skipped"  # the records composed from are left as they were
    assert pipeline.compose(results) == composed  # composing again gives the same records (the note once)
    assert settled["cohere_asr"].reason.count("own attention classes") == 1
    cover = summary["coverage"]
    assert (cover["measured"], cover["covered"], cover["unmeasured"]) == (2, 1, 1) and cover["attention_bearing"] == 4
    [alone] = pipeline.compose([audit.audit_family("llava", ("eager",))])  # its towers not audited here: it stays
    assert alone.status == "skipped" and alone.reason.startswith("a composite of other families")  # skipped


def test_measured_families_that_leave_attention_unread_are_counted_and_named():
    """A family measured while some attention module of it is "not intercepted" is counted apart in the
    coverage (measured_partly, partly_read) and named with its classes on the summary line; a module named
    by what it computes (no softmax over q.k) is not unread, nor one a row it relies on reads (a composite's
    tower, which composites.settled requires measured with nothing left)."""
    unread = [{"name": "layers.0.local", "class": "LocalAttention", "mechanism": "not intercepted"}]
    named = [{"name": "layers.0.wkv", "class": "WkvAttention", "mechanism": record.no_factor("WKV recurrence")}]
    read_by = [{**unread[0], "read_by": "vit"}]
    rows = [audit.FamilyAudit("partial", status="audited", verdict="ok", unread_attention=unread),
            audit.FamilyAudit("named", status="audited", verdict="ok", unread_attention=named),
            audit.FamilyAudit("whole", status="audited", verdict="ok", unread_attention=read_by, relies_on=["vit"]),
            audit.FamilyAudit("full", status="audited", verdict="ok")]
    cover = pipeline.coverage(rows)
    assert (cover["measured"], cover["measured_partly"], cover["partly_read"]) == (4, 1, ["partial"])
    longt5 = pipeline.audit_item(("family", "longt5"), ("eager",), 0)[0]  # its local attention computes inline
    assert record.partly_read(longt5) == any(u["mechanism"] == "not intercepted" for u in longt5.unread_attention)


def test_a_composite_covered_by_its_towers_covers_the_composites_it_is_a_tower_of():
    """SAM 3's vision model is a composite of a ViT; SAM 3 has that vision model as a tower.  Whatever
    order the rows come in, both are covered once the ViT is measured, and a tower that is missing
    leaves its composite skipped with the tower named."""
    def composite(name, *towers):
        return audit.FamilyAudit(name, status="skipped", reason="multimodal composite (...)",
                                 towers=[{"name": f"{t}_config", "model_type": t, "own": True} for t in towers])
    vit = audit.FamilyAudit("vit_like", status="audited", verdict="ok")
    outer, inner, vit = composites.covered([composite("outer", "inner", "missing"), composite("inner", "vit_like"), vit])
    assert inner.status == "covered" and inner.reason == "every tower measured: vit_like_config = vit_like (ok)"
    assert outer.status == "skipped" and outer.reason.endswith("; not measured here: missing_config")
    again, _, _ = composites.covered([composite("outer", "inner"), composite("inner", "vit_like"), vit])
    assert again.status == "covered" and again.reason == ("every tower measured: inner_config = inner "
                                                          "(covered by its towers)")


def test_a_tower_without_a_base_model_of_its_own_is_audited_as_a_row_of_its_composite():
    """ALIGN's towers (an EfficientNet-style vision tower without attention, a BERT-style text tower)
    are classes of ALIGN's own modeling file: each is built from its config class and audited as
    ``align.<tower>``; the text tower applies head_dim^-0.5 = 0.25."""
    assert families.tower_class(families.config_class("align"), families.config_class("align_text_model")).__name__ == (
        "AlignTextModel")
    rows = pipeline.audit_item(("family", "align"), ("eager",), 0)
    by_name = {r.family: r for r in rows}
    assert set(by_name) == {"align", "align.vision_config", "align.text_config"}
    text = by_name["align.text_config"]
    assert text.tower_of == "align" and text.verdict == "ok", (text.reason, text.findings)
    assert verdicts.family_row(text, ("eager",))["eager"] == "0.25"
    assert by_name["align.vision_config"].reason.startswith(families.NO_ATTENTION)
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    cover = pipeline.report(rows, ("eager",), 0.0)["coverage"]
    assert cover["families"] == 1 and cover["tower_rows"] == 2 and cover["tower_rows_measured"] == 1
    assert by_name["align"].status == "covered"  # its one tower with attention is measured
    assert by_name["align"].reason == ("every tower measured: vision_config = align.vision_config (no attention "
                                       "module), text_config = align.text_config (ok)")


def test_composite_parts_without_attention_leave_nothing_to_cover():
    """Nemotron 3 Diarization's head_config (a projection, a subpixel upsampler, a classifier) and
    streaming_config (speaker-cache settings, no module) have no model type and run no attention
    class: the composite is covered by its audio tower alone, and so are the composites above it."""
    composite = audit.audit_family("nemotron3_diarization", ("eager",))
    assert composite.status == "skipped" and not composite.own_attention
    attention = {tower["name"]: tower["attention"] for tower in composite.towers}
    assert attention == {"audio_config": True, "head_config": False, "streaming_config": False}
    tower = audit.audit_family("nemotron3_diarization_audio", ("eager",))
    composite, _ = composites.covered([composite, tower])
    assert composite.status == "covered", composite.reason
    assert "head_config: no attention, streaming_config: no attention" in composite.reason


def test_a_composite_part_with_no_model_class_and_no_attention_leaves_nothing_to_cover():
    """VibeVoice's diffusion head (vibevoice_diffusion: no model class of its own) is AdaLN-modulated MLPs
    under a timestep embedding, with no softmax in its code: no row audits it and none is needed; the
    composite is covered by its text model and its (attention-free) acoustic tokenizers."""
    import inspect

    from transformers.models.vibevoice import configuration_vibevoice, modeling_vibevoice

    head = modeling_vibevoice.VibeVoiceDiffusionHead(families.sub_config(
        configuration_vibevoice.VibeVoiceDiffusionHeadConfig, set()))
    parts = {type(module) for module in head.modules()}
    code = "".join(inspect.getsource(cls) for cls in parts if cls.__module__ == modeling_vibevoice.__name__)
    assert not any(families.is_attention_class(cls.__name__) for cls in parts)
    assert "VibeVoiceMLP" in code and "softmax" not in code and "matmul" not in code and " @ " not in code
    rows = pipeline.audit_item(("family", "vibevoice"), ("eager",), 0)
    composite = rows[0]
    assert [row.family for row in rows] == ["vibevoice"] and not composite.own_attention
    attention = {tower["name"]: tower["attention"] for tower in composite.towers}
    assert attention == {"text_config": True, "diffusion_head_config": False, "semantic_model_config": True,
                         "audio_config": True}
    towers = [r for name in ("qwen2", "vibevoice_acoustic_tokenizer_encoder", "vibevoice_acoustic_tokenizer")
              for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    composite = composites.covered([composite, *towers])[0]
    assert composite.status == "covered" and "diffusion_head_config: no attention" in composite.reason


def read_classes(family: str, rows) -> set[str]:
    """The attention classes the whole row of ``family`` reads (rebuilt to look the modules up)."""
    modules = dict(families.build_whole(family).named_modules())
    return {type(modules[row.name]).__name__ for row in rows[0].layers if row.name in modules}


@pytest.mark.parametrize("family, own", [("sam", {"SamAttention"}), ("sam2", {"Sam2Attention"}),
                                         ("kyutai_speech_to_text", {"KyutaiSpeechToTextAttention"}),
                                         ("cohere_asr", {"CohereAsrSelfAttention", "CohereAsrCrossAttention"}),
                                         ("lightglue", {"LightGlueAttention"})])
def test_a_composite_its_towers_cannot_cover_is_built_whole_and_its_own_attention_measured(family, own):
    """SAM's mask decoder (no model class of its own), Kyutai's codebook decoder and Cohere ASR's decoder
    (attention classes of the composite's own), LightGlue on an image pair: built whole with every part
    at the tiny sizes and fed a box prompt, ids per codebook, features with decoder ids, a pair of images.
    Each call's factor is d_k^-0.5, as every one of these classes states (head_dim**-0.5, or SAM's
    (internal_dim // heads)**-0.5: 16 for its self-attention, 8 where it downsamples to the image)."""
    rows = pipeline.audit_item(("family", family), ("eager",), 0)
    whole = rows[0]
    assert whole.family == family and whole.status == "audited" and whole.verdict == "ok", (whole.reason,
                                                                                             whole.findings)
    assert whole.own_attention == [] and all(not row.tower_of or row.tower_of == family for row in rows)
    assert own <= read_classes(family, rows)
    for row in whole.layers:  # SAM's vision encoder beside the intercepted calls: read from its weights
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL), (
            row.name)


@pytest.mark.parametrize("family, part, placeholders", [("aria", "multi_modal_projector.cross_attn", 4),
                                                        ("fun_asr_nano", "multi_modal_projector.layers", 32)])
def test_a_composite_is_fed_the_media_its_placeholder_tokens_take_and_its_projector_read(family, part, placeholders):
    """Aria's projector (AriaCrossAttention: 4 learned queries over the image's 16 patches through a torch
    nn.MultiheadAttention) and Fun-ASR-Nano's adaptor (FunAsrNanoAttention layers over the audio encoder's 32
    frames) run only on media merged into the ids at image_token_id / audio_token_id: built whole, the model is
    fed its tower's media and ids ending in as many placeholders as the projector outputs vectors, and every
    attention it runs is read at head_dim**-0.5 (torch's MultiheadAttention scales by (embed_dim // num_heads)**-0.5,
    embed_dim and heads the vision tower's; FunAsrNanoAttention's self.scaling = self.head_dim**-0.5)."""
    rows = pipeline.audit_item(("family", family), ("eager",), 0)
    whole = rows[0]
    assert whole.family == family and whole.status == "audited" and whole.verdict == "ok", (whole.reason,
                                                                                             whole.findings)
    assert not whole.own_attention and not whole.relies_on and not whole.unread_attention
    model = families.build_whole(family)
    assert [count for _, count, _ in composites.placeholder_media(model)] == [placeholders]
    modules = dict(model.named_modules())
    read = [row for row in whole.layers if row.name.startswith(part)]
    assert read and {row.name.split(".")[0] for row in whole.layers} == {
        "vision_tower" if family == "aria" else "audio_tower", "multi_modal_projector", "language_model"}
    for row in read:
        module = modules[row.name]
        head = (module.head_dim if hasattr(module, "head_dim") and isinstance(module.head_dim, int)
                else module.embed_dim // module.num_heads)
        assert row.d_k == head == 16
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(head ** -0.5, rel=FACTOR_REL)


@pytest.mark.parametrize("family, own", [
    ("sam2_video", {"Sam2VideoRoPEAttention", "Sam2VideoAttention"}),
    ("sam3_tracker_video", {"Sam3TrackerVideoRoPEAttention", "Sam3TrackerVideoAttention"}),
    ("edgetam_video", {"EdgeTamVideoRoPESelfAttention", "EdgeTamVideoRoPECrossAttention",
                       "EdgeTamVideoPerceiverAttention", "EdgeTamVideoAttention"})])
def test_a_video_tracker_is_run_through_a_prompted_session_and_its_memory_attention_read(family, own):
    """A video tracker's forward takes an inference session, not an image: the audit opens one of two
    frames with a box on frame 0 and runs frame 1, which attends to frame 0's memory.  Every attention
    class it runs is read (the memory attention's RoPE self- and cross-attention, EdgeTAM's perceiver,
    the mask decoder's two-way transformer), each at head_dim**-0.5 as the classes state (self.scaling =
    self.head_dim**-0.5; the memory attention's head: memory_attention_hidden_size / its heads)."""
    rows = pipeline.audit_item(("family", family), ("eager",), 0)
    whole = rows[0]
    assert whole.status == "audited" and whole.verdict == "ok", (whole.reason, whole.findings)
    assert whole.own_attention == [] and whole.relies_on == [] and whole.unread_attention == []
    assert own <= read_classes(family, rows)
    config = families.whole_config(family)
    memory_head = config.memory_attention_hidden_size // config.memory_attention_num_attention_heads
    memory_rows = [row for row in whole.layers if row.name.startswith("memory_attention.")]
    assert memory_rows and {row.d_k for row in memory_rows} == {memory_head}
    read = [row for row in whole.layers if math.isfinite(row.backends["eager"].function["factor"])]
    assert {row.name for row in read} == {row.name for row in whole.layers}  # every module read at least once
    for row in read:
        factor = row.backends["eager"].function["factor"]
        assert factor == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL), row.name


def test_a_composite_built_whole_counts_only_where_every_attention_it_runs_is_read_somewhere(monkeypatch):
    """GIT's whole pass reads its text attention; its vision tower's attention, left unread there, is
    read by the tower's own row: GIT is measured.  With its encoder's fused to_kv not taken as its k
    projection, Granite Speech's encoder is read neither by its whole pass nor by the encoder row: it
    stays unmeasured, and says which row is missing."""
    from attnscale.audit import whole_path

    git = pipeline.audit_item(("family", "git"), ("eager",), 0)
    assert git[0].status == "audited" and git[0].verdict == "ok"
    assert [row.family for row in git[1:]] == ["git.vision_config"] and record.is_measured(git[1])
    assert git[0].relies_on == ["git.vision_config"]  # kept, so the report checks it again (composites.settled)
    monkeypatch.setattr(whole_path, "KV_NAMES", tuple(name for name in whole_path.KV_NAMES if name != "to_kv"))
    speech = pipeline.audit_item(("family", "granite_speech"), ("eager",), 0)
    assert speech[0].status == "skipped"
    assert "built whole: the attention of granite_speech.encoder_config is not read" in speech[0].reason
    # a tower that is a family of its own is looked up when the audit is reported
    relying = audit.FamilyAudit("composite", status="audited", verdict="ok", relies_on=["tower"])
    tower = audit.FamilyAudit("tower", status="skipped", reason="cannot run a forward pass: ...")
    relying, _ = composites.settled([relying, tower])
    assert relying.status == "skipped" and "the attention of tower is not read" in relying.reason


@pytest.mark.parametrize("family, starts", [("rwkv", "WKV recurrence (RWKV)"), ("yoso", "LSH collision expectation"),
                                            ("swiftformer", "efficient additive attention"),
                                            ("mobilevitv2", "separable self-attention"),
                                            ("autoformer", "autocorrelation (Autoformer)")])
def test_attention_with_no_softmax_over_q_k_is_named_and_left_out_of_the_unmeasured(family, starts):
    """RWKV, YOSO, SwiftFormer, MobileViTV2 and Autoformer attend without a softmax over q.k (a recurrence,
    a hashing expectation, a learned pooling vector, a one-channel query, an FFT correlation): each is
    skipped with the mechanism its code shows, and counted apart from the unmeasured (nothing to scale)."""
    result = audit.audit_family(family, ("eager",))
    assert result.status == "skipped" and result.reason.startswith(f"{audit.NO_SOFTMAX} ({starts}")
    assert result.reason.endswith(record.NO_FACTOR + ")") and composites.nothing_left(result)
    cover = pipeline.coverage([result])
    assert cover["no_softmax"] == 1 and cover["unmeasured"] == 0 and cover["attention_bearing"] == 1


def test_composites_whose_sub_configs_are_typed_by_their_spec_or_class_alone_are_resolved():
    """Gemma 4's assistant leaves its text config unset by default; its AutoConfig spec names gemma4_text,
    whose measured row covers it.  Inkling's multimodal model builds (its vision patcher imports scipy):
    its text tower is measured and its vision and audio towers have no attention module.  Fun-ASR-Nano's
    adaptor has a config class and no model type: it is sized by its class name (FFN a quarter of the
    text width) and the composite is built whole, fed audio at its placeholder tokens, so the adaptor runs
    and is read there (nothing left to a tower row)."""
    rows = {row.family: row for item in ("gemma4_assistant", "gemma4_text", "inkling_mm_model", "inkling_text")
            for row in pipeline.audit_item(("family", item), ("eager",), 0)}
    rows = {row.family: row for row in pipeline.compose(list(rows.values()))}
    assert rows["gemma4_assistant"].status == "covered", rows["gemma4_assistant"].reason
    assert "text_config = gemma4_text" in rows["gemma4_assistant"].reason
    assert rows["inkling_mm_model"].status == "covered", rows["inkling_mm_model"].reason
    fun = pipeline.audit_item(("family", "fun_asr_nano"), ("eager",), 0)[0]
    [fun] = composites.settled([fun])
    assert fun.status == "audited" and fun.verdict == "ok" and not fun.relies_on, (fun.reason, fun.findings)
    assert any(row.name.startswith("multi_modal_projector.layers") for row in fun.layers)


def test_attention_left_unread_beside_intercepted_calls_is_read_from_its_weights_or_keeps_a_tower_uncovered():
    """SigLIP 2's pooling head (torch's nn.MultiheadAttention beside the encoder's intercepted calls) is
    read from its weights at head_dim^-0.5; a measured row that still leaves an attention module
    unread does not cover its composite."""
    result = audit.audit_family("siglip2_vision_model", ("eager",))
    head = [row for row in result.layers if row.name == "head.attention"]
    assert head and verdicts.judged_factor(head[0].backends["eager"]) == pytest.approx(0.25, rel=FACTOR_REL)
    assert result.unread_attention == []
    partial = audit.FamilyAudit("tower", status="audited", verdict="ok", layers=result.layers,
                                unread_attention=[{"name": "x", "class": "X", "mechanism": "not intercepted"}])
    assert record.is_measured(partial) and not composites.nothing_left(partial)


def test_a_hybrids_delta_rule_layers_are_named_and_leave_its_attention_layers_to_cover_the_composite():
    """GLM-5-Next's text model mixes softmax layers with gated delta-rule layers (no softmax over q.k): the
    latter are named from their code, so the measured text tower with the vision tower covers GLM-5-Next."""
    rows = [r for name in ("glm5_next", "glm5_next_text", "glm5_next_vision")
            for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    text = by_name["glm5_next_text"]
    assert text.verdict == "ok" and text.unread_attention
    assert all(u["mechanism"].startswith("gated delta rule") for u in text.unread_attention)
    assert by_name["glm5_next"].status == "covered", by_name["glm5_next"].reason


def test_a_window_attention_merger_inside_the_tiny_depth_is_read_and_its_towers_cover_their_composites():
    """MiniCPM-V 4.6/4.7 and MiniCPM-OCR run their vision tower's window-attention merger (vit_merger, a
    MiniCPM*VisionAttention over 2 x 2 windows, scaling head_dim**-0.5) after encoder layer insert_layer_id:
    set inside the tiny depth, every window's call reads 0.25, nothing is left unread, and the measured
    towers with Qwen3.5's text model cover the three composites."""
    names = ("qwen3_5_text", "minicpm_ocr_vision", "minicpmv4_7_vision", "minicpm_ocr", "minicpmv4_6", "minicpmv4_7")
    rows = [r for name in names for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    for tower in ("minicpm_ocr_vision", "minicpmv4_7_vision", "minicpmv4_6.vision_config"):
        result = by_name[tower]
        assert result.verdict == "ok" and result.unread_attention == [], (tower, result.unread_attention)
        merger = [row for row in result.layers if row.name == "vit_merger.self_attn"]
        assert len(merger) == 4  # the 4 x 4 patches in 2 x 2 windows, one call each
        for row in result.layers:
            assert row.backends["eager"].function["factor"] == pytest.approx(0.25, rel=FACTOR_REL), row.name
    for composite in ("minicpm_ocr", "minicpmv4_6", "minicpmv4_7"):
        assert by_name[composite].status == "covered", by_name[composite].reason


def test_a_tower_with_only_an_encode_is_run_through_it_and_its_attention_blocks_read():
    """Apertus 1.5's vision tokenizer has no forward (its composite calls vision_tokenizer.encode): its tower
    row runs encode (then decode, where the tokenizer has one, as Chameleon's and Emu3's rows do), and its
    VQGAN attention blocks (1 x 1 Conv2d q and k, one head over the map's positions, scaled by
    int(channels) ** (-0.5)) are read at channels^-0.5: the stage at resolution 16 (attn_resolutions)
    and the middle block, both 64 channels wide.  With its text tower (and its audio tokenizer, which has no
    attention) it covers Apertus 1.5."""
    rows = [r for name in ("apertus1p5_text", "wavtokenizer_encoder", "apertus1p5")
            for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    tower = by_name["apertus1p5.vision_config"]
    assert tower.verdict == "ok" and tower.unread_attention == [], (tower.reason, tower.unread_attention)
    model = families.build_tower("apertus1p5", "vision_config")
    assert type(model).forward is torch.nn.Module.forward and hasattr(model, "encode")  # no forward of its own
    channels = assert_blocks_read_at_their_width(tower, model, "Apertus1p5VisionTokenizerAttnBlock")
    assert set(channels.values()) == {64}
    assert by_name["apertus1p5"].status == "covered", by_name["apertus1p5"].reason


@pytest.mark.parametrize("composite, towers", [("instructblip", ("opt",)), ("instructblipvideo", ("opt",)),
                                               ("aimv2", ("aimv2_vision_model",)),
                                               ("granite_speech", ("granite", "blip_2_qformer"))])
def test_composites_whose_towers_read_every_attention_they_run_are_covered(composite, towers):
    """InstructBLIP's Q-Former runs its cross-attention only on query tokens (query_length =
    query_embeds.shape[1]): its tower row is given query embeddings beside its ids and reads that layer at
    attention_head_size^-0.5; AIMv2's vision tower reads its pooling head and Granite Speech's encoder its
    conformer: each composite is covered by its towers."""
    rows = [r for name in (composite, *towers) for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    assert by_name[composite].status == "covered", by_name[composite].reason
    qformer = by_name.get(f"{composite}.qformer_config")
    if qformer is not None:
        cross = [row for row in qformer.layers if "crossattention" in row.name]
        assert cross and not qformer.unread_attention
        for row in cross:
            assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL)


def classes_of(model, names) -> set[str]:
    """The attention classes of the modules read as ``names``, and of those holding one (SigLIP's pooling
    head holds the nn.MultiheadAttention its row reads)."""
    modules = dict(model.named_modules())
    holders = {".".join(name.split(".")[:end]) for name in names for end in range(1, name.count(".") + 2)}
    return {type(modules[name]).__name__ for name in holders
            if name in modules and families.is_attention_class(type(modules[name]).__name__)}


@pytest.mark.parametrize("composite, unread, row", [
    ("inkling2", {"Inkling2VisionAttention"}, "inkling2_vision"),
    ("granite_docling", {"GraniteDoclingVisionAttention"}, "granite_docling_vision"),
    ("omdet-turbo", {"CLIPAttention"}, "clip_text_model"),  # its language backbone: a CLIP text model
    # its vision tower lies in its encoder (a composite of its own): the innermost family, SigLIP's, is relied on
    ("t5gemma2", {"SiglipAttention", "SiglipMultiheadAttentionPoolingHead"}, "siglip_vision_model")])
def test_a_composite_audited_on_token_ids_relies_on_the_row_that_reads_its_towers_attention(composite, unread, row):
    """A composite small enough to be audited directly runs on token ids, and its vision tower never runs:
    the attention modules left unread there rely on the tower's own row, which builds the same classes
    (the classes of the installed modeling files) and reads every one of them; without that row in the
    report the composite is not measured."""
    rows = pipeline.audit_item(("family", composite), ("eager",), 0)
    result = rows[0]
    assert record.is_measured(result) and result.relies_on == [row], (result.reason, result.relies_on)
    assert {u["class"] for u in result.unread_attention if u["mechanism"] == "not intercepted"} == unread
    tower = pipeline.audit_item(("family", row), ("eager",), 0)[0]
    assert composites.nothing_left(tower), tower.unread_attention
    assert unread <= classes_of(audit.tiny_model(row, 0, {}), [layer.name for layer in tower.layers])
    assert record.is_measured(composites.settled([result, tower])[0])
    [alone] = composites.settled([pipeline.audit_item(("family", composite), ("eager",), 0)[0]])
    assert alone.status == "skipped" and f"the attention of {row} is not read" in alone.reason


@pytest.mark.parametrize("composite, d_k, names", [
    # ChameleonVQVAEEncoderAttnBlock: attn_weights * (int(channels) ** (-0.5)), 64 channels at its middle
    # (base_channels 32 x channel_multiplier 2); computed inline, read from its 1 x 1 convolutions' weights
    ("chameleon", 64, ["encoder.mid.attn_1"]),
    # Emu3VQVAEAttentionBlock: scaling=self.head_dim**-0.5, head_dim = hidden_size / heads = 16; its decoder's
    # blocks run only in decode, which the round trip calls
    ("emu3", 16, ["encoder.down_block.down.1.attn.0", "encoder.middle_block.attn_1", "decoder.middle_block.attn_1",
                  "decoder.up_block.up.1.attn.0", "decoder.up_block.up.1.attn.1"])])
def test_a_vq_image_tokenizer_with_no_forward_is_read_through_its_round_trip(composite, d_k, names):
    """Chameleon's and Emu3's VQ-VAEs define encode (and Emu3's decode), no forward; a text pass of the
    composite never runs them.  The tokenizer's row runs the image through encode, then decode where there
    is one, and reads every attention block at d_k^-0.5; the composite relies on that row."""
    rows = {row.family: row for row in pipeline.audit_item(("family", composite), ("eager",), 0)}
    result, vq = rows[composite], rows[f"{composite}.vq_config"]
    assert record.is_measured(result) and result.relies_on == [f"{composite}.vq_config"]
    assert composites.nothing_left(vq) and [layer.name for layer in vq.layers] == names
    for layer in vq.layers:
        assert layer.d_k == d_k
        assert verdicts.judged_factor(layer.backends["eager"]) == pytest.approx(d_k ** -0.5, rel=FACTOR_REL)
    assert record.is_measured(composites.settled(list(rows.values()))[0])
