"""The read stage: where the designed q and k are written (a projection's layout) and what reaches the product
(whole_path.py, attention_function.py, inline.py, measure.py): the attention function's factor, soft caps, sinks,
inline attention, QK-norm readings, RoPE pinning, and the attention modules named with what they compute.

The first cases are config folders of a shape the families' tiny defaults do not take, audited as a user's folder is."""

from __future__ import annotations

import math

import pytest
import torch

from attnscale.audit import attention_function, families, feed, pipeline, record, verdicts
from attnscale.audit import composite as composites
from attnscale.audit import measure as audit
from attnscale.audit.measure import audit_folder
from attnscale.audit.verdicts import family_row

from audit_helpers import (FACTOR_REL, KEY_SCALE_GEMMA4, TRANSFORMERS, assert_blocks_read_at_their_width,
                           capped_kernel, eager_layers)


def eager_paths(result) -> list[dict]:
    return [row.backends["eager"].path for row in result.layers]


def test_falcon_new_decoder_reads_the_grouped_fused_layout(tmp_path):
    """Falcon's new decoder architecture packs [q of each head in the group .. | k | v] per key/value group into
    one projection: the audit writes its designs there and reads 1/sqrt(head_dim) on the whole path."""
    from transformers import FalconConfig

    FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                 new_decoder_architecture=True, vocab_size=128).save_pretrained(tmp_path)
    result = audit_folder(str(tmp_path), backends=("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        for backend in ("eager", "sdpa"):
            path = row.backends[backend].path
            assert path["layout"] == "fused per key/value group [q..|k|v]"
            assert path["form"] == "linear"
            assert path["factor"] == pytest.approx(16 ** -0.5, rel=1e-5)


def olmoe_folder(folder, clip):
    from transformers import OlmoeConfig

    OlmoeConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                intermediate_size=64, vocab_size=128, num_experts=4, num_experts_per_tok=2,
                clip_qkv=clip).save_pretrained(folder)
    return str(folder)


def test_a_clip_after_qk_norm_leaves_the_designs_alone(tmp_path):
    """OLMoE normalises q and k (RMSNorm, weight 1) and then clips them: the designs are spread over every
    coordinate, so the norm leaves each at 1, inside a clip of 1.5, and the cosine-1 pair reads
    head_dim^-0.5 x |q| |k| = 0.25 x 4 x 4 = 4 (the norm's eps moves it by under 0.5% at the designs' size),
    as without a clip; a single coordinate would be normalised to 4 and cut to 1.5 (reading 0.5625)."""
    clipped = audit_folder(olmoe_folder(tmp_path / "clip", 1.5), backends=("eager",))
    unclipped = audit_folder(olmoe_folder(tmp_path / "none", None), backends=("eager",))
    for path, free in zip(eager_paths(clipped), eager_paths(unclipped)):
        assert path["form"] == "q and k normalised"
        assert path["cosine_temperature"] == pytest.approx(4.0, rel=5e-3)
        assert path["cosine_temperature"] == pytest.approx(free["cosine_temperature"], rel=5e-3)
        assert path["designed_rms"] == pytest.approx(1.0, rel=1e-3)
    assert "inside the clip" in family_row(clipped, ("eager",))["other mechanisms"]


def test_a_clip_the_designs_reach_is_named_and_not_judged(tmp_path):
    """A clip below the norm's output (0.8 < 1): every designed coordinate is cut to 0.8, the reading is the
    clip's (0.25 x 16 x 0.8^2 = 2.56), and the row says so instead of judging it."""
    result = audit_folder(olmoe_folder(tmp_path, 0.8), backends=("eager",))
    for path in eager_paths(result):
        assert path["designed_rms"] == pytest.approx(0.8, rel=1e-6)
        assert path["cosine_temperature"] == pytest.approx(0.25 * 16 * 0.8 ** 2, rel=1e-3)
    assert "at the clip, whole path not judged" in family_row(result, ("eager",))["other mechanisms"]
    assert not any("cosine" in finding for finding in result.findings)


def test_dense_designs_read_the_same_factor_as_single_coordinate_ones():
    """q.k is the same along any direction of the same length: the dense designs and the single-coordinate
    ones give one q.k per design (the closed form m x g x unit)."""
    import torch

    from attnscale.audit.whole_path import DESIGNS, head_vectors

    for dense in (False, True):
        q = head_vectors(DESIGNS, 3, 16, 0.5, "q", torch.float64, 0.25, dense)
        k = head_vectors(DESIGNS, 3, 16, 0.5, "k", torch.float64, 0.25, dense)
        products = torch.einsum("btd,bsd->bts", q, k)[:, 0, :2]
        for design, (k0, k1) in zip(DESIGNS, products.tolist()):
            assert k0 - k1 == pytest.approx(design.q_scale * 0.25 * design.gap * 0.5, abs=1e-15)
        if dense:  # every coordinate of a designed vector the same size: no coordinate stands out after a norm
            sizes = torch.cat([q, k], dim=1).abs()
            assert torch.equal(sizes, sizes.amax(dim=-1, keepdim=True).expand_as(sizes))


def test_qwen3_qk_norm():
    """q and k RMS-normalised per head before the product: the logits do not move when q or
    the key gap doubles; the attention function still applies head_dim^-0.5, so the logit of
    unit-cosine q, k is head_dim^-0.5 * head_dim = 4 (norm weights 1 at init)."""
    result = audit.audit_family("qwen3", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    for entry in eager_layers(result):
        assert entry.function["factor"] == pytest.approx(16**-0.5, rel=FACTOR_REL)
        assert entry.path["form"] == "q and k normalised"
        assert entry.path["ratio_q"] == pytest.approx(1.0, abs=0.01)
        assert entry.path["cosine_temperature"] == pytest.approx(4.0, rel=FACTOR_REL)
    assert verdicts.family_row(result, ("eager",))["non-linearity"] == "QK-norm (cosine-1 logit 3.999, declared 4)"


# Inline attention in the layouts older and vision families use.  The truth, from the installed
# source: ViTDet and SAM (windows; fused qkv on an (B, h, w, C) image), PVT (keys reduced by a
# convolution, probabilities only from the softmax), FSMT (fairseq's time-first (T, B, C)
# projections and (B * H, T, T) weights) and ProphetNet (decoder heads named num_attn_heads,
# other than the encoder's) all set self.scaling or self.scale = head_dim**-0.5.

@pytest.mark.parametrize("family", ["vitdet", "sam_vision_model", "pvt", "fsmt", "prophetnet"])
def test_inline_layouts_read_the_factor(family):
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", result.findings
    assert result.layers
    for row in result.layers:
        path = row.backends["eager"].path
        assert path["form"] == "linear"
        assert path["factor"] == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL)
    if family == "prophetnet":  # decoder heads (num_decoder_attention_heads) read as the layer has them
        assert {row.d_k for row in result.layers} == {4, 16}


def test_token_layouts():
    """How a projection output holds the designs: batch first, an image, windows, time first."""
    from attnscale.audit.whole_path import token_layout
    assert token_layout((10, 8, 64), 10) == (1, 8, False)
    assert token_layout((10, 1, 8, 64), 10) == (1, 8, False)  # latent attention's (B, 1, T, out)
    assert token_layout((10, 4, 4, 192), 10) == (1, 16, False)  # an image's h x w patches
    assert token_layout((40, 4, 64), 10) == (4, 4, False)  # 4 windows of 4 tokens a design
    assert token_layout((8, 10, 64), 10) == (1, 8, True)  # fairseq's (T, B, C)
    assert token_layout((24, 2, 64), 2) == (1, 24, True)
    assert token_layout((7, 3, 64), 10) is None
    assert token_layout((10, 64), 10) is None


def designed_rows(per_query: torch.Tensor, unit: float, rounding: float, seed: int = 0, heads: int = 2) -> torch.Tensor:
    """The log-ratio rows of a linear whole path (logit gap m g G x the query row's factor), each reading off by
    up to ``rounding`` (a float32 rounding of logits far larger than the designed gap, which differs from design
    to design)."""
    from attnscale.audit.whole_path import DESIGNS
    generator = torch.Generator().manual_seed(seed)
    gaps = torch.tensor([design.q_scale * design.gap for design in DESIGNS], dtype=torch.float64)
    clean = gaps[:, None, None] * unit * per_query[None, :, None].double()
    return clean.expand(-1, -1, heads) + rounding * (2 * torch.rand(clean.shape[0], clean.shape[1], heads,
                                                                    generator=generator, dtype=torch.float64) - 1)


@pytest.mark.parametrize("rows", [8, 24])
def test_rounding_across_query_rows_is_not_read_as_a_query_dependence(rows):
    """A fixed factor read at a tiny logit gap: its per-query factors spread by up to 3x the tolerance (float32
    rounding), and their gap-1 and gap-2 readings disagree as much, so in 200 draws none reads as "moves with the
    query index"; a temperature growing by 20% over the rows moves alike in both readings and is a dependence in each
    draw at the same rounding."""
    from attnscale.audit import whole_path
    from attnscale.audit.record import BackendLayer, LayerReading
    fixed, tempered = torch.full((rows,), 0.125), 0.125 * (1 + 0.2 * torch.arange(float(rows)) / (rows - 1))

    def read(per_query, seed):
        path = whole_path.summarize(designed_rows(per_query, 1e-3, 2e-7, seed), 1e-3, None, positions=False)
        layer = LayerReading("layers.0", 0, 16, {}, {"eager": BackendLayer({}, path)})
        return path, verdicts.dependence([layer])

    noisy = [read(fixed, seed) for seed in range(200)]
    assert max(path["query_spread"] for path, _ in noisy) > 2 * verdicts.DEPENDENCE_TOL  # "query index" before
    assert all(found.startswith("none") and path["form"] == "linear" for path, found in noisy)
    for seed in range(20):
        path, found = read(tempered, seed)
        assert found.startswith("query index") and path["form"] == "varies with the query position", path


def test_position_temperatures_are_seen():
    """Llama 4's temperature (TEMPERATURE_TUNING, floor_scale 4 in the tiny model) grows with the
    sequence index in its no-RoPE layer; Ministral 3 scales q with the position ids."""
    llama4 = verdicts.family_row(audit.audit_family("llama4_text", ("eager",)), ("eager",))
    assert "query index" in llama4["position dependence"]
    # the temperature depends on the query index alone: row i of a longer sequence has the same one
    assert "length" not in llama4["position dependence"]
    ministral = verdicts.family_row(audit.audit_family("ministral3", ("eager",)), ("eager",))
    assert "position ids" in ministral["position dependence"]


def test_callable_soft_cap_and_key_count():
    port = audit.audit_callable(capped_kernel(0.125, cap=30.0), 64)
    assert port.function["factor"] == pytest.approx(0.125, rel=FACTOR_REL)
    assert port.function["cap"] == pytest.approx(30.0, rel=0.05) and port.verdict == "ok"
    log_n = audit.audit_callable(capped_kernel(0.125, log_n=True), 64)
    assert log_n.verdict == "mismatch" and "number of keys" in log_n.findings[0]
    assert log_n.key_counts["8"] == pytest.approx(0.125 * math.log(8), rel=FACTOR_REL)


def test_kernel_cap_solver_inverts_the_tanh_difference():
    for cap in (0.7, 5.0, 50.0, 3000.0):
        difference = attention_function.tanh_difference(cap, 3.0, 0.025)
        assert attention_function.solve_cap(difference, 3.0, 0.025) == pytest.approx(cap, rel=1e-6)


def test_sink_logits_are_measured_and_a_backend_that_drops_them_is_flagged():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def plain_without_sinks(module, query, key, value, attention_mask, s_aux=None, **kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    model = audit.tiny_model("gpt_oss", 0, {})
    for number, layer in enumerate(model.layers):  # per-head sink logits, another range per layer
        with torch.no_grad():
            layer.self_attn.sinks.copy_(torch.linspace(-1.0, 2.0, layer.self_attn.sinks.numel()) + number)
    AttentionInterface.register("plain_without_sinks", plain_without_sinks)
    try:
        result = audit.audit_model(model, "gpt_oss", ("eager", "plain_without_sinks"))
    finally:
        AttentionInterface._global_mapping.pop("plain_without_sinks")
    heads = torch.linspace(-1.0, 2.0, model.config.num_attention_heads)
    for number, row in enumerate(result.layers):
        sink = row.backends["eager"].function["sink"]
        assert sink["present"] and sink["sink_logit"] == pytest.approx(float(heads.median()) + number, abs=1e-6)
        # at a causal row with one visible key and the largest sink, the key keeps 1 / (1 + e^(2 + layer))
        assert sink["min_key_mass"] == pytest.approx(1 / (1 + math.exp(2.0 + number)), rel=1e-6)
        assert not row.backends["plain_without_sinks"].function["sink"]["present"]
    assert result.verdict == "backend disagreement"
    assert any("eager gives attention mass to a sink, plain_without_sinks does not" in f for f in result.findings)
    assert verdicts.family_row(result, ("eager",))["other mechanisms"].startswith("sink logit ")


def test_a_family_without_sinks_says_none():
    result = audit.audit_family("llama", ("eager", "sdpa"))
    assert all(not row.backends[b].function["sink"]["present"] for row in result.layers for b in ("eager", "sdpa"))
    assert verdicts.family_row(result, ("eager", "sdpa"))["other mechanisms"] == "none"


def test_a_layer_whose_whole_path_cannot_be_driven_says_so_and_reads_its_own_inputs():
    """Inkling's keys pass a short convolution over positions before the product: the designed keys
    cannot be written, so nothing is claimed about the whole path (not "linear", not "none"), the
    reason is named, and QK-norm is read from the layer's own q and k (RMS-normalised per head)."""
    result = audit.audit_family("inkling_text", ("eager", "sdpa"))
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert all(layer.backends["eager"].path is None for layer in result.layers)
    assert "convolution over positions (k_sconv.conv1d)" in row["non-linearity"]
    assert row["non-linearity"].startswith("QK-norm (from the layer's own q and k)")
    assert row["position dependence"] == "not measured (no whole path read)"
    llama = verdicts.family_row(audit.audit_family("llama", ("eager", "sdpa")), ("eager", "sdpa"))
    assert (llama["non-linearity"], llama["position dependence"]) == ("linear", "none")
    assert not any(layer.inputs is not None for layer in audit.audit_family("llama", ("eager", "sdpa")).layers)


def content_biased(model_type: str, names: tuple[str, ...], value: float):
    """The family's tiny model with every learned bias of ``names`` set to ``value``."""
    model = audit.tiny_model(model_type, 0, {})
    with torch.no_grad():
        for module in model.modules():
            for name in names:
                if isinstance(getattr(module, name, None), torch.nn.Parameter):
                    getattr(module, name).fill_(value)
    return model


def test_a_learned_query_bias_cancels_in_the_whole_path():
    """Parakeet adds Transformer-XL's content bias u to q before the product
    (query_states + self.bias_u, scaled by self.scaling = head_dim**-0.5 with bias_v's position term
    added as the mask): the logit gap of a designed q = m e is factor x (m + u_e) g, whose u_e g part is
    linear in the keys alone, which the designs cancel.  With u and v at 0.5 (u_e g alone would move a
    raw read by 50%) the whole path still reads head_dim^-0.5 = 0.25 and is judged against it."""
    source = (TRANSFORMERS / "models/parakeet/modeling_parakeet.py").read_text(encoding="utf-8")
    assert "query_states_with_bias_u = query_states + self.bias_u.view(" in source
    model = content_biased("parakeet_encoder", ("bias_u", "bias_v"), 0.5)
    result = audit.audit_model(model, "parakeet_encoder", ("eager",))
    assert result.verdict == "ok", result.findings
    layer = result.layers[0]
    assert "CONTENT_BIAS" in layer.declared["rules"] and layer.declared["path_first"] == 0.25
    assert layer.backends["eager"].path["form"] == "linear"
    assert math.isclose(layer.backends["eager"].path["factor"], 0.25, rel_tol=FACTOR_REL)
    assert "bias_u, Transformer-XL's content bias" in verdicts.family_row(result, ("eager",))["other mechanisms"]


def test_xlnet_relative_attention_is_read_through_its_parameter_projections():
    """XLNet's attention applies q and k as (d_model, n_head, d_head) parameters by einsum and adds a
    content bias (q + r_w_bias).k, a position term (q + r_r_bias).k_r and a segment term, all times
    self.scale = 1 / d_head**0.5: its q and k are written through einsum and the factor on q.k read
    from its softmax, d_head^-0.5 at d_head 16 and 8, with the biases at 0.5 cancelled."""
    source = (TRANSFORMERS / "models/xlnet/modeling_xlnet.py").read_text(encoding="utf-8")
    assert "self.scale = 1 / (config.d_head**0.5)" in source
    assert 'ac = torch.einsum("ibnd,jbnd->bnij", q_head + self.r_w_bias, k_head_h)' in source
    model = content_biased("xlnet", ("r_w_bias", "r_r_bias", "r_s_bias"), 0.5)
    biased = audit.audit_model(model, "xlnet", ("eager",))
    narrow = audit.audit_family("xlnet", ("eager",), n_head=8)
    for result, d_head in ((biased, 16), (narrow, 8)):
        assert result.verdict == "ok", result.findings
        assert len(result.layers) == 2 and not result.unread_attention
        for layer in result.layers:
            path = layer.backends["eager"].path
            assert layer.d_k == d_head and path["form"] == "linear"
            assert math.isclose(path["factor"], d_head**-0.5, rel_tol=FACTOR_REL)
            assert layer.declared["path_first"] == d_head**-0.5


def test_rope_that_cannot_be_pinned_leaves_the_whole_path_unread():
    """Moonshine's audio encoder rotates q and k by frame positions it takes no position_ids for: a
    query at frame t and the designed keys at frames 0 and 1 differ by a rotation of t (the logit
    gap swung between -0.29 and 0.30 over the rows), so no whole path is claimed; the attention
    function's factor (head_dim^-0.5 at head dim 8) is still measured."""
    result = audit.audit_family("moonshine", ("eager",))
    row = verdicts.family_row(result, ("eager",))
    assert result.verdict == "ok" and float(row["eager"]) == pytest.approx(8**-0.5, rel=FACTOR_REL)
    assert all(layer.backends["eager"].path is None for layer in result.layers)
    assert "RoPE rotates q and k by positions the model does not take as position_ids" in row["non-linearity"]
    assert row["position dependence"] == "not measured (no whole path read)"


def test_conditional_detr_cross_attention_scales_by_its_doubled_head_dim():
    """Conditional DETR's decoder cross-attention concatenates content and position per head, so q
    and k have 2 x head_dim dimensions and its code sets scaling = expanded_head_dim**-0.5: the
    audit measures (2 head_dim)^-0.5 there and head_dim^-0.5 in every other layer."""
    import inspect

    from transformers.models.conditional_detr import modeling_conditional_detr as source

    assert "self.scaling = expanded_head_dim**-0.5" in inspect.getsource(source)
    head_dim = families.TINY["hidden_size"] // families.TINY["encoder_attention_heads"]
    factors = {layer.name: layer.backends["eager"].function["factor"]
               for layer in audit.audit_family("conditional_detr", backends=("eager",)).layers}
    cross = [name for name in factors if name.endswith("encoder_attn")]
    assert cross and all(abs(factors[name] - (2 * head_dim) ** -0.5) < 1e-6 for name in cross)
    assert all(abs(factor - head_dim**-0.5) < 1e-6 for name, factor in factors.items() if name not in cross)


def test_attention_modules_no_row_reads_are_named_with_what_they_compute():
    """Deformable DETR's encoder and cross-attention are deformable (sampling_offsets and
    attention_weights, linear maps of the query, in its modeling file): named as such, with no
    factor claimed; its decoder self-attention is measured.  A plain model leaves nothing unread."""
    import inspect

    from transformers.models.deformable_detr import modeling_deformable_detr as source

    assert "self.sampling_offsets = nn.Linear" in inspect.getsource(source)
    result = audit.audit_family("deformable_detr", backends=("eager",))
    unread = result.unread_attention
    assert unread and all(module["mechanism"] == audit.DEFORMABLE for module in unread)
    assert {module["class"] for module in unread} == {"DeformableDetrMultiscaleDeformableAttention"}
    assert [layer.name for layer in result.layers] == ["decoder.layers.0.self_attn"]
    row = verdicts.family_row(result, ("eager",))
    assert row["verdict"] == "ok" and row["other mechanisms"].startswith("deformable attention (")
    assert audit.audit_family("bert", backends=("eager",)).unread_attention == []


@pytest.mark.parametrize("family, class_name, starts", [
    ("autoformer", "AutoformerAttention", "autocorrelation (Autoformer)"),
    ("informer", "InformerProbSparseAttention", "ProbSparse attention (Informer)")])
def test_time_series_attention_with_no_factor_to_read_is_named_from_its_code(family, class_name, starts):
    """Autoformer's attention correlates q and k by FFT (``torch.fft.rfft(query_states`` in its
    class) and Informer's ProbSparse attention ranks queries on keys drawn at random
    (``sparsity_measurement``): neither has softmax rows over q.k to read, so each is named with what
    it computes, and no factor is claimed for them."""
    result = audit.audit_family(family, backends=("eager",))
    named = [module for module in result.unread_attention if module["class"] == class_name]
    assert named and all(module["mechanism"].startswith(starts) for module in named)
    assert all(row.name not in {module["name"] for module in named} for row in result.layers)


def test_a_part_that_numbers_its_own_positions_leaves_its_whole_path_unread():
    """BLT's byte encoder and decoder rotate q and k by the position_ids the model is given, so the designs pin
    them and the whole path reads head_dim^-0.5; its global transformer numbers its patches itself
    (global_position_ids = arange), so its rotary embedding sees positions varying over the tokens in a designed
    pass: its whole path is left unread with the reason, not reported as a factor varying with the query."""
    result = pipeline.audit_item(("family", "blt"), ("eager",), 0)[0]
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        path = row.backends["eager"].path
        if row.name.startswith("global_transformer."):
            assert path is None and row.path_missing == audit.ROTARY_UNPINNED, row.name
        else:
            assert path["form"] == "linear" and path["factor"] == pytest.approx(row.d_k ** -0.5, rel=FACTOR_REL)


@pytest.mark.parametrize("family, factor", [("mobilevit", None), ("maskformer-swin", 0.25), ("seggpt", 0.25),
                                            ("sew-d", (16 * 3) ** -0.5), ("roformer", 0.25)])
def test_inline_attention_with_terms_beside_q_k_is_read_at_the_factor_its_source_states(family, factor):
    """MobileViT (36^-0.5 on its 36-wide heads: more than one patch a stage at 128 x 128), MaskFormer's Swin
    (read from its softmaxes: asking for its weights fails inside transformers), SegGPT (decomposed
    relative positions: a term linear in q alone, cancelled by q doubled at gap 0), SEW-D (DeBERTa's c2p
    and p2c, 1/sqrt(3 d): the keys' own term read at q = 0), RoFormer (RoPE by the token index: one factor
    along the last coordinate, whose pair turns slowest)."""
    result = audit.audit_family(family, ("eager",))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    for row in result.layers:
        expected = factor if factor is not None else row.d_k ** -0.5
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(expected, rel=FACTOR_REL)


@pytest.mark.parametrize("family, module_class, starts", [
    ("minimax", "MiniMaxLightningAttention", "lightning attention (MiniMax)"),
    ("patchtsmixer", "PatchTSMixerGatedAttention", "gated attention (PatchTSMixer)"),
])
def test_attention_beside_the_measured_with_no_softmax_over_q_k_is_named(family, module_class, starts):
    """MiniMax's lightning layers multiply q.k by a decay and keep a k^T v state, no softmax; PatchTSMixer's
    gating block softmaxes a linear map of each token over its features (modeling_minimax.py,
    modeling_patchtsmixer.py): named with no factor beside the measured softmax attention."""
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok" and result.layers
    unread = [u for u in result.unread_attention if u["class"] == module_class]
    assert unread and all(u["mechanism"].startswith(starts) and record.kind_of(u) == record.MechanismKind.NO_FACTOR
                          for u in unread)
    assert composites.nothing_left(result), result.unread_attention


@pytest.mark.parametrize("family", ["grounding-dino", "mm-grounding-dino"])
def test_grounding_dino_s_image_text_fusion_is_read_at_its_head_dim(family):
    """GroundingDinoBiMultiHeadAttention scales vision_proj(image) by head_dim**-0.5, head_dim =
    (encoder_ffn_dim // 2) / (encoder_attention_heads // 2), and softmaxes its product with text_proj(text)
    over the text (and, transposed, over the image): read from its weights at that factor, the family
    leaves nothing unread (its deformable attention has no q.k)."""
    result = audit.audit_family(family, ("eager",))
    config = families.tiny_config(family)
    head_dim = (config.encoder_ffn_dim // 2) // (config.encoder_attention_heads // 2)
    fusion = [row for row in result.layers if row.name.endswith("fusion_layer.attn")]
    assert fusion and all(row.d_k == head_dim for row in fusion)
    for row in fusion:
        assert row.backends["eager"].path["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert result.verdict == "ok" and composites.nothing_left(result), result.unread_attention


def test_dab_detr_s_decoder_attention_is_read_where_its_q_and_k_are_handed_in():
    """DabDetrAttention takes q and k projected (content plus position projections; in cross-attention each
    head's q and k concatenated with a sine or position part, embed_dim = 2 * hidden_size) and scales q by
    attention_head_dim**-0.5, attention_head_dim = embed_dim / decoder_attention_heads
    (modeling_dab_detr.py): both decoder attentions read at that factor, nothing left unread."""
    result = audit.audit_family("dab-detr", ("eager",))
    config = families.tiny_config("dab-detr")
    widths = {"self_attn": config.hidden_size, "cross_attn": 2 * config.hidden_size}
    for part, width in widths.items():
        rows = [row for row in result.layers if row.name.startswith("decoder.") and f".{part}." in row.name]
        head_dim = width // config.decoder_attention_heads
        assert rows and all(row.d_k == head_dim for row in rows), part
        for row in rows:
            assert row.backends["eager"].path["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert result.verdict == "ok" and composites.nothing_left(result), result.unread_attention


def test_longt5_s_local_attention_is_read_across_its_blocks():
    """LongT5LocalAttention splits the tokens into blocks of local_radius + 1 and scores each block's queries
    against the block before, its own and the next, einsum(q, k) with no scaling (T5's), keys at a distance
    over local_radius masked (modeling_longt5.py): unblocked, read at factor 1, for the queries that see the
    designed keys 0 and 1 (those within local_radius of key 0), and nothing left unread."""
    radius = 3  # blocks of 4: the designs' keys lie in block 0, seen from block 1's first queries too
    result = audit.audit_family("longt5", ("eager",), local_radius=radius)
    local = [row for row in result.layers if row.name.endswith("LocalSelfAttention")]
    assert local
    for row in local:
        path = row.backends["eager"].path
        assert path["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
        seen = path["per_query"][:radius + 1]
        assert all(value == pytest.approx(1.0, rel=FACTOR_REL) for value in seen)
        assert all(math.isnan(value) for value in path["per_query"][radius + 1:])  # key 0 out of their reach
    assert result.verdict == "ok" and composites.nothing_left(result), result.unread_attention


def test_prophetnet_s_ngram_self_attention_is_read_in_its_main_and_predict_streams():
    """ProphetNetNgramSelfAttention projects q over its 1 + ngram streams, divides it by head_dim**0.5, then
    chunks it: the main stream attends over itself, each predict stream over the main stream and itself
    (modeling_prophetnet.py).  Laid back at their keys, every stream's queries read head_dim**-0.5."""
    result = audit.audit_family("prophetnet", ("eager",))
    config = families.tiny_config("prophetnet")
    head_dim = config.hidden_size // config.num_decoder_attention_heads
    rows = [row for row in result.layers if row.name.startswith("decoder.") and row.name.endswith("self_attn")]
    assert rows
    for row in rows:
        assert row.d_k == head_dim
        per_query = row.backends["eager"].path["per_query"]
        assert len(per_query) == (1 + config.ngram) * feed.TOKENS
        streams = [per_query[start:start + feed.TOKENS] for start in range(0, len(per_query), feed.TOKENS)]
        for stream in streams:  # each stream has queries that see the designed keys, each at the factor
            seen = [value for value in stream if not math.isnan(value)]
            assert seen and all(value == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL) for value in seen)
    assert result.verdict == "ok" and composites.nothing_left(result), result.unread_attention


def test_a_mechanism_with_a_factor_the_audit_cannot_run_stays_unmeasured_and_is_named():
    """MRA computes exp(q.k / sqrt(head_dim)) only in its CUDA kernel: unmeasured here, with what its code
    computes (and that heads narrower than 32 are padded to 32 before head_dim is read)."""
    result = audit.audit_family("mra", ("eager",))
    assert result.verdict == "not measured" and not composites.nothing_left(result)
    assert any("multi-resolution attention (MRA)" in f and "sqrt(32)" in f for f in result.findings)


@pytest.mark.parametrize("family, factor", [
    ("wavlm", 0.25),  # torch's multi-head attention function, its in-projections read as q and k
    ("squeezebert", 0.25), ("wavtokenizer", 0.125),  # 1 x 1 Conv1d projections, (B, C, T) outputs
    ("gemma3n_audio", 8 ** -0.5),  # chunked local attention: a 5-D softmax unfolded to rows
    ("gemma4_audio", 0.25 * KEY_SCALE_GEMMA4),  # the same, and k scaled by ln(1 + e) / ln 2
    ("funnel", 0.25),  # q_head / k_head; its position terms and content bias cancel between designs
    ("longformer", 0.25)])  # banded (B, T, H, 2w + 1) probabilities unfolded to rows
def test_inline_attention_of_other_shapes_is_read_at_the_factor_its_source_states(family, factor):
    result = pipeline.audit_item(("family", family), ("eager",), 0)[0]
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    for row in result.layers:
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(factor, rel=FACTOR_REL), row.name


def test_alike_vectors_say_nothing_about_qk_norm():
    """Equal norms over tokens mean QK-norm only where the tokens' vectors differ: a deep layer of a tiny
    random model can hand every token nearly the same q (EfficientLoFTR's pooled features), whose norms
    are then equal whatever the layer does.  Unit vectors in distinct directions are read as normalised."""
    from types import SimpleNamespace

    generator = torch.Generator().manual_seed(0)
    distinct = torch.nn.functional.normalize(torch.randn(1, 2, 6, 16, generator=generator), dim=-1)
    alike = torch.randn(1, 2, 1, 16, generator=generator).repeat(1, 1, 6, 1)
    alike = alike + 1e-5 * torch.randn(alike.shape, generator=generator)
    assert audit.input_norms(SimpleNamespace(query=distinct, key=distinct))["normalised"] == ["q", "k"]
    assert audit.input_norms(SimpleNamespace(query=alike, key=distinct))["normalised"] == ["k"]
    assert audit.input_norms(SimpleNamespace(query=alike, key=alike))["normalised"] == []


def test_a_sam_encoder_inside_a_larger_vision_tower_is_read_at_its_own_head_width():
    """DeepSeek-OCR 2's vision tower runs a SAM encoder (fused qkv, decomposed relative positions, its
    scale head_dim^-0.5 with head_dim = its own hidden / heads) before an intercepted encoder whose
    config holds no hidden size: the SAM layers' head width is read off their fused projection
    (3 x heads x 16 wide), and the whole path reads 16^-0.5 there, as the source states."""
    rows = pipeline.audit_item(("family", "deepseek_ocr2"), ("eager",), 0)
    vision = next(row for row in rows if row.family == "deepseek_ocr2.vision_config")
    assert composites.nothing_left(vision), vision.unread_attention
    sam = [layer for layer in vision.layers if layer.name.startswith("sam_encoder.")]
    assert sam and all(layer.d_k == 16 for layer in sam)
    for layer in sam:
        assert layer.backends["eager"].path["factor"] == pytest.approx(16 ** -0.5, rel=FACTOR_REL)


def test_a_softmax_over_the_queries_is_read_with_q_and_k_swapped_and_its_weights_transposed():
    """GroupViT's assignment of image tokens to groups (GroupViTAssignAttention) takes one head of
    q.k times self.scale = config.hidden_size**-0.5 and softmaxes it over the query axis (dim=-2, the
    groups); the hard assignment is its argmax, the soft one is returned as its attentions.  Read with
    the roles swapped, both stages read hidden_size^-0.5 (64^-0.5 at the tiny width); a scale set on
    the module is what is read, and the tower then covers GroupViT."""
    model = families.build_tower("groupvit", "vision_config")
    result = audit.audit_model(model, "groupvit.vision_config", ("eager",), model_type="groupvit_vision_model")
    assert result.verdict == "ok" and result.unread_attention == [], result.unread_attention
    assign = [row for row in result.layers if row.name.endswith("downsample.assign")]
    assert len(assign) == 2
    for row in assign:
        assert row.d_k == model.config.hidden_size
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(model.config.hidden_size ** -0.5,
                                                                                rel=FACTOR_REL)
    for module in model.modules():
        if type(module).__name__ == "GroupViTAssignAttention":
            module.scale = 0.3
    changed = audit.audit_model(model, "groupvit.vision_config", ("eager",), model_type="groupvit_vision_model")
    for row in changed.layers:
        if row.name.endswith("downsample.assign"):
            assert row.backends["eager"].path["factor"] == pytest.approx(0.3, rel=FACTOR_REL)
    rows = pipeline.audit_item(("family", "groupvit"), ("eager",), 0)
    rows = pipeline.compose(rows)
    assert rows[0].status == "covered", rows[0].reason


def test_attention_with_1x1_conv2d_projections_is_read_over_the_maps_positions():
    """Janus's VQ-VAE attention blocks (JanusVQVAEAttnBlock) project q, k and v by 1 x 1 Conv2d and
    attend over the map's H x W positions with one head, scaled by int(channels) ** (-0.5): every block
    of the encoder and decoder reads in_channels^-0.5, and with its text and vision towers the VQ row
    covers Janus."""
    rows = [r for name in ("llama", "janus") for r in pipeline.audit_item(("family", name), ("eager",), 0)]
    rows = pipeline.compose(rows)
    by_name = {r.family: r for r in rows}
    vq = by_name["janus.vq_config"]
    assert vq.verdict == "ok" and vq.unread_attention == [], vq.unread_attention
    assert_blocks_read_at_their_width(vq, families.build_tower("janus", "vq_config"), "JanusVQVAEAttnBlock")
    assert by_name["janus"].status == "covered", by_name["janus"].reason


@pytest.mark.parametrize("family, tower, class_name, call", [
    ("aimv2_vision_model", None, "Aimv2AttentionPoolingHead", "F.scaled_dot_product_attention(query, key, value)"),
    ("granite_speech", "encoder_config", "GraniteSpeechConformerAttention", "scale=self.scale"),
    ("granite_speech_plus", "encoder_config", "GraniteSpeechPlusConformerAttention", "scale=self.scale")])
def test_attention_that_calls_scaled_dot_product_attention_itself_is_read_at_the_scale_it_passes(
        family, tower, class_name, call):
    """AIMv2's pooling head (a learned cls query, keys from k_proj) calls F.scaled_dot_product_attention
    with no scale: 1 / sqrt(E), E = hidden / heads; Granite Speech's conformer (to_q, a fused to_kv, a
    Shaw relative-position term added as the mask) passes scale = dim_head^-0.5.  The calls are read
    from their recomputed probabilities at those factors, and no attention module is left unread."""
    from attnscale.audit import declared as declared_rules

    if tower is None:
        result = audit.audit_family(family, ("eager",))
    else:
        cls = families.config_class(family)
        spec = next(t for t in families.tower_types(cls, dict(cls.sub_configs)) if t["name"] == tower)
        result = composites.audit_tower(family, spec, ("eager",))
    model = families.build_tower(family, tower, 0) if tower else families.build(families.tiny_config(family))
    module = next(m for m in model.modules() if type(m).__name__ == class_name)
    assert call in declared_rules.source_for(module)
    config = model.config
    expected = config.dim_head ** -0.5 if tower else (config.hidden_size // config.num_attention_heads) ** -0.5
    rows = [row for row in result.layers if type(model.get_submodule(row.name)).__name__ == class_name]
    assert result.verdict == "ok" and rows and result.unread_attention == [], (result.findings, result.unread_attention)
    for row in rows:
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(expected, rel=FACTOR_REL)


def test_a_scale_passed_to_scaled_dot_product_attention_is_the_factor_read():
    """Granite Speech's conformer passes its own ``scale`` to F.scaled_dot_product_attention (and scales
    its relative-position term by it): set to 0.3, the whole path reads 0.3, not 1 / sqrt(E)."""
    model = families.build_tower("granite_speech", "encoder_config", 0)
    for module in model.modules():
        if type(module).__name__ == "GraniteSpeechConformerAttention":
            module.scale = 0.3
    result = audit.audit_model(model, "granite_speech_encoder", ("eager",))
    assert result.layers and result.verdict == "mismatch", result.findings
    for row in result.layers:
        assert verdicts.judged_factor(row.backends["eager"]) == pytest.approx(0.3, rel=FACTOR_REL)


def test_direct_scaled_dot_product_attention_probabilities_are_recorded_only_where_they_reproduce_the_call():
    """The probabilities recomputed from a call's arguments (a float mask, a causal mask, GQA) give back
    its output; the call's output is left as the function computed it."""
    from attnscale.audit import inline

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=generator) for _ in range(3))
    bias = torch.randn(2, 4, 5, 5, generator=generator)
    for arguments in ({"attn_mask": bias, "scale": 0.3}, {"is_causal": True}, {"enable_gqa": True}):
        key, value = (k[:, :2], v[:, :2]) if arguments.get("enable_gqa") else (k, v)
        full = {**inline.SDPA_DEFAULTS, "query": q, "key": key, "value": value, **arguments}
        output = torch.nn.functional.scaled_dot_product_attention(q, key, value, **arguments)
        assert inline.reproduces(inline.sdpa_weights(full), full, output)
    wrong = {**inline.SDPA_DEFAULTS, "query": q, "key": k, "value": v, "scale": 0.5}
    assert not inline.reproduces(inline.sdpa_weights(wrong), wrong, torch.nn.functional.scaled_dot_product_attention(q, k, v))


def test_inkling2_loops_message_attention_runs_in_its_second_pass_and_is_read():
    """Inkling2LoopMessageAttentionResidual runs only from the second pass over the looped layers (6 to 18
    by default): with the loop inside the tiny depth, its learned queries attend over the previous pass's
    block states at scaling=hidden_size**-0.5, as its forward states."""
    result = audit.audit_family("inkling2_loop_text", ("eager",))
    messages = [row for row in result.layers if row.name == "message_input"]
    hidden = families.tiny_config("inkling2_loop_text").hidden_size
    assert messages and result.unread_attention == [] and record.is_measured(result)
    for row in messages:
        assert row.d_k == hidden
        assert row.backends["eager"].function["factor"] == pytest.approx(hidden ** -0.5, rel=FACTOR_REL)


def test_pegasus_x_s_global_local_attention_is_read_in_its_blocks_beside_the_global_keys():
    """PegasusXGlobalLocalAttention scales q_proj(tokens) by head_dim**-0.5 and softmaxes each block of block_size
    queries over [the global tokens' keys | its own block's keys] (modeling_pegasus_x.py): laid back at their keys
    (the global columns after them), read at head_dim**-0.5 for the queries of the block holding the designed keys,
    the other blocks' queries not seeing them.  A staggered layer pads block_size // 2 tokens before its own, so
    its first projected tokens are padding: it stays named unread, not read at a factor it does not show."""
    result = audit.audit_family("pegasus_x", ("eager",))
    config = families.tiny_config("pegasus_x")
    head_dim = config.d_model // config.encoder_attention_heads
    block = config.block_size
    rows = [row for row in result.layers if row.name.startswith("encoder.")]
    assert [row.name for row in rows] == ["encoder.layers.0.self_attn"]
    path = rows[0].backends["eager"].path
    assert path["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert all(value == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL) for value in path["per_query"][:block])
    assert all(math.isnan(value) for value in path["per_query"][block:])  # blocks without keys 0 and 1
    assert [u["name"] for u in result.unread_attention] == ["encoder.layers.1.self_attn"]  # staggered
    assert result.verdict == "ok", result.findings
