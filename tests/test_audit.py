"""The scale audit: the factors the installed transformers source states are recovered (to
0.1%), soft caps (to 5%), QK-norm and position temperatures are recognised, a backend that
drops the factor is flagged, every verdict is reachable, and the CLI and the lab behave."""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from attnscale.audit import attention_function, compose, composite_rows, declared, families, feed, pipeline, record, verdicts
from attnscale.audit import measure as audit
from attnscale.lab import audit as lab

TRANSFORMERS = Path(__import__("transformers").__file__).parent
FACTOR_REL = 1e-3  # "to 0.1%"


def eager_layers(result):
    return [row["backends"]["eager"] for row in result.layers]


def test_every_quoted_source_line_is_in_the_installed_transformers():
    for name, rule in declared.RULES.items():
        paths = (rule.path, *rule.moved_to)
        texts = [(TRANSFORMERS / path).read_text(encoding="utf-8") for path in paths if (TRANSFORMERS / path).is_file()]
        assert any(rule.quote in text for text in texts), f"{name}: {rule.quote!r} in none of {paths}"


# ---------------------------------------------------------------------------------------
# Families whose factor the source states (declared.py quotes each line).

@pytest.mark.parametrize("weights, by_layer", [(True, True), (False, True), (False, False)])
def test_gpt2_scale_flags(weights, by_layer):
    """SCALE_ATTN_WEIGHTS, INVERSE_LAYER_IDX: head_dim^-0.5 if scale_attn_weights, / (layer_idx + 1)."""
    result = audit.audit_family("gpt2", ("eager", "sdpa"), scale_attn_weights=weights,
                                scale_attn_by_inverse_layer_idx=by_layer)
    assert result.verdict == "ok", result.findings
    for index, row in enumerate(result.layers):
        expected = (16**-0.5 if weights else 1.0) / ((index + 1) if by_layer else 1)
        for backend in ("eager", "sdpa"):  # sdpa gets the same factor since the fix of the per-layer scaling
            entry = row["backends"][backend]
            assert entry["function"]["factor"] == pytest.approx(expected, rel=FACTOR_REL)
            assert entry["path"]["factor"] == pytest.approx(expected, rel=FACTOR_REL)


def test_gemma2_query_pre_attn_scalar_and_soft_cap():
    """QUERY_PRE_ATTN_SCALAR and SOFTCAP: factor 40^-0.5, logits 5 tanh(x / 5)."""
    result = audit.audit_family("gemma2", ("eager", "flex_attention"), query_pre_attn_scalar=40,
                                attn_logit_softcapping=5.0)
    assert result.verdict == "ok", result.findings
    assert result.backends["flex_attention"]["accepted"]
    for entry in eager_layers(result):
        assert entry["function"]["factor"] == pytest.approx(40**-0.5, rel=FACTOR_REL)
        assert entry["function"]["nonlinearity"] == "soft cap"
        assert entry["function"]["cap"] == pytest.approx(5.0, rel=0.05)
        assert entry["path"]["factor"] == pytest.approx(40**-0.5, rel=FACTOR_REL)
    shown = verdicts.family_row(result, ("eager",))["non-linearity"]
    assert shown.startswith("soft cap ") and float(shown.split()[-1]) == pytest.approx(5.0, rel=0.05)


def test_granite_attention_multiplier():
    result = audit.audit_family("granite", ("eager", "sdpa"), attention_multiplier=0.015)
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        for entry in row["backends"].values():
            assert entry["function"]["factor"] == pytest.approx(0.015, rel=FACTOR_REL)


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
        assert entry["function"]["factor"] == pytest.approx(function_factor, rel=FACTOR_REL)
        assert entry["path"]["layout"] == "latent (MLA)"
        assert entry["path"]["factor"] == pytest.approx(function_factor, rel=FACTOR_REL)  # first coordinate: no RoPE
        assert entry["path"]["factor_last"] == pytest.approx(rope_factor, rel=FACTOR_REL)  # last: RoPE


def test_mpt_softmax_scale_is_the_factor():
    """MPT_SOFTMAX_SCALE: attn_config.softmax_scale is the factor MPT applies, a declared rule, not a mismatch."""
    result = audit.audit_family("mpt", ("eager",), attn_config={"softmax_scale": 0.05})
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(0.05, rel=FACTOR_REL)
        assert "MPT_SOFTMAX_SCALE" in row["declared"]["rules"]


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
        head_dim = row["declared"]["head_dim"]
        assert row["backends"]["eager"]["function"]["factor"] == pytest.approx(head_dim**-0.5, rel=FACTOR_REL)
        assert row["declared"]["function"] == pytest.approx(head_dim**-0.5)
        assert "YARN_MSCALE_ALL_DIM" not in row["declared"]["rules"]


def test_qwen3_qk_norm():
    """q and k RMS-normalised per head before the product: the logits do not move when q or
    the key gap doubles; the attention function still applies head_dim^-0.5, so the logit of
    unit-cosine q, k is head_dim^-0.5 * head_dim = 4 (norm weights 1 at init)."""
    result = audit.audit_family("qwen3", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    for entry in eager_layers(result):
        assert entry["function"]["factor"] == pytest.approx(16**-0.5, rel=FACTOR_REL)
        assert entry["path"]["form"] == "q and k normalised"
        assert entry["path"]["ratio_q"] == pytest.approx(1.0, abs=0.01)
        assert entry["path"]["cosine_temperature"] == pytest.approx(4.0, rel=FACTOR_REL)
    assert verdicts.family_row(result, ("eager",))["non-linearity"] == "QK-norm (cosine-1 logit 3.999, declared 4)"


def test_t5_applies_no_factor():
    """T5_NO_SCALING: encoder self-, decoder self- and cross-attention all apply 1."""
    result = audit.audit_family("t5", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    assert len(result.layers) == 4  # 2 encoder layers, 1 decoder layer with self and cross attention
    for row in result.layers:
        for entry in row["backends"].values():
            assert entry["function"]["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
            assert entry["path"]["factor"] == pytest.approx(1.0, rel=FACTOR_REL)


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
        assert rule in row["declared"]["rules"]
        assert row["declared"]["function"] == pytest.approx(factor_of_d_k(row["d_k"]))
        assert row["backends"]["eager"]["function"]["factor"] == pytest.approx(factor_of_d_k(row["d_k"]), rel=FACTOR_REL)


def test_gpt_neo_applies_no_factor_and_is_a_mismatch():
    """GPT-Neo computes attention inline, with no factor: read from its attention weights."""
    result = audit.audit_family("gpt_neo", ("eager",))
    assert result.verdict == "mismatch"
    for entry in eager_layers(result):
        assert entry["path"]["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
    assert any("config implies 0.25" in finding for finding in result.findings)


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
        path = row["backends"]["eager"]["path"]
        assert path["form"] == "linear"
        assert path["factor"] == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL)
    if family == "prophetnet":  # decoder heads (num_decoder_attention_heads) read as the layer has them
        assert {row["d_k"] for row in result.layers} == {4, 16}


@pytest.mark.parametrize("family, rule", [("deberta", "DISENTANGLED_TERMS"), ("deberta-v2", "DISENTANGLED_COUNTED")])
def test_deberta_counts_its_attention_terms(family, rule):
    """DeBERTa divides q.k by sqrt(head_dim * scale_factor), scale_factor 1 plus its relative-position
    terms (c2p, p2c): 1/sqrt(3 * 16) here, read from the fused per-head in_proj (v1) or q/k (v2)."""
    result = audit.audit_family(family, ("eager",), relative_attention=True, pos_att_type=["c2p", "p2c"],
                                max_relative_positions=16)
    for row in result.layers:
        assert row["declared"]["rules"] == [rule]
        assert row["declared"]["function"] == pytest.approx((3 * row["d_k"]) ** -0.5)
        entry = row["backends"]["eager"]
        measured = entry["path"]["factor"] if entry.get("path") else entry["function"]["factor"]
        # the p2c term (k times a relative-position query) rides on the key gap: within 0.5% here
        assert measured == pytest.approx((3 * row["d_k"]) ** -0.5, rel=5e-3)
    plain = audit.audit_family(family, ("eager",))
    assert plain.verdict == "ok", plain.findings
    assert all(row["declared"]["function"] == pytest.approx(row["d_k"] ** -0.5) for row in plain.layers)


def test_cvt_scales_by_the_whole_width():
    """WIDTH_SCALE: CvT sets self.scale = embed_dim**-0.5, all heads' width, not head_dim (its
    projections, behind a convolution, are named projection_query and projection_key)."""
    result = audit.audit_family("cvt", ("eager",))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        width = row["declared"]["fields"]["embed_dim"]
        assert row["declared"]["rules"] == ["WIDTH_SCALE"] and width == row["d_k"] * (width // row["d_k"])
        assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(width**-0.5, rel=FACTOR_REL)
    assert any(row["declared"]["fields"]["embed_dim"] > row["d_k"] for row in result.layers)  # several heads


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


def test_position_temperatures_are_seen():
    """Llama 4's temperature (TEMPERATURE_TUNING, floor_scale 4 in the tiny model) grows with the
    sequence index in its no-RoPE layer; Ministral 3 scales q with the position ids."""
    llama4 = verdicts.family_row(audit.audit_family("llama4_text", ("eager",)), ("eager",))
    assert "query index" in llama4["position dependence"]
    # the temperature depends on the query index alone: row i of a longer sequence has the same one
    assert "length" not in llama4["position dependence"]
    ministral = verdicts.family_row(audit.audit_family("ministral3", ("eager",)), ("eager",))
    assert "position ids" in ministral["position dependence"]


# ---------------------------------------------------------------------------------------
# A broken backend: a wrapper that drops the factor.

@pytest.fixture
def broken_backend():
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def dropped_factor(module, query, key, value, attention_mask, scaling=None, **kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)  # torch's default 1/sqrt(d)

    AttentionInterface.register("sdpa_dropped_factor", dropped_factor)
    yield "sdpa_dropped_factor"
    AttentionInterface._global_mapping.pop("sdpa_dropped_factor")


def test_a_backend_that_drops_the_factor_is_flagged(broken_backend):
    result = audit.audit_family("granite", ("eager", "sdpa", broken_backend), attention_multiplier=0.015)
    assert result.verdict == "backend disagreement"
    assert any(broken_backend in finding and "0.25" in finding for finding in result.findings)
    assert not any(finding.startswith("layers.0.self_attn: sdpa ") for finding in result.findings)
    row = verdicts.family_row(result, ("eager", "sdpa", broken_backend))
    assert row[broken_backend] == "0.25" and row["sdpa"] == "0.015"


def test_a_mask_dropped_by_a_backend_is_flagged():
    """Doge under flex_attention lets query 0 read the later token (found by this audit)."""
    result = audit.audit_family("doge", ("eager", "flex_attention"))
    assert result.verdict == "backend disagreement"
    assert any("queries [0]" in finding for finding in result.findings)
    # a reproduction: the positions whose output moved, the model class and where its attention is defined
    assert any(f.startswith("flex_attention output differs from eager by ") and "at positions [0, " in f and
               "DogeModel, transformers/models/doge/modeling_doge.py:" in f for f in result.findings)


# ---------------------------------------------------------------------------------------
# Any Python callable (a port).

def capped_kernel(factor, cap=None, log_n=False):
    def attn(q, k, v, mask=None):
        logits = (q @ k.transpose(-1, -2)) * factor
        if log_n:
            logits = logits * math.log(k.shape[-2])
        if cap:
            logits = cap * torch.tanh(logits / cap)
        return torch.softmax(logits, dim=-1) @ v

    return attn


def test_callable_soft_cap_and_key_count():
    port = audit.audit_callable(capped_kernel(0.125, cap=30.0), 64)
    assert port.function["factor"] == pytest.approx(0.125, rel=FACTOR_REL)
    assert port.function["cap"] == pytest.approx(30.0, rel=0.05) and port.verdict == "ok"
    log_n = audit.audit_callable(capped_kernel(0.125, log_n=True), 64)
    assert log_n.verdict == "mismatch" and "number of keys" in log_n.findings[0]
    assert log_n.key_counts["8"] == pytest.approx(0.125 * math.log(8), rel=FACTOR_REL)


def test_callable_checked_against_a_family():
    reference = audit.audit_family("gemma2", ("eager",))
    same = audit.audit_callable(capped_kernel(256**-0.5, cap=50.0), 16, reference=reference)
    assert same.verdict == "ok", same.findings
    no_cap = audit.audit_callable(capped_kernel(256**-0.5), 16, reference=reference)
    assert no_cap.verdict == "mismatch" and "soft cap" in no_cap.findings[0]
    wrong = audit.audit_callable(capped_kernel(16**-0.5, cap=50.0), 16, reference=reference)
    assert wrong.verdict == "mismatch" and "factor" in wrong.findings[0]


def test_kernel_cap_solver_inverts_the_tanh_difference():
    for cap in (0.7, 5.0, 50.0, 3000.0):
        difference = attention_function.tanh_difference(cap, 3.0, 0.025)
        assert attention_function.solve_cap(difference, 3.0, 0.025) == pytest.approx(cap, rel=1e-6)


# ---------------------------------------------------------------------------------------
# Verdict rules on constructed results: every verdict is reachable.

def constructed(function_factor=0.25, path_factor=0.25, sdpa_factor=0.25, parity=1e-7, cap=None, declared_cap=None):
    def entry(factor, path):
        return {"function": {"factor": factor, "cap": cap, "nonlinearity": "soft cap" if cap else "linear"},
                "path": {"factor": path, "factor_last": path, "form": "linear", "per_query": [float("nan"), path],
                         "query_spread": 0.0, "factor_far": path, "factor_longer": path}}

    result = audit.FamilyAudit("constructed", "Model")
    result.backends = {"eager": {"accepted": True, "parity": None}, "sdpa": {"accepted": True, "parity": parity}}
    result.layers = [{"name": "layers.0", "layer": 0, "d_k": 16,
                      "declared": {"function": 0.25, "path_first": 0.25, "path_last": 0.25, "cap": declared_cap},
                      "backends": {"eager": entry(function_factor, path_factor), "sdpa": entry(sdpa_factor, sdpa_factor)}}]
    return result


@pytest.mark.parametrize("changes, verdict", [
    ({}, "ok"),
    ({"function_factor": 1 / 16, "path_factor": 1 / 16, "sdpa_factor": 1 / 16}, "mismatch"),
    ({"path_factor": 0.2501}, "ok"),  # within 0.1%
    ({"path_factor": 0.2504, "function_factor": 0.2504, "sdpa_factor": 0.2504}, "mismatch"),
    ({"sdpa_factor": 1.0}, "backend disagreement"),
    ({"parity": 0.01}, "backend disagreement"),
    ({"cap": 50.0, "declared_cap": 50.0}, "ok"),
    ({"cap": 50.0, "declared_cap": 30.0}, "mismatch"),
    ({"function_factor": float("nan"), "path_factor": float("nan")}, "not measured"),
])
def test_verdict_rules(changes, verdict):
    result = constructed(**changes)
    verdicts.judge_family(result, ("eager", "sdpa"))
    assert result.verdict == verdict, result.findings


# ---------------------------------------------------------------------------------------
# The CLI.

def run_cli(args, capsys):
    from attnscale.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.parametrize("args, message", [
    (["audit", "no_such_family"], "unknown model family 'no_such_family'"),
    (["audit", "gpt2", "--backends", "eager,warp"], "unknown attention backend 'warp'"),
    (["audit", "gpt2", "--callable", "no_colon"], "is not module:function"),
    (["audit", "gpt2", "--callable", "no_such_module_xyz:attn"], "cannot import"),
    (["audit", "./missing-folder"], "does not exist"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 2 and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_cli_out_must_be_a_folder(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    code, _, err = run_cli(["audit", "gpt2", "--out", str(target)], capsys)
    assert code == 2 and "is a file" in err


def test_cli_json_table_and_out(tmp_path, capsys):
    code, out, _ = run_cli(["audit", "gpt2,t5", "--backends", "eager,sdpa", "--json", "--out", str(tmp_path)], capsys)
    assert code == 0
    payload = json.loads(out)
    assert [row["family"] for row in payload["rows"]] == ["gpt2", "t5"]
    assert payload["rows"][1]["eager"] == "1" and payload["counts"]["ok"] == 2
    assert json.loads((tmp_path / "audit.json").read_text())["rows"] == payload["rows"]
    code, out, _ = run_cli(["audit", "gemma2", "--backends", "eager,sdpa"], capsys)
    assert code == 0 and "soft cap 50" in out and "refused" in out and "1 families in" in out


def test_cli_folder_without_weights_is_random_init(tmp_path, capsys):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                intermediate_size=128, vocab_size=100).save_pretrained(tmp_path)
    code, out, _ = run_cli(["audit", str(tmp_path), "--backends", "eager", "--json"], capsys)
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["family"].endswith("(llama, random init)") and row["eager"] == "0.25" and row["verdict"] == "ok"


def test_cli_callable(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_port.py").write_text(
        "import torch\n\ndef attention(q, k, v, mask=None):\n"
        "    return torch.softmax(q @ k.transpose(-1, -2) / 16.0, dim=-1) @ v\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["audit", "gemma2", "--backends", "eager", "--callable", "my_port:attention", "--json"], capsys)
    assert code == 0
    port = json.loads(out)["callable"]
    assert port["function"]["factor"] == pytest.approx(1 / 16, rel=FACTOR_REL) and port["verdict"] == "mismatch"


def test_cli_callable_alone_tests_the_function_at_head_dim(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_port_alone.py").write_text(
        "import torch\n\ndef attention(q, k, v, mask=None):\n"
        "    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["audit", "--callable", "my_port_alone:attention", "--head-dim", "16", "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    assert "rows" not in report  # no family audited
    port = report["callable"]
    assert port["d_k"] == 16 and port["function"]["factor"] == pytest.approx(0.25, rel=FACTOR_REL)
    assert port["verdict"] == "ok"
    code, out, _ = run_cli(["audit", "--callable", "my_port_alone:attention", "--head-dim", "16"], capsys)
    assert code == 0 and "callable my_port_alone:attention: factor 0.25" in out


# ---------------------------------------------------------------------------------------
# The lab and its section of the report.

def test_lab_run_tables_figures(tmp_path):
    config = lab.Config(families=("gpt2", "gpt_neo"), backends=("eager", "sdpa"))
    result = lab.run(config)
    assert json.loads(json.dumps(result)) == result
    assert lab.judge(result) == {}
    found = lab.tables(result)
    mismatches = next(rows for title, rows in found.items() if title.startswith("mismatches"))
    assert [row["family"] for row in mismatches] == ["gpt_neo", "gpt_neo", "gpt_neo", "gpt_neo"]
    assert lab.run(config) == result  # same seed, same numbers (no timings in the result)
    drawn = lab.figures(result, tmp_path)
    assert (tmp_path / drawn["audit"][0]).read_bytes()[:4] == b"\x89PNG"


def test_report_renders_a_lab_without_claims(tmp_path, monkeypatch):
    from attnscale.report import build_report

    monkeypatch.setitem(lab.PRESETS, "quick", lab.Config(families=("gpt_neo",), backends=("eager",)))
    report = build_report(out=tmp_path, labs=("audit",))
    assert all(claim["verdict"] == "pending" for claim in report["claims"])
    assert any(title.startswith("mismatches") for title in report["tables"]["audit"])
    markdown, page = (tmp_path / "report.md").read_text(), (tmp_path / "index.html").read_text()
    assert "audit: mismatches and backend disagreements" in markdown  # named there; the table is in the JSON and page
    assert "audit: mismatches and backend disagreements" in page and "gpt_neo" in page
    assert "audit_factors.png" in (tmp_path / "index.html").read_text() or "data:image/png" in \
        (tmp_path / "index.html").read_text()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_killing_the_audit_leaves_no_worker(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "HF_HUB_OFFLINE": "1"}
    parent = subprocess.Popen([sys.executable, "-m", "attnscale", "audit", "--workers", "2", "--backends", "eager"],
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, workers = time.time() + 180, []
    while time.time() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = children_of(parent.pid)
    assert len(workers) >= 2, "the audit started no worker processes"
    time.sleep(3)  # the workers are auditing families now
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    time.sleep(10)
    assert [pid for pid in workers if running(pid)] == []


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


# ---------------------------------------------------------------------------------------
# Attention sinks (GPT-OSS's learned per-head logits that take mass and give no value).

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
        sink = row["backends"]["eager"]["function"]["sink"]
        assert sink["present"] and sink["sink_logit"] == pytest.approx(float(heads.median()) + number, abs=1e-6)
        # at a causal row with one visible key and the largest sink, the key keeps 1 / (1 + e^(2 + layer))
        assert sink["min_key_mass"] == pytest.approx(1 / (1 + math.exp(2.0 + number)), rel=1e-6)
        assert not row["backends"]["plain_without_sinks"]["function"]["sink"]["present"]
    assert result.verdict == "backend disagreement"
    assert any("eager gives attention mass to a sink, plain_without_sinks does not" in f for f in result.findings)
    assert verdicts.family_row(result, ("eager",))["other mechanisms"].startswith("sink logit ")


def test_a_family_without_sinks_says_none():
    result = audit.audit_family("llama", ("eager", "sdpa"))
    assert all(not row["backends"][b]["function"]["sink"]["present"] for row in result.layers for b in ("eager", "sdpa"))
    assert verdicts.family_row(result, ("eager", "sdpa"))["other mechanisms"] == "none"


# ---------------------------------------------------------------------------------------
# Mechanisms outside the factor, named (and measured around where they would hide the factor).

def test_an_input_multiplier_outside_the_factor_is_named():
    result = audit.audit_family("falcon_h1", ("eager",), attention_in_multiplier=0.5)
    row = verdicts.family_row(result, ("eager",))
    assert result.verdict == "ok" and row["eager"] == "0.25"  # the factor on the q and k that reach the product
    assert "attention input x0.5" in row["other mechanisms"] and "x0.25" in row["other mechanisms"]
    assert "ATTENTION_IN_MULTIPLIER" in result.layers[0]["declared"]["rules"]
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


def test_a_layer_whose_whole_path_cannot_be_driven_says_so_and_reads_its_own_inputs():
    """Inkling's keys pass a short convolution over positions before the product: the designed keys
    cannot be written, so nothing is claimed about the whole path (not "linear", not "none"), the
    reason is named, and QK-norm is read from the layer's own q and k (RMS-normalised per head)."""
    result = audit.audit_family("inkling_text", ("eager", "sdpa"))
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert all(layer["backends"]["eager"]["path"] is None for layer in result.layers)
    assert "convolution over positions (k_sconv.conv1d)" in row["non-linearity"]
    assert row["non-linearity"].startswith("QK-norm (from the layer's own q and k)")
    assert row["position dependence"] == "not measured (no whole path read)"
    llama = verdicts.family_row(audit.audit_family("llama", ("eager", "sdpa")), ("eager", "sdpa"))
    assert (llama["non-linearity"], llama["position dependence"]) == ("linear", "none")
    assert not any("inputs" in layer for layer in audit.audit_family("llama", ("eager", "sdpa")).layers)


# ---------------------------------------------------------------------------------------
# Coverage: every model type with a base model, vision encoders fed an image.

def test_every_base_model_type_is_listed(capsys):
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    listed = [name for _, name in pipeline.plan(None)]
    assert len(listed) == len(set(listed)) >= 400
    assert set(MODEL_MAPPING_NAMES) <= set(listed)
    assert {family.model_type for family in families.text_families()} <= set(listed)
    code, out, _ = run_cli(["audit", "--list"], capsys)  # --list prints what a no-argument audit audits
    assert code in (0, None) and [line.split()[0] for line in out.splitlines()] == listed


@pytest.mark.parametrize("family", ["vit", "dinov2", "siglip_vision_model", "clip_vision_model", "vit_mae"])
def test_vision_encoders_are_audited_from_an_image(family):
    """A 32 x 32 image in 8 x 8 patches: every backend measured, the factor the source states
    (head_dim^-0.5 = 0.25 at head dim 16); ViT-MAE masks patches at random, with the same draws
    under every backend, so the outputs agree."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", result.findings
    assert row["eager"] == row["sdpa"] == row["declared"] == "0.25"
    assert all(layer["backends"]["eager"]["path"]["form"] == "linear" for layer in result.layers)


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
    tower, which compose.settled requires measured with nothing left)."""
    unread = [{"name": "layers.0.local", "class": "LocalAttention", "mechanism": "not intercepted"}]
    named = [{"name": "layers.0.wkv", "class": "WkvAttention", "mechanism": "WKV recurrence" + audit.NO_FACTOR}]
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
    outer, inner, vit = compose.covered([composite("outer", "inner", "missing"), composite("inner", "vit_like"), vit])
    assert inner.status == "covered" and inner.reason == "every tower measured: vit_like_config = vit_like (ok)"
    assert outer.status == "skipped" and outer.reason.endswith("; not measured here: missing_config")
    again, _, _ = compose.covered([composite("outer", "inner"), composite("inner", "vit_like"), vit])
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
    assert {layer["d_k"] for layer in result.layers} == {16} and len(result.layers) == 4
    assert verdicts.family_row(result, ("eager",))["eager"] == "0.25"


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
    assert all(layer["path_missing"] == audit.PACKED for layer in result.layers)


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


def test_an_image_size_per_axis_is_shrunk_per_axis():
    """YOLOS takes (height, width) = (512, 864); the tiny image is (32, 32), and the family is measured."""
    assert tuple(families.tiny_config("yolos").image_size) == (32, 32)
    result = audit.audit_family("yolos", ("eager",))
    assert result.verdict == "ok" and verdicts.family_row(result, ("eager",))["eager"] == "0.25", result.findings


def test_a_query_scaled_before_rope_is_declared():
    """ESM multiplies q by head_dim^-0.5 before RoPE and passes factor 1 to the attention function."""
    result = audit.audit_family("esm", ("eager", "sdpa"))
    assert result.verdict == "ok", result.findings
    assert "QUERY_PRESCALE" in result.layers[0]["declared"]["rules"]
    assert verdicts.family_row(result, ("eager",))["eager"] == "0.25"


@pytest.mark.parametrize("family", ["wav2vec2", "hubert", "whisper", "speech_to_text"])
def test_audio_encoders_are_audited_from_samples_or_features(family):
    """Raw samples (wav2vec2, HuBERT) or mel features (Whisper: channels x frames; Speech2Text:
    frames x channels), the first shape the model runs on; Whisper scales q first and calls the
    attention function with scaling=1.0, which is declared, so its decoder is no mismatch."""
    result = audit.audit_family(family, ("eager", "sdpa"))
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert any(layer["backends"]["eager"]["path"] for layer in result.layers)  # the encoder's whole path read
    if family == "whisper":
        assert "Q_SCALED_FIRST" in result.layers[0]["declared"]["rules"]


def test_a_config_field_the_code_never_reads_is_a_finding_with_its_source():
    """Gemma 3 stores attn_logit_softcapping and never hands it to its attention function; Gemma 2
    does (softcap=self.attn_logit_softcapping), and its cap is measured."""
    unread = audit.audit_family("gemma3_text", ("eager",), attn_logit_softcapping=50.0)
    assert unread.verdict == "mismatch"
    assert all("attn_logit_softcapping = 50 is set in the config, but the layer's code never applies it" in finding
               and "softcap=self.attn_logit_softcapping" in finding for finding in unread.findings)
    assert all(layer["declared"]["cap"] is None for layer in unread.layers)
    read = audit.audit_family("gemma2", ("eager",), attn_logit_softcapping=50.0)
    assert read.verdict == "ok" and verdicts.family_row(read, ("eager",))["non-linearity"] == "soft cap 50"


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
    assert "CONTENT_BIAS" in layer["declared"]["rules"] and layer["declared"]["path_first"] == 0.25
    assert layer["backends"]["eager"]["path"]["form"] == "linear"
    assert math.isclose(layer["backends"]["eager"]["path"]["factor"], 0.25, rel_tol=FACTOR_REL)
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
            path = layer["backends"]["eager"]["path"]
            assert layer["d_k"] == d_head and path["form"] == "linear"
            assert math.isclose(path["factor"], d_head**-0.5, rel_tol=FACTOR_REL)
            assert layer["declared"]["path_first"] == d_head**-0.5


def test_an_eager_mask_that_blocks_every_key_is_a_backend_disagreement():
    """Nemotron ASR streaming masks its position term with matrix_bd.masked_fill_(attention_mask.logical_not(),
    -inf) and passes it as the mask.  Under sdpa the mask is boolean (True = attend); under eager it is
    additive (0 = attend), so logical_not() is True at every key it lets through: at the tiny size (one
    chunk) eager's calls block every key of every row and its output is NaN.  The layers are judged on
    sdpa (head_dim^-0.5 = 0.25, as the config declares), and the family is a backend disagreement."""
    source = (TRANSFORMERS / "models/nemotron_asr_streaming/modeling_nemotron_asr_streaming.py").read_text(encoding="utf-8")
    assert 'matrix_bd = matrix_bd.masked_fill_(attention_mask.logical_not(), float("-inf"))' in source
    assert "self.scaling = self.head_dim**-0.5" in source
    result = audit.audit_family("nemotron_asr_streaming_encoder", ("eager", "sdpa"))
    assert result.backends["eager"]["output"] == "not finite" and "output" not in result.backends["sdpa"]
    assert result.verdict == "backend disagreement" and record.is_measured(result)
    assert result.findings[0].startswith("eager output is not finite where sdpa's is (eager's attention calls: ")
    for layer in result.layers:
        rows, of = layer["backends"]["eager"]["rows_masked_everywhere"]
        assert rows == of > 0 and "rows_masked_everywhere" not in layer["backends"]["sdpa"]
        assert math.isclose(verdicts.judged_factor(layer["backends"]["sdpa"]), 0.25, rel_tol=FACTOR_REL)
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert row["eager"] == "-" and row["sdpa"] == "0.25" and row["position dependence"].startswith("none")


def test_composite_parts_without_attention_leave_nothing_to_cover():
    """Nemotron 3 Diarization's head_config (a projection, a subpixel upsampler, a classifier) and
    streaming_config (speaker-cache settings, no module) have no model type and run no attention
    class: the composite is covered by its audio tower alone, and so are the composites above it."""
    composite = audit.audit_family("nemotron3_diarization", ("eager",))
    assert composite.status == "skipped" and not composite.own_attention
    attention = {tower["name"]: tower["attention"] for tower in composite.towers}
    assert attention == {"audio_config": True, "head_config": False, "streaming_config": False}
    tower = audit.audit_family("nemotron3_diarization_audio", ("eager",))
    composite, _ = compose.covered([composite, tower])
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
    composite = compose.covered([composite, *towers])[0]
    assert composite.status == "covered" and "diffusion_head_config: no attention" in composite.reason


def test_rope_that_cannot_be_pinned_leaves_the_whole_path_unread():
    """Moonshine's audio encoder rotates q and k by frame positions it takes no position_ids for: a
    query at frame t and the designed keys at frames 0 and 1 differ by a rotation of t (the logit
    gap swung between -0.29 and 0.30 over the rows), so no whole path is claimed; the attention
    function's factor (head_dim^-0.5 at head dim 8) is still measured."""
    result = audit.audit_family("moonshine", ("eager",))
    row = verdicts.family_row(result, ("eager",))
    assert result.verdict == "ok" and float(row["eager"]) == pytest.approx(8**-0.5, rel=FACTOR_REL)
    assert all(layer["backends"]["eager"]["path"] is None for layer in result.layers)
    assert "RoPE rotates q and k by positions the model does not take as position_ids" in row["non-linearity"]
    assert row["position dependence"] == "not measured (no whole path read)"


def test_a_video_model_gets_a_clip_of_its_own_frame_count():

    config = families.tiny_config("videomae")
    clip = feed.pixel_values(config, 2)
    assert clip.shape == (2, config.num_frames, config.num_channels, config.image_size, config.image_size)
    result = audit.audit_family("videomae", backends=("eager",))
    assert result.verdict == "ok"
    assert all(abs(layer["backends"]["eager"]["function"]["factor"] - layer["d_k"] ** -0.5) < 1e-4
               for layer in result.to_dict()["layers"])


def test_audio_shapes_keep_the_stated_channels_first_and_add_sub_configs_and_stacked_frames():
    from transformers import WhisperConfig


    shapes = feed.audio_shapes(WhisperConfig(num_mel_bins=16, max_source_positions=16), "input_features")
    assert shapes[:2] == [(16, 32), (32, 16)]  # the stated channel count first, frames 2 x positions
    # raw samples last, also as a mono waveform with its channel axis (Mimi, OmniASR)
    assert (32, 64) in shapes and (32, 80) in shapes and shapes[-2:] == [(6400,), (1, 6400)]


def test_a_list_of_families_too_long_for_a_path_is_read_as_families():
    names = ",".join(["llama"] * 60)
    assert pipeline.plan(names) == [("family", "llama")]


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
    assert result.backends["sdpa"]["accepted"] and result.backends["sdpa"]["parity"] < 1e-4
    layers = result.to_dict()["layers"]
    assert result.verdict == "ok" and {layer["name"].split(".")[0] for layer in layers} == {"encoder", "decoder"}
    assert all(abs(layer["backends"]["eager"]["function"]["factor"] - layer["d_k"] ** -0.5) < 1e-6 for layer in layers)


def test_conditional_detr_cross_attention_scales_by_its_doubled_head_dim():
    """Conditional DETR's decoder cross-attention concatenates content and position per head, so q
    and k have 2 x head_dim dimensions and its code sets scaling = expanded_head_dim**-0.5: the
    audit measures (2 head_dim)^-0.5 there and head_dim^-0.5 in every other layer."""
    import inspect

    from transformers.models.conditional_detr import modeling_conditional_detr as source

    assert "self.scaling = expanded_head_dim**-0.5" in inspect.getsource(source)
    head_dim = families.TINY["hidden_size"] // families.TINY["encoder_attention_heads"]
    factors = {layer["name"]: layer["backends"]["eager"]["function"]["factor"]
               for layer in audit.audit_family("conditional_detr", backends=("eager",)).to_dict()["layers"]}
    cross = [name for name in factors if name.endswith("encoder_attn")]
    assert cross and all(abs(factors[name] - (2 * head_dim) ** -0.5) < 1e-6 for name in cross)
    assert all(abs(factor - head_dim**-0.5) < 1e-6 for name, factor in factors.items() if name not in cross)


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
    assert [layer["name"] for layer in result.layers] == ["decoder.layers.0.self_attn"]
    row = verdicts.family_row(result, ("eager",))
    assert row["verdict"] == "ok" and row["other mechanisms"].startswith("deformable attention (")
    assert audit.audit_family("bert", backends=("eager",)).unread_attention == []


def test_cross_attention_that_runs_only_with_encoder_states_is_fed_them_and_measured():
    """A Q-Former's and a decoder tower's cross-attention run only when encoder states are given:
    the audit gives them 16 and measures those layers like the others (head_dim^-0.5 in both
    BLIP-2's Q-Former and Canary's decoder, whose attention classes scale by head_dim**-0.5)."""

    qformer = audit.audit_family("blip_2_qformer", backends=("eager",))
    cross = [layer for layer in qformer.layers if "crossattention" in layer["name"]]
    assert qformer.verdict == "ok" and cross and not qformer.unread_attention
    cls = families.config_class("canary")
    tower = next(t for t in families.tower_types(cls, dict(cls.sub_configs)) if t["name"] == "decoder_config")
    decoder = composite_rows.audit_tower("canary", tower, backends=("eager",))
    assert decoder.verdict == "ok" and not decoder.unread_attention
    assert {layer["name"].rsplit(".", 1)[1] for layer in decoder.layers} == {"self_attn", "encoder_attn"}
    for layer in cross + decoder.layers:
        assert abs(layer["backends"]["eager"]["function"]["factor"] - layer["d_k"] ** -0.5) < 1e-5
    assert feed.encoder_states(families.build(families.tiny_config("bert")), 1) == {}  # no cross-attention


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
    with pytest.raises(families.Skip, match="hidden_size \\* expand .* must equal num_heads \\* head_dim"):
        families.tiny_config("mamba2", num_heads=4)


def test_every_token_id_beyond_the_tiny_vocabulary_is_moved_inside_it():
    kwargs = families.tiny_kwargs(families.config_class("nemotron3_5_transcribe_word_timestamp"))
    assert kwargs["blank_token_id"] < families.TINY["vocab_size"]


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
    from attnscale.audit import series

    model = families.build(families.tiny_config("time_series_transformer"))
    config = model.config
    inputs = feed.shaped_input(model, 3, series.series_shapes(config)[0])
    history = config.context_length + max(config.lags_sequence)
    assert inputs["past_values"].shape == (3, history) and inputs["past_observed_mask"].shape == (3, history)
    assert inputs["future_values"].shape == (3, config.prediction_length)
    assert torch.equal(inputs["past_values"][0], inputs["past_values"][2])  # every design sees the same series


def test_a_learned_query_scale_per_coordinate_is_declared_from_the_layer():
    """TimesFM scales q by softplus(s_j) / (ln 2 sqrt(d)) per coordinate, s learned (ones at init),
    and calls its attention function with scaling=1.0: the declared path is that scale, read from the
    layer (softplus(1) / (4 ln 2) = 0.4737 at head dim 16), and the whole path measures it.  TimesFM
    2.5's attention function is checked at 1 the same way."""
    expected = math.log1p(math.e) / (math.log(2) * 4)
    result = audit.audit_family("timesfm", ("eager",))
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        assert row["declared"]["rules"] == ["LEARNED_QUERY_SCALE"]
        assert row["declared"]["path_first"] == pytest.approx(expected, rel=1e-9)
        assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(expected, rel=FACTOR_REL)
    later = audit.audit_family("timesfm2_5", ("eager",))
    assert later.verdict == "ok", later.findings
    assert all(row["backends"]["eager"]["function"]["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
               for row in later.layers)


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
    assert all(row["name"] not in {module["name"] for module in named} for row in result.layers)


@pytest.mark.parametrize("family, beside", [("bros", {"bbox"}), ("lxmert", {"visual_feats", "visual_pos"}),
                                            ("vilt", {"pixel_values"}), ("udop", {"bbox"})])
def test_a_token_model_that_does_not_run_on_ids_alone_is_given_what_it_reads_beside_them(family, beside):
    """BROS and UDOP need each token's box on the page, LXMERT region features and their positions,
    ViLT an image: refused on token ids alone, each is given them (boxes well formed on the 0-1000
    grid) and measured (head_dim^-0.5 = 0.25 at head dim 16 for the BERT-style ones; UDOP is T5's
    attention, unscaled: 1)."""
    from attnscale.audit import companions

    model = families.build(families.tiny_config(family))
    inputs = feed.first_inputs(model, feed.Feeding())
    assert beside <= set(inputs)
    if "bbox" in inputs:
        boxes = inputs["bbox"]
        assert boxes.shape == (*inputs["input_ids"].shape, 4)
        assert bool((boxes[..., 0] < boxes[..., 2]).all() and (boxes[..., 1] < boxes[..., 3]).all())
        assert int(boxes.min()) >= 0 and int(boxes.max()) < companions.PAGE
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


@pytest.mark.parametrize("family, head_dim", [("layoutlmv3", 16), ("lilt", 24)])
def test_layout_embeddings_sized_to_the_tiny_width_let_document_models_run(family, head_dim):
    """LayoutLMv3 lays 4 coordinate and 2 shape embeddings side by side (4 x 12 + 2 x 8 = 64 wide);
    LiLT six of hidden / 6, so its tiny width is 96 (head dim 24): built so, each is measured at
    head_dim^-0.5 as its source states."""
    result = audit.audit_family(family, ("eager",))
    assert result.verdict == "ok", (result.reason, result.findings)
    factors = [row["backends"]["eager"]["path"]["factor"] for row in result.layers]
    assert factors and all(f == pytest.approx(head_dim**-0.5, rel=FACTOR_REL) for f in factors)


# ---------------------------------------------------------------------------------------
# Composites built whole: their own attention, and towers with no model class of their own.

def read_classes(family: str, rows) -> set[str]:
    """The attention classes the whole row of ``family`` reads (rebuilt to look the modules up)."""
    modules = dict(families.build_whole(family).named_modules())
    return {type(modules[row["name"]]).__name__ for row in rows[0].layers if row["name"] in modules}


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
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL), (
            row["name"])


def test_a_part_that_numbers_its_own_positions_leaves_its_whole_path_unread():
    """BLT's byte encoder and decoder rotate q and k by the position_ids the model is given, so the designs pin
    them and the whole path reads head_dim^-0.5; its global transformer numbers its patches itself
    (global_position_ids = arange), so its rotary embedding sees positions varying over the tokens in a designed
    pass: its whole path is left unread with the reason, not reported as a factor varying with the query."""
    result = pipeline.audit_item(("family", "blt"), ("eager",), 0)[0]
    assert result.verdict == "ok", result.findings
    for row in result.layers:
        path = row["backends"]["eager"]["path"]
        if row["name"].startswith("global_transformer."):
            assert path is None and row["path_missing"] == audit.ROTARY_UNPINNED, row["name"]
        else:
            assert path["form"] == "linear" and path["factor"] == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL)


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
    read = {row["name"]: row for row in whole.layers if row["name"] in cross}
    assert set(read) == set(cross) and any(name.startswith("local_encoder") for name in read)
    for name, row in read.items():
        assert row["d_k"] == cross[name].head_dim
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(cross[name].scaling, rel=FACTOR_REL)
        assert cross[name].scaling == cross[name].head_dim ** -0.5


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
    assert [count for _, count, _ in composite_rows.placeholder_media(model)] == [placeholders]
    modules = dict(model.named_modules())
    read = [row for row in whole.layers if row["name"].startswith(part)]
    assert read and {row["name"].split(".")[0] for row in whole.layers} == {
        "vision_tower" if family == "aria" else "audio_tower", "multi_modal_projector", "language_model"}
    for row in read:
        module = modules[row["name"]]
        head = (module.head_dim if hasattr(module, "head_dim") and isinstance(module.head_dim, int)
                else module.embed_dim // module.num_heads)
        assert row["d_k"] == head == 16
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(head ** -0.5, rel=FACTOR_REL)


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
    memory_rows = [row for row in whole.layers if row["name"].startswith("memory_attention.")]
    assert memory_rows and {row["d_k"] for row in memory_rows} == {memory_head}
    read = [row for row in whole.layers if math.isfinite(row["backends"]["eager"]["function"]["factor"])]
    assert {row["name"] for row in read} == {row["name"] for row in whole.layers}  # every module read at least once
    for row in read:
        factor = row["backends"]["eager"]["function"]["factor"]
        assert factor == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL), row["name"]


def test_a_feed_forward_block_named_after_its_attention_is_not_attention():
    """EdgeTAM's memory attention MLP is up_proj, act_fn, down_proj (modeling_edgetam_video.py): no q.k."""
    assert not families.is_attention_class("EdgeTamVideoMemoryAttentionMLP")
    assert families.is_attention_class("EdgeTamVideoRoPECrossAttention")
    assert families.is_attention_class("LongcatFlashMLA")


def test_a_composite_built_whole_counts_only_where_every_attention_it_runs_is_read_somewhere(monkeypatch):
    """GIT's whole pass reads its text attention; its vision tower's attention, left unread there, is
    read by the tower's own row: GIT is measured.  With its encoder's fused to_kv not taken as its k
    projection, Granite Speech's encoder is read neither by its whole pass nor by the encoder row: it
    stays unmeasured, and says which row is missing."""
    from attnscale.audit import whole_path

    git = pipeline.audit_item(("family", "git"), ("eager",), 0)
    assert git[0].status == "audited" and git[0].verdict == "ok"
    assert [row.family for row in git[1:]] == ["git.vision_config"] and record.is_measured(git[1])
    assert git[0].relies_on == ["git.vision_config"]  # kept, so the report checks it again (compose.settled)
    monkeypatch.setattr(whole_path, "KV_NAMES", tuple(name for name in whole_path.KV_NAMES if name != "to_kv"))
    speech = pipeline.audit_item(("family", "granite_speech"), ("eager",), 0)
    assert speech[0].status == "skipped"
    assert "built whole: the attention of granite_speech.encoder_config is not read" in speech[0].reason
    # a tower that is a family of its own is looked up when the audit is reported
    relying = audit.FamilyAudit("composite", status="audited", verdict="ok", relies_on=["tower"])
    tower = audit.FamilyAudit("tower", status="skipped", reason="cannot run a forward pass: ...")
    relying, _ = compose.settled([relying, tower])
    assert relying.status == "skipped" and "the attention of tower is not read" in relying.reason


def test_a_composite_whose_base_class_is_a_tower_is_built_from_its_own_class():
    """AutoModel maps MusicGen to its decoder, which a MusicgenConfig does not build: the composite
    class of its own package is used, so its decoder is found to be a tower (MusicgenAttention is not
    its own) and the decoder row measures it at head_dim^-0.5."""
    config = families.whole_config("musicgen")
    assert type(families.composite_model(config)).__name__ == "MusicgenForConditionalGeneration"
    skipped = audit.audit_family("musicgen", ("eager",))
    assert skipped.own_attention == []
    decoder = composite_rows.audit_tower("musicgen", {"name": "decoder", "model_type": "musicgen_decoder", "own": False},
                                ("eager",))
    assert decoder.verdict == "ok"
    assert all(row["backends"]["eager"]["function"]["factor"] == pytest.approx(0.25, rel=FACTOR_REL)
               for row in decoder.layers)


# ---------------------------------------------------------------------------------------
# Inline attention the designs now read.

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
        expected = factor if factor is not None else row["d_k"] ** -0.5
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(expected, rel=FACTOR_REL)


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
            assert row["declared"]["cosine_temperature"] == pytest.approx(temperature, rel=1e-6)  # float32 log, exp
            assert row["backends"]["eager"]["path"]["cosine_temperature"] == pytest.approx(temperature, rel=FACTOR_REL)
    with torch.no_grad():
        for scale in scales:
            scale.fill_(math.log(1000.0))
    call_module = next(m for m in model.modules() if isinstance(getattr(m, "logit_scale", None), torch.nn.Parameter))
    stated = declared.declared_for(model.config, "swinv2", 0, None, 16, declared.source_for(call_module),
                                   module=call_module)
    assert stated.cosine_temperature == pytest.approx(100.0, rel=1e-6)


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
        expected = row["d_k"] ** -0.5 if factor is None else factor
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(expected, rel=FACTOR_REL), row["name"]


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
    assert result.reason.endswith(audit.NO_FACTOR + ")") and compose.nothing_left(result)
    cover = pipeline.coverage([result])
    assert cover["no_softmax"] == 1 and cover["unmeasured"] == 0 and cover["attention_bearing"] == 1


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
    assert result.verdict == "ok" and compose.nothing_left(result), result.unread_attention


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
    assert unread and all(u["mechanism"].startswith(starts) and u["mechanism"].endswith(audit.NO_FACTOR)
                          for u in unread)
    assert compose.nothing_left(result), result.unread_attention


@pytest.mark.parametrize("family", ["grounding-dino", "mm-grounding-dino"])
def test_grounding_dino_s_image_text_fusion_is_read_at_its_head_dim(family):
    """GroundingDinoBiMultiHeadAttention scales vision_proj(image) by head_dim**-0.5, head_dim =
    (encoder_ffn_dim // 2) / (encoder_attention_heads // 2), and softmaxes its product with text_proj(text)
    over the text (and, transposed, over the image): read from its weights at that factor, the family
    leaves nothing unread (its deformable attention has no q.k)."""
    result = audit.audit_family(family, ("eager",))
    config = families.tiny_config(family)
    head_dim = (config.encoder_ffn_dim // 2) // (config.encoder_attention_heads // 2)
    fusion = [row for row in result.layers if row["name"].endswith("fusion_layer.attn")]
    assert fusion and all(row["d_k"] == head_dim for row in fusion)
    for row in fusion:
        assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert result.verdict == "ok" and compose.nothing_left(result), result.unread_attention


def test_dab_detr_s_decoder_attention_is_read_where_its_q_and_k_are_handed_in():
    """DabDetrAttention takes q and k projected (content plus position projections; in cross-attention each
    head's q and k concatenated with a sine or position part, embed_dim = 2 * hidden_size) and scales q by
    attention_head_dim**-0.5, attention_head_dim = embed_dim / decoder_attention_heads
    (modeling_dab_detr.py): both decoder attentions read at that factor, nothing left unread."""
    result = audit.audit_family("dab-detr", ("eager",))
    config = families.tiny_config("dab-detr")
    widths = {"self_attn": config.hidden_size, "cross_attn": 2 * config.hidden_size}
    for part, width in widths.items():
        rows = [row for row in result.layers if row["name"].startswith("decoder.") and f".{part}." in row["name"]]
        head_dim = width // config.decoder_attention_heads
        assert rows and all(row["d_k"] == head_dim for row in rows), part
        for row in rows:
            assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert result.verdict == "ok" and compose.nothing_left(result), result.unread_attention


def test_longt5_s_local_attention_is_read_across_its_blocks():
    """LongT5LocalAttention splits the tokens into blocks of local_radius + 1 and scores each block's queries
    against the block before, its own and the next, einsum(q, k) with no scaling (T5's), keys at a distance
    over local_radius masked (modeling_longt5.py): unblocked, read at factor 1, for the queries that see the
    designed keys 0 and 1 (those within local_radius of key 0), and nothing left unread."""
    radius = 3  # blocks of 4: the designs' keys lie in block 0, seen from block 1's first queries too
    result = audit.audit_family("longt5", ("eager",), local_radius=radius)
    local = [row for row in result.layers if row["name"].endswith("LocalSelfAttention")]
    assert local
    for row in local:
        path = row["backends"]["eager"]["path"]
        assert path["factor"] == pytest.approx(1.0, rel=FACTOR_REL)
        seen = path["per_query"][:radius + 1]
        assert all(value == pytest.approx(1.0, rel=FACTOR_REL) for value in seen)
        assert all(math.isnan(value) for value in path["per_query"][radius + 1:])  # key 0 out of their reach
    assert result.verdict == "ok" and compose.nothing_left(result), result.unread_attention


def test_prophetnet_s_ngram_self_attention_is_read_in_its_main_and_predict_streams():
    """ProphetNetNgramSelfAttention projects q over its 1 + ngram streams, divides it by head_dim**0.5, then
    chunks it: the main stream attends over itself, each predict stream over the main stream and itself
    (modeling_prophetnet.py).  Laid back at their keys, every stream's queries read head_dim**-0.5."""
    result = audit.audit_family("prophetnet", ("eager",))
    config = families.tiny_config("prophetnet")
    head_dim = config.hidden_size // config.num_decoder_attention_heads
    rows = [row for row in result.layers if row["name"].startswith("decoder.") and row["name"].endswith("self_attn")]
    assert rows
    for row in rows:
        assert row["d_k"] == head_dim
        per_query = row["backends"]["eager"]["path"]["per_query"]
        assert len(per_query) == (1 + config.ngram) * feed.TOKENS
        streams = [per_query[start:start + feed.TOKENS] for start in range(0, len(per_query), feed.TOKENS)]
        for stream in streams:  # each stream has queries that see the designed keys, each at the factor
            seen = [value for value in stream if not math.isnan(value)]
            assert seen and all(value == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL) for value in seen)
    assert result.verdict == "ok" and compose.nothing_left(result), result.unread_attention


def test_a_mechanism_with_a_factor_the_audit_cannot_run_stays_unmeasured_and_is_named():
    """MRA computes exp(q.k / sqrt(head_dim)) only in its CUDA kernel: unmeasured here, with what its code
    computes (and that heads narrower than 32 are padded to 32 before head_dim is read)."""
    result = audit.audit_family("mra", ("eager",))
    assert result.verdict == "not measured" and not compose.nothing_left(result)
    assert any("multi-resolution attention (MRA)" in f and "sqrt(32)" in f for f in result.findings)


KEY_SCALE_GEMMA4 = math.log(1 + math.e) / math.log(2)  # modeling_gemma4.py: self.k_scale


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
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(factor, rel=FACTOR_REL), row["name"]


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
        base = row["d_k"] ** -0.5 * KEY_SCALE_GEMMA4 / math.log(2)
        path = row["backends"]["eager"]["path"]
        assert path["factor"] == pytest.approx(base * softplus(1.0), rel=FACTOR_REL)
        assert path["factor_last"] == pytest.approx(base * softplus(-1.0), rel=FACTOR_REL)
        assert "PER_DIM_QUERY_SCALE" in row["declared"]["rules"] and "KEY_SCALE" in row["declared"]["rules"]


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
            expected = layer["d_k"] ** -0.5 if factor is None else factor
            assert verdicts.judged_factor(layer["backends"]["eager"]) == pytest.approx(expected, rel=FACTOR_REL), (
                result.family, layer["name"])


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
    [fun] = compose.settled([fun])
    assert fun.status == "audited" and fun.verdict == "ok" and not fun.relies_on, (fun.reason, fun.findings)
    assert any(row["name"].startswith("multi_modal_projector.layers") for row in fun.layers)


def test_a_sam_encoder_inside_a_larger_vision_tower_is_read_at_its_own_head_width():
    """DeepSeek-OCR 2's vision tower runs a SAM encoder (fused qkv, decomposed relative positions, its
    scale head_dim^-0.5 with head_dim = its own hidden / heads) before an intercepted encoder whose
    config holds no hidden size: the SAM layers' head width is read off their fused projection
    (3 x heads x 16 wide), and the whole path reads 16^-0.5 there, as the source states."""
    rows = pipeline.audit_item(("family", "deepseek_ocr2"), ("eager",), 0)
    vision = next(row for row in rows if row.family == "deepseek_ocr2.vision_config")
    assert compose.nothing_left(vision), vision.unread_attention
    sam = [layer for layer in vision.layers if layer["name"].startswith("sam_encoder.")]
    assert sam and all(layer["d_k"] == 16 for layer in sam)
    for layer in sam:
        assert layer["backends"]["eager"]["path"]["factor"] == pytest.approx(16 ** -0.5, rel=FACTOR_REL)


def test_a_relative_position_bias_table_is_not_counted_as_attention():
    """Phi-4's audio tower computes one learned logit per relative position in a module of its own
    (Phi4MultimodalAudioRelativeAttentionBias, an nn.Embedding over distances) and passes it to every
    layer: no q.k of its own, so it leaves nothing unread, and Phi-4 multimodal is measured whole."""
    assert not families.is_attention_class("Phi4MultimodalAudioRelativeAttentionBias")
    assert families.is_attention_class("Phi4MultimodalAudioAttention")
    rows = pipeline.audit_item(("family", "phi4_multimodal"), ("eager",), 0)
    assert record.is_measured(rows[0]) and not rows[0].own_attention, rows[0].reason
    audio = next(row for row in rows if row.family == "phi4_multimodal.audio_config")
    assert compose.nothing_left(audio)


def test_attention_left_unread_beside_intercepted_calls_is_read_from_its_weights_or_keeps_a_tower_uncovered():
    """SigLIP 2's pooling head (torch's nn.MultiheadAttention beside the encoder's intercepted calls) is
    read from its weights at head_dim^-0.5; a measured row that still leaves an attention module
    unread does not cover its composite."""
    result = audit.audit_family("siglip2_vision_model", ("eager",))
    head = [row for row in result.layers if row["name"] == "head.attention"]
    assert head and verdicts.judged_factor(head[0]["backends"]["eager"]) == pytest.approx(0.25, rel=FACTOR_REL)
    assert result.unread_attention == []
    partial = audit.FamilyAudit("tower", status="audited", verdict="ok", layers=result.layers,
                                unread_attention=[{"name": "x", "class": "X", "mechanism": "not intercepted"}])
    assert record.is_measured(partial) and not compose.nothing_left(partial)


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
        merger = [row for row in result.layers if row["name"] == "vit_merger.self_attn"]
        assert len(merger) == 4  # the 4 x 4 patches in 2 x 2 windows, one call each
        for row in result.layers:
            assert row["backends"]["eager"]["function"]["factor"] == pytest.approx(0.25, rel=FACTOR_REL), row["name"]
    for composite in ("minicpm_ocr", "minicpmv4_6", "minicpmv4_7"):
        assert by_name[composite].status == "covered", by_name[composite].reason


def test_a_softmax_over_the_queries_is_read_with_q_and_k_swapped_and_its_weights_transposed():
    """GroupViT's assignment of image tokens to groups (GroupViTAssignAttention) takes one head of
    q.k times self.scale = config.hidden_size**-0.5 and softmaxes it over the query axis (dim=-2, the
    groups); the hard assignment is its argmax, the soft one is returned as its attentions.  Read with
    the roles swapped, both stages read hidden_size^-0.5 (64^-0.5 at the tiny width); a scale set on
    the module is what is read, and the tower then covers GroupViT."""
    model = families.build_tower("groupvit", "vision_config")
    result = audit.audit_model(model, "groupvit.vision_config", ("eager",), model_type="groupvit_vision_model")
    assert result.verdict == "ok" and result.unread_attention == [], result.unread_attention
    assign = [row for row in result.layers if row["name"].endswith("downsample.assign")]
    assert len(assign) == 2
    for row in assign:
        assert row["d_k"] == model.config.hidden_size
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(model.config.hidden_size ** -0.5,
                                                                                rel=FACTOR_REL)
    for module in model.modules():
        if type(module).__name__ == "GroupViTAssignAttention":
            module.scale = 0.3
    changed = audit.audit_model(model, "groupvit.vision_config", ("eager",), model_type="groupvit_vision_model")
    for row in changed.layers:
        if row["name"].endswith("downsample.assign"):
            assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(0.3, rel=FACTOR_REL)
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


def assert_blocks_read_at_their_width(row, model, class_name: str) -> dict:
    """Every ``class_name`` block of ``model`` (1 x 1 Conv2d q and k, one head as wide as its channels) is a
    layer of the audit ``row``, read at int(channels)^-0.5 as its code scales; their channels by name."""
    channels = {name: module.in_channels for name, module in model.named_modules()
                if type(module).__name__ == class_name}
    assert sorted(layer["name"] for layer in row.layers) == sorted(channels)
    for layer in row.layers:
        assert layer["d_k"] == channels[layer["name"]]
        assert verdicts.judged_factor(layer["backends"]["eager"]) == pytest.approx(channels[layer["name"]] ** -0.5,
                                                                                  rel=FACTOR_REL)
    return channels


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
        path = row["backends"]["eager"]["path"]
        assert all(factor == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL) for factor in path["per_query"])
    assert by_name["bark"].status == "covered", by_name["bark"].reason


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
        result = composite_rows.audit_tower(family, spec, ("eager",))
    model = families.build_tower(family, tower, 0) if tower else families.build(families.tiny_config(family))
    module = next(m for m in model.modules() if type(m).__name__ == class_name)
    assert call in declared_rules.source_for(module)
    config = model.config
    expected = config.dim_head ** -0.5 if tower else (config.hidden_size // config.num_attention_heads) ** -0.5
    rows = [row for row in result.layers if type(model.get_submodule(row["name"])).__name__ == class_name]
    assert result.verdict == "ok" and rows and result.unread_attention == [], (result.findings, result.unread_attention)
    for row in rows:
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(expected, rel=FACTOR_REL)


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
        assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(0.3, rel=FACTOR_REL)


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
        cross = [row for row in qformer.layers if "crossattention" in row["name"]]
        assert cross and not qformer.unread_attention
        for row in cross:
            assert verdicts.judged_factor(row["backends"]["eager"]) == pytest.approx(row["d_k"] ** -0.5, rel=FACTOR_REL)


# ---------------------------------------------------------------------------------------
# Composites audited on token ids: the attention their towers run outside that pass.

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
    assert compose.nothing_left(tower), tower.unread_attention
    assert unread <= classes_of(audit.tiny_model(row, 0, {}), [layer["name"] for layer in tower.layers])
    assert record.is_measured(compose.settled([result, tower])[0])
    [alone] = compose.settled([pipeline.audit_item(("family", composite), ("eager",), 0)[0]])
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
    assert compose.nothing_left(vq) and [layer["name"] for layer in vq.layers] == names
    for layer in vq.layers:
        assert layer["d_k"] == d_k
        assert verdicts.judged_factor(layer["backends"]["eager"]) == pytest.approx(d_k ** -0.5, rel=FACTOR_REL)
    assert record.is_measured(compose.settled(list(rows.values()))[0])


def test_inkling2_loops_message_attention_runs_in_its_second_pass_and_is_read():
    """Inkling2LoopMessageAttentionResidual runs only from the second pass over the looped layers (6 to 18
    by default): with the loop inside the tiny depth, its learned queries attend over the previous pass's
    block states at scaling=hidden_size**-0.5, as its forward states."""
    result = audit.audit_family("inkling2_loop_text", ("eager",))
    messages = [row for row in result.layers if row["name"] == "message_input"]
    hidden = families.tiny_config("inkling2_loop_text").hidden_size
    assert messages and result.unread_attention == [] and record.is_measured(result)
    for row in messages:
        assert row["d_k"] == hidden
        assert row["backends"]["eager"]["function"]["factor"] == pytest.approx(hidden ** -0.5, rel=FACTOR_REL)


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
        rows = [row for row in result.layers if row["name"].endswith(suffixes[cls])
                and ("protein_encoder.model" in row["name"]) == (cls == "EvollaSaProtSelfAttention")]
        assert rows, cls
        for row in rows:
            assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(factor, rel=FACTOR_REL), row["name"]
            assert row["declared"]["path_first"] == pytest.approx(factor, rel=FACTOR_REL), row["name"]
    assert result.status == "audited" and result.verdict == "ok", (result.reason, result.findings)
    assert compose.nothing_left(result) and not result.relies_on, result.unread_attention


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
    rows = [row for row in result.layers if row["name"].startswith("encoder.")]
    assert [row["name"] for row in rows] == ["encoder.layers.0.self_attn"]
    path = rows[0]["backends"]["eager"]["path"]
    assert path["factor"] == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL)
    assert all(value == pytest.approx(head_dim ** -0.5, rel=FACTOR_REL) for value in path["per_query"][:block])
    assert all(math.isnan(value) for value in path["per_query"][block:])  # blocks without keys 0 and 1
    assert [u["name"] for u in result.unread_attention] == ["encoder.layers.1.self_attn"]  # staggered
    assert result.verdict == "ok", result.findings
