"""The declare stage (declared.py, qk_norm.py): the factor a config and the quoted source lines declare, and the
mechanisms beside it they name.  For normalised q and k: the logit of a cosine-1 pair a config declares (its factor
times the lengths its norms give a vector times the multipliers its code applies after them), judged like the factor."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnscale.audit import declared, families, measure, qk_norm, verdicts
from attnscale.audit import measure as audit
from attnscale.audit.verdicts import family_row

from audit_helpers import FACTOR_REL, KEY_SCALE_GEMMA4, TRANSFORMERS, eager_layers


class ScaledRMSNorm(torch.nn.Module):
    def __init__(self, width: int, weight: float, offset: float = 0.0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((width,), weight))
        self.offset = offset

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * (self.offset + self.weight)


@pytest.mark.parametrize("norm, expected", [
    (ScaledRMSNorm(16, 1.0), 1.0),  # an RMSNorm at init
    (ScaledRMSNorm(16, 2.5), 2.5),  # a learned weight
    (ScaledRMSNorm(16, 0.0, offset=1.0), 1.0),  # Gemma's 1 + w, w = 0 at init
    (torch.nn.LayerNorm(16), 1.0),  # a LayerNorm keeps the mean-0 probe
    (torch.nn.RMSNorm(64), 1.0),  # a norm over every head at once (OLMoE's), as wide as its weight
])
def test_norm_gain_closed_forms(norm, expected):
    assert qk_norm.gain(norm, 16) == pytest.approx(expected, rel=1e-5)


def rows(result):
    return [row for row in result.layers if row.backends["eager"].path["form"] == "q and k normalised"]


def test_a_multiplier_after_the_norm_is_declared_and_judged():
    """Muse Spark multiplies the normalised q by qk_scale_factor: the config declares 0.25 x 4 x 4 x 5.473, the
    reading agrees within the norms' eps; at another qk_scale_factor both move together."""
    for factor in (None, 2.0):
        overrides = {} if factor is None else {"qk_scale_factor": factor}
        result = measure.audit_family("muse_spark_text", backends=("eager",), **overrides)
        expected = 0.25 * 16 * (factor or 5.4730064863875)
        assert rows(result), "no layer read as QK-norm"
        for row in rows(result):
            assert row.declared["cosine_temperature"] == pytest.approx(expected, rel=1e-4)
            assert "qk_scale_factor" in row.declared["cosine_from"]
            assert row.backends["eager"].path["cosine_temperature"] == pytest.approx(expected, rel=qk_norm.COSINE_TOL)
        assert result.verdict == "ok", result.findings
        assert "declared" in family_row(result, ("eager",))["non-linearity"]


def test_a_multiplier_the_audit_does_not_know_is_a_mismatch(monkeypatch):
    """Without its entry in the multipliers' data, Muse Spark's qk_scale_factor is a logit the config's factor does
    not declare: the verdict says so, with both numbers."""
    monkeypatch.setattr(qk_norm, "MULTIPLIERS", ())
    result = measure.audit_family("muse_spark_text", backends=("eager",))
    assert result.verdict == "mismatch"
    assert any("logit of a cosine-1 pair 21.85, the config implies 4 (factor 0.25" in finding for finding in result.findings), \
        result.findings


def test_every_multiplier_and_rounding_quotes_a_line_of_the_families_that_name_it():
    """The registry says which families apply each multiplier after a QK-norm and each key rounding; each quotes a
    line of every such family's installed source, and each is named by some family."""
    from attnscale.audit.declared import ROUNDINGS, family_source
    from attnscale.audit.known import KNOWN

    for multiplier in qk_norm.MULTIPLIERS:
        named = [entry.key for entry in KNOWN if multiplier.name in entry.multipliers]
        assert named, multiplier.name
        assert all(multiplier.quote in family_source(key) for key in named), (multiplier.name, named)
    for rounding in ROUNDINGS:
        named = [entry.key for entry in KNOWN if rounding.format in entry.roundings]
        assert named and all(rounding.quote in family_source(key) for key in named), (rounding.format, named)
    names = {m.name for m in qk_norm.MULTIPLIERS} | {r.format for r in ROUNDINGS}
    assert all(set(entry.multipliers) | set(entry.roundings) <= names for entry in KNOWN)


def test_every_rule_a_family_declares_by_name_is_in_its_source():
    """A rule a family's entry declares by name (T5's convention, stated in a comment of T5's attention, not in code;
    Phi-MoE's mscale, in its rotary rather than its attention class) is a rule of FACTOR_RULES or one a modifier
    reads, and its quoted line is in each such family's own modeling files."""
    from attnscale.audit.declared import FACTOR_RULES, RULES, family_source
    from attnscale.audit.known import KNOWN

    rule_names = {rule.name for rule in FACTOR_RULES} | {"BATCH_MSCALE"}  # BATCH_MSCALE: rope_gain reads it
    declaring = [entry for entry in KNOWN if entry.declares]
    assert {entry.key for entry in declaring} >= {"t5", "mt5", "longt5", "udop", "phimoe"}
    for entry in declaring:
        for name in entry.declares:
            assert name in rule_names and RULES[name].in_code(family_source(entry.key)), (entry.key, name)


def test_rounded_keys_are_named_and_their_path_not_judged():
    """Kolibri 1.1's sparse layers round keys to NVFP4 before the product: the cosine-1 logit there reads the
    rounding (about 3% off), named beside the row and not judged; its dense layer is judged."""
    result = measure.audit_family("kolibri1_1", backends=("eager",))
    sparse = [row for row in result.layers if "keys rounded to" in row.declared["fields"]]
    dense = [row for row in rows(result) if row not in sparse]
    assert sparse and dense
    assert result.verdict == "ok", result.findings
    assert any(abs(row.backends["eager"].path["cosine_temperature"] / row.declared["cosine_temperature"] - 1)
               > qk_norm.COSINE_TOL for row in sparse)
    assert "rounded to NVFP4" in family_row(result, ("eager",))["other mechanisms"]


def test_a_learned_multiplier_after_the_norm_is_read_from_the_layer():
    """Dory (nGPT) normalises q and k to length 1 and multiplies q by (sqk x sqk_scale)^2, head_dim at init: the
    config declares 0.25 x 1 x 1 x 16 = 4; a trained sqk (doubled on the first channel) moves both to 16."""
    for first_channel in (1.0, 2.0):
        model = measure.tiny_model("dory", 0, {})
        for module in model.modules():
            if hasattr(module, "sqk"):
                with torch.no_grad():
                    module.sqk.view(-1, module.head_dim)[:, 0] *= first_channel
        result = measure.audit_model(model, "dory", ("eager",))
        for row in rows(result):
            assert row.declared["cosine_temperature"] == pytest.approx(4.0 * first_channel ** 2, rel=1e-6)
            assert row.backends["eager"].path["cosine_temperature"] == pytest.approx(4.0 * first_channel ** 2,
                                                                                           rel=qk_norm.COSINE_TOL)
        assert rows(result) and result.verdict == "ok", result.findings


def test_every_quoted_source_line_is_in_the_installed_transformers():
    for name, rule in declared.RULES.items():
        paths = (rule.path, *rule.moved_to)
        texts = [(TRANSFORMERS / path).read_text(encoding="utf-8") for path in paths if (TRANSFORMERS / path).is_file()]
        assert any(rule.quote in text for text in texts), f"{name}: {rule.quote!r} in none of {paths}"


@pytest.mark.parametrize("weights, by_layer", [(True, True), (False, True), (False, False)])
def test_gpt2_scale_flags(weights, by_layer):
    """SCALE_ATTN_WEIGHTS, INVERSE_LAYER_IDX: head_dim^-0.5 if scale_attn_weights, / (layer_idx + 1)."""
    result = audit.audit_family("gpt2", ("eager", "sdpa"), scale_attn_weights=weights,
                                scale_attn_by_inverse_layer_idx=by_layer)
    assert result.verdict == "ok", result.findings
    for index, row in enumerate(result.layers):
        expected = (16**-0.5 if weights else 1.0) / ((index + 1) if by_layer else 1)
        for backend in ("eager", "sdpa"):  # sdpa gets the same factor since the fix of the per-layer scaling
            entry = row.backends[backend]
            assert entry.function["factor"] == pytest.approx(expected, rel=FACTOR_REL)
            assert entry.path["factor"] == pytest.approx(expected, rel=FACTOR_REL)


def test_gemma2_query_pre_attn_scalar_and_soft_cap():
    """QUERY_PRE_ATTN_SCALAR and SOFTCAP: factor 40^-0.5, logits 5 tanh(x / 5)."""
    result = audit.audit_family("gemma2", ("eager", "flex_attention"), query_pre_attn_scalar=40,
                                attn_logit_softcapping=5.0)
    assert result.verdict == "ok", result.findings
    assert result.backends["flex_attention"]["accepted"]
    for entry in eager_layers(result):
        assert entry.function["factor"] == pytest.approx(40**-0.5, rel=FACTOR_REL)
        assert entry.function["nonlinearity"] == "soft cap"
        assert entry.function["cap"] == pytest.approx(5.0, rel=0.05)
        assert entry.path["factor"] == pytest.approx(40**-0.5, rel=FACTOR_REL)
    shown = verdicts.family_row(result, ("eager",))["non-linearity"]
    assert shown.startswith("soft cap ") and float(shown.split()[-1]) == pytest.approx(5.0, rel=0.05)


def test_granite_attention_multiplier():
    result = audit.audit_family("granite", ("eager", "sdpa"), attention_multiplier=0.015)
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        for entry in row.backends.values():
            assert entry.function["factor"] == pytest.approx(0.015, rel=FACTOR_REL)


def test_deepseek_v3_yarn_mscale():
    """YARN_MSCALE_ALL_DIM and YARN_ATTENTION_FACTOR: the attention function gets
    qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2; the RoPE coordinates also carry
    attention_factor^2 = (mscale(factor, mscale) / mscale(factor, mscale_all_dim))^2."""
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.8,
            "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}
    result = audit.audit_family("deepseek_v3", ("eager", "sdpa"), rope_parameters=rope, max_position_embeddings=163840)
    mscale = lambda m: 0.1 * m * math.log(40.0) + 1.0  # noqa: E731 - YARN_GET_MSCALE
    function_factor = (8 + 8) ** -0.5 * mscale(0.8) ** 2  # qk_nope_head_dim + qk_rope_head_dim = 16
    rope_factor = function_factor * (mscale(1.0) / mscale(0.8)) ** 2
    assert result.verdict == "ok", result.findings
    for entry in eager_layers(result):
        assert entry.function["factor"] == pytest.approx(function_factor, rel=FACTOR_REL)
        assert entry.path["layout"] == "latent (MLA)"
        assert entry.path["factor"] == pytest.approx(function_factor, rel=FACTOR_REL)  # first coordinate: no RoPE
        assert entry.path["factor_last"] == pytest.approx(rope_factor, rel=FACTOR_REL)  # last: RoPE


def test_mpt_softmax_scale_is_the_factor():
    """MPT_SOFTMAX_SCALE: attn_config.softmax_scale is the factor MPT applies, a declared rule, not a mismatch."""
    result = audit.audit_family("mpt", ("eager",), attn_config={"softmax_scale": 0.05})
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        assert row.backends["eager"].path["factor"] == pytest.approx(0.05, rel=FACTOR_REL)
        assert "MPT_SOFTMAX_SCALE" in row.declared["rules"]


def test_ministral3_rope_parameters_do_not_scale_its_kernel():
    """Ministral 3's rope parameters carry mscale_all_dim, but its attention code has no
    YARN_MSCALE_ALL_DIM line (DeepSeek's): the kernel applies head_dim^-0.5 alone, and the audit
    declares just that; YaRN's attention factor (mscale / mscale_all_dim = 1 here) rides on cos, sin."""
    rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
            "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1, "beta_fast": 32, "beta_slow": 1}
    assert not declared.family_applies_text("ministral3", declared.YARN_MSCALE_ALL_DIM)
    assert declared.family_applies_text("deepseek_v3", declared.YARN_MSCALE_ALL_DIM)
    result = audit.audit_family("ministral3", ("eager", "sdpa"), rope_parameters=rope,
                                max_position_embeddings=262144)
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        head_dim = row.declared["head_dim"]
        assert row.backends["eager"].function["factor"] == pytest.approx(head_dim**-0.5, rel=FACTOR_REL)
        assert row.declared["function"] == pytest.approx(head_dim**-0.5)
        assert "YARN_MSCALE_ALL_DIM" not in row.declared["rules"]


def test_t5_applies_no_factor():
    """T5_NO_SCALING: encoder self-, decoder self- and cross-attention all apply 1."""
    result = audit.audit_family("t5", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    assert len(result.layers) == 4  # 2 encoder layers, 1 decoder layer with self and cross attention
    for row in result.layers:
        for entry in row.backends.values():
            assert entry.function["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
            assert entry.path["factor"] == pytest.approx(1.0, rel=FACTOR_REL)


@pytest.mark.parametrize("family, rule, factor_of_d_k", [
    ("gemma3n_text", "UNIT_SCALING", lambda d: 1.0),      # QK-norm; query_pre_attn_scalar is never read
    ("zamba2", "HALF_HEAD_DIM", lambda d: (d / 2) ** -0.5),
    ("inkling_text", "INVERSE_HEAD_DIM", lambda d: 1.0 / d),
])
def test_factors_set_in_the_layer_code_are_declared_as_the_code_computes_them(family, rule, factor_of_d_k):
    """The declared factor comes from the attention class's own lines (its file can hold other
    attention classes with other factors), and agrees with what eager measures."""
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        assert rule in row.declared["rules"]
        assert row.declared["function"] == pytest.approx(factor_of_d_k(row.d_k))
        assert row.backends["eager"].function["factor"] == pytest.approx(factor_of_d_k(row.d_k), rel=FACTOR_REL)


@pytest.mark.parametrize("family, rule", [("deberta", "DISENTANGLED_TERMS"), ("deberta-v2", "DISENTANGLED_COUNTED")])
def test_deberta_counts_its_attention_terms(family, rule):
    """DeBERTa divides q.k by sqrt(head_dim * scale_factor), scale_factor 1 plus its relative-position
    terms (c2p, p2c): 1/sqrt(3 * 16) here, read from the fused per-head in_proj (v1) or q/k (v2)."""
    result = audit.audit_family(family, ("eager",), relative_attention=True, pos_att_type=["c2p", "p2c"],
                                max_relative_positions=16)
    for row in result.layers:
        assert row.declared["rules"] == [rule]
        assert row.declared["function"] == pytest.approx((3 * row.d_k) ** -0.5)
        entry = row.backends["eager"]
        measured = entry.path["factor"] if entry.path else entry.function["factor"]
        # the p2c term (k times a relative-position query) rides on the key gap: within 0.5% here
        assert measured == pytest.approx((3 * row.d_k) ** -0.5, rel=5e-3)
    plain = audit.audit_family(family, ("eager",))
    assert plain.verdict == "ok", plain.findings
    assert all(row.declared["function"] == pytest.approx(row.d_k ** -0.5) for row in plain.layers)


def test_cvt_scales_by_the_whole_width():
    """WIDTH_SCALE: CvT sets self.scale = embed_dim**-0.5, all heads' width, not head_dim (its
    projections, behind a convolution, are named projection_query and projection_key)."""
    result = audit.audit_family("cvt", ("eager",))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        width = row.declared["fields"]["embed_dim"]
        assert row.declared["rules"] == ["WIDTH_SCALE"] and width == row.d_k * (width // row.d_k)
        assert row.backends["eager"].path["factor"] == pytest.approx(width**-0.5, rel=FACTOR_REL)
    assert any(row.declared["fields"]["embed_dim"] > row.d_k for row in result.layers)  # several heads


def test_an_input_multiplier_outside_the_factor_is_named():
    result = audit.audit_family("falcon_h1", ("eager",), attention_in_multiplier=0.5)
    row = verdicts.family_row(result, ("eager",))
    assert result.verdict == "ok" and row["eager"] == "0.25"  # the factor on the q and k that reach the product
    assert "attention input x0.5" in row["other mechanisms"] and "x0.25" in row["other mechanisms"]
    assert "ATTENTION_IN_MULTIPLIER" in result.layers[0].declared["rules"]
    plain = verdicts.family_row(audit.audit_family("falcon_h1", ("eager",)), ("eager",))
    assert "attention input" not in plain["other mechanisms"]  # the default 1 changes nothing


@pytest.mark.parametrize("family, overrides, factor", [
    ("mpt", {"attn_config": {"clip_qkv": 0.5, "softmax_scale": 0.05}}, 0.05),  # fused Wqkv, inline attention
    ("olmo", {"clip_qkv": 0.3}, 0.25),
])
def test_clipped_q_k_v_are_measured_inside_the_clip_and_named(family, overrides, factor):
    """A clip of q, k and v would flatten the designs (doubling q changes nothing: "q normalised");
    the designs stay inside it, so the factor is measured, and the clip is named."""
    result = audit.audit_family(family, ("eager",), **overrides)
    row = verdicts.family_row(result, ("eager",))
    assert result.verdict == "ok", result.findings
    assert float(row["eager"]) == pytest.approx(factor, rel=FACTOR_REL) and row["non-linearity"] == "linear"
    clip = overrides.get("clip_qkv") or overrides["attn_config"]["clip_qkv"]
    assert f"clipped at +-{clip:g}" in row["other mechanisms"]


def test_a_query_scaled_before_rope_is_declared():
    """ESM multiplies q by head_dim^-0.5 before RoPE and passes factor 1 to the attention function."""
    result = audit.audit_family("esm", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    assert "QUERY_PRESCALE" in result.layers[0].declared["rules"]
    assert verdicts.family_row(result, ("eager",))["eager"] == "0.25"


def test_a_config_field_the_code_never_reads_is_a_finding_with_its_source():
    """Gemma 3 stores attn_logit_softcapping and never hands it to its attention function; Gemma 2
    does (softcap=self.attn_logit_softcapping), and its cap is measured."""
    unread = audit.audit_family("gemma3_text", ("eager",), attn_logit_softcapping=50.0)
    assert unread.verdict == "mismatch"
    assert all("attn_logit_softcapping = 50 is set in the config, but the layer's code never applies it" in finding
               and "softcap=self.attn_logit_softcapping" in finding for finding in unread.findings)
    assert all(layer.declared["cap"] is None for layer in unread.layers)
    read = audit.audit_family("gemma2", ("eager",), attn_logit_softcapping=50.0)
    assert read.verdict == "ok" and verdicts.family_row(read, ("eager",))["non-linearity"] == "soft cap 50"


def test_a_cap_its_config_s_other_layers_apply_is_skipped_by_design_not_unread(tmp_path):
    """VideoPrism's pooling head passes softcap=None beside encoder layers that cap at the same vision config's
    attn_logit_softcapping: the head skips it by design (its measured cap is none, as declared), so the folder is
    ok; read alone, as Gemma 3's layers are, the head would be the config's unread field."""
    families.whole_config("videoprism").save_pretrained(tmp_path)
    result = audit.audit_folder(tmp_path, ("eager",))
    head = next(layer for layer in result.layers if layer.name.endswith(".head"))
    assert head.declared["cap"] is None and head.declared["cap_unapplied"] == 50.0
    assert "vision_model" in head.declared["cap_applied_by"]
    assert head.backends["eager"].function["cap"] is None
    assert result.verdict == "ok", result.findings
    alone = dataclasses.replace(head, declared={**head.declared, "cap_applied_by": None})
    assert any("never applies it" in finding for finding in verdicts.layer_findings(alone, "eager"))


def test_the_quoted_scaling_lines_follow_the_order_the_modules_first_appear_in():
    """PP-DocLayout v4 runs modules of two modeling files: its quoted lines come file by file, in the
    order the model's modules first use each file (they came in a set's order, which changes between
    runs)."""
    import inspect
    import sys

    model = families.build(families.tiny_config("pp_doclayout_v4"))
    files = list(dict.fromkeys(sys.modules[type(m).__module__] for m in model.modules()))
    sources = [inspect.getsource(module).splitlines() for module in files]
    lines = declared.scaling_lines(model)
    first_file = [next(i for i, source in enumerate(sources) if any(s.strip() == line for s in source)) for line in lines]
    assert len(set(first_file)) > 1 and first_file == sorted(first_file)


def test_a_learned_query_scale_per_coordinate_is_declared_from_the_layer():
    """TimesFM scales q by softplus(s_j) / (ln 2 sqrt(d)) per coordinate, s learned (ones at init),
    and calls its attention function with scaling=1.0: the declared path is that scale, read from the
    layer (softplus(1) / (4 ln 2) = 0.4737 at head dim 16), and the whole path measures it.  TimesFM
    2.5's attention function is checked at 1 the same way."""
    expected = math.log1p(math.e) / (math.log(2) * 4)
    result = audit.audit_family("timesfm", ("eager",))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        assert row.declared["rules"] == ["LEARNED_QUERY_SCALE"]
        assert row.declared["path_first"] == pytest.approx(expected, rel=1e-9)
        assert row.backends["eager"].path["factor"] == pytest.approx(expected, rel=FACTOR_REL)
    later = audit.audit_family("timesfm2_5", ("eager",))
    assert later.verdict == "ok", later.findings
    assert all(row.backends["eager"].function["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
               for row in later.layers)


def test_cosine_attention_is_judged_on_its_temperature_read_from_the_layers_learned_scale():
    """Swin V2 multiplies cos(q, k) by exp(min(logit_scale, ln 100)), logit_scale learned per head: at its
    initial ln 10 the measured temperature is 10, with logit_scale set to ln 3 it is 3, as the layer
    declares each time; the declared temperature stops at the clamp (ln 1000 declares 100)."""
    model = families.build(families.tiny_config("swinv2"))
    scales = [m.logit_scale for m in model.modules() if isinstance(getattr(m, "logit_scale", None), torch.nn.Parameter)]
    for temperature in (10.0, 3.0):
        with torch.no_grad():
            for scale in scales:
                scale.fill_(math.log(temperature))
        result = audit.audit_model(model, "swinv2", ("eager",))
        assert result.verdict == "ok", result.findings
        for row in result.layers:
            assert row.declared["cosine_temperature"] == pytest.approx(temperature, rel=1e-6)  # float32 log, exp
            assert row.backends["eager"].path["cosine_temperature"] == pytest.approx(temperature, rel=FACTOR_REL)
    with torch.no_grad():
        for scale in scales:
            scale.fill_(math.log(1000.0))
    call_module = next(m for m in model.modules() if isinstance(getattr(m, "logit_scale", None), torch.nn.Parameter))
    stated = declared.declared_for(model.config, "swinv2", 0, None, 16, declared.source_for(call_module),
                                   module=call_module)
    assert stated.cosine_temperature == pytest.approx(100.0, rel=1e-6)


def test_a_learned_per_coordinate_query_scale_and_a_key_scale_are_declared_from_the_layer():
    """Gemma 4's audio attention scales q by q_scale softplus(s_j) and k by k_scale: with s set to 1 on
    the first coordinate and -1 on the last, the whole path reads softplus(+-1) / ln 2 times
    ln(1 + e) / (ln 2 sqrt(d_k)) along each, as the layer's parameters declare."""
    model = families.build(families.tiny_config("gemma4_audio"))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "per_dim_scale", None), torch.nn.Parameter):
                module.per_dim_scale.zero_()
                module.per_dim_scale[0], module.per_dim_scale[-1] = 1.0, -1.0
    result = audit.audit_model(model, "gemma4_audio", ("eager",))
    assert result.verdict == "ok", result.findings
    softplus = lambda x: math.log1p(math.exp(x))  # noqa: E731
    for row in result.layers:
        base = row.d_k ** -0.5 * KEY_SCALE_GEMMA4 / math.log(2)
        path = row.backends["eager"].path
        assert path["factor"] == pytest.approx(base * softplus(1.0), rel=FACTOR_REL)
        assert path["factor_last"] == pytest.approx(base * softplus(-1.0), rel=FACTOR_REL)
        assert "PER_DIM_QUERY_SCALE" in row.declared["rules"] and "KEY_SCALE" in row.declared["rules"]
