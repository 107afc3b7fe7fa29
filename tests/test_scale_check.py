"""Checking a user's attention against the factor it should apply: the expectation's closed forms, one verdict per
attention module ("ok" only when every one was measured and matches), the exit codes, and assert_scaled, on modules
written here with a known factor (a wrong one must fail)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import attnscale
from attnscale import ScaledAttention
from attnscale.scale_check import (EXIT_INCOMPLETE, EXIT_MISMATCH, EXIT_OK, ModelVerdict, Verdict, exit_code,
                                   expectation, factor_words, model_verdict)

WIDTH, HEADS = 64, 4
D = WIDTH // HEADS


def x_input(seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 6, WIDTH, generator=torch.Generator().manual_seed(seed))


class NanoAttention(nn.Module):
    """nanoGPT's attention with the factor d_k ** -power: 0.5 is right, 1 the 1/d_k bug."""

    def __init__(self, power: float = 0.5, fused: bool = False):
        super().__init__()
        self.c_attn, self.c_proj, self.power, self.fused = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH), power, fused

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=D ** -self.power)
        else:
            y = F.softmax((q @ k.transpose(-2, -1)) * D ** -self.power, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """Self-attention, a cross-attention that runs only with encoder states, and a router's softmax over x W."""

    def __init__(self, power: float = 0.5):
        super().__init__()
        self.self_attn, self.cross_attn, self.router = NanoAttention(power), NanoAttention(), nn.Linear(WIDTH, 4)

    def forward(self, x, encoder_states=None):
        y = self.self_attn(x)
        if encoder_states is not None:
            y = y + self.cross_attn(encoder_states)
        return y * F.softmax(self.router(y), dim=-1).sum(-1, keepdim=True)


class NormedAttention(nn.Module):
    """QK-norm (RMS-normalised q and k, no weight) then the factor d_k ** -power: a cosine-1 pair's logit is
    d_k ** (1 - power)."""

    def __init__(self, power: float = 0.5):
        super().__init__()
        self.q, self.k, self.power = nn.Linear(WIDTH, D), nn.Linear(WIDTH, D), power

    def forward(self, x):
        q, k = F.rms_norm(self.q(x), (D,)), F.rms_norm(self.k(x), (D,))
        return F.softmax(q @ k.transpose(-1, -2) * D ** -self.power, dim=-1) @ x


class ZeroKeys(NanoAttention):
    def __init__(self):
        super().__init__()
        with torch.no_grad():
            self.c_attn.weight[WIDTH:2 * WIDTH].zero_()
            self.c_attn.bias.zero_()


class NaNAttention(NanoAttention):
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        logits = (q @ k.transpose(-2, -1)) * D ** -0.5
        return F.softmax(logits * torch.tensor(math.inf) * 0, dim=-1) @ v  # inf x 0: every logit NaN


# ---------------------------------------------------------------------------------------------------------------
# The expectation and the words

@pytest.mark.parametrize("spec, d_k, factor", [("sqrt", 64, 0.125), ("inv_d", 64, 1 / 64), ("none", 64, 1.0),
                                                ("power:0.25", 16, 0.5), ("const:0.3", 16, 0.3), ("0.2", 16, 0.2),
                                                (0.2, 16, 0.2), ("learned", 16, 0.25)])
def test_the_expected_factor_is_the_rules_closed_form(spec, d_k, factor):
    assert expectation(spec).factor(d_k) == pytest.approx(factor, rel=1e-12)


def test_under_qk_norm_the_expectation_is_a_cosine_one_logit():
    assert expectation("sqrt").cosine_logit(16) == pytest.approx(4.0)  # unit-RMS q, k: |q||k| = d_k, times d_k^-1/2
    assert expectation("qknorm:3").cosine_logit(16) == pytest.approx(3.0)
    assert expectation("qknorm").cosine_logit(16) == pytest.approx(4.0)  # its gain starts at sqrt(d_k)


@pytest.mark.parametrize("bad", ["bogus", "sqrt+logn:64", "-1", "nan", "0", "const:-2", None, [1]])
def test_an_expectation_that_is_no_rule_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="expected scale") as refused:
        expectation(bad)
    assert repr(bad) in str(refused.value) and "accepted" in str(refused.value)


def test_factors_are_named_as_powers_of_d_k():
    assert factor_words(1 / 64, 64) == "1/d_k (0.015625)"
    assert factor_words(0.125, 64) == "1/sqrt(d_k) (0.125)"
    assert factor_words(1.0, 64) == "1 (no scaling)"
    assert factor_words(0.3, 64) == "0.3"


def test_the_model_verdict_and_its_exit_codes():
    assert model_verdict([Verdict.OK, Verdict.OK]) == ModelVerdict.OK
    assert model_verdict([Verdict.OK, Verdict.NOT_MEASURED]) == ModelVerdict.INCOMPLETE
    assert model_verdict([Verdict.NOT_MEASURED, Verdict.MISMATCH]) == ModelVerdict.MISMATCH
    assert model_verdict([]) == ModelVerdict.INCOMPLETE  # nothing measured is not "ok"
    assert [exit_code(v) for v in ModelVerdict] == [EXIT_OK, EXIT_MISMATCH, EXIT_INCOMPLETE] == [0, 1, 3]
    assert exit_code(ModelVerdict.INCOMPLETE, strict=True) == 1 and exit_code(ModelVerdict.OK, strict=True) == 0


# ---------------------------------------------------------------------------------------------------------------
# probe and assert_scaled

@pytest.mark.parametrize("fused", [False, True])
def test_a_one_over_d_k_bug_fails_and_the_right_factor_passes(fused):
    right = attnscale.probe(NanoAttention(0.5, fused), x_input())
    assert right.ok and right.verdict == "ok" and right.summary() == "ok: 1 of 1 attention modules measured"
    wrong = attnscale.probe(NanoAttention(1.0, fused), x_input())
    assert not wrong.ok and wrong.verdict == "mismatch" and wrong.exit_code() == 1
    assert wrong.calls[0].expected == pytest.approx(D ** -0.5) and wrong.calls[0].factor == pytest.approx(1 / D, rel=1e-4)
    assert "1/d_k (0.0625) where 1/sqrt(d_k) (0.25) was expected" in wrong.findings()[0]
    assert attnscale.probe(NanoAttention(1.0, fused), x_input(), expect="inv_d").ok  # what the user meant


def test_assert_scaled_raises_with_the_finding():
    read = attnscale.assert_scaled(NanoAttention(0.5), x_input())
    assert read.ok
    with pytest.raises(AssertionError, match=r"1/d_k \(0\.0625\) where 1/sqrt\(d_k\)"):
        attnscale.assert_scaled(NanoAttention(1.0), x_input())
    with pytest.raises(ValueError, match="expected scale 'sqrt2'"):
        attnscale.assert_scaled(NanoAttention(0.5), x_input(), expect="sqrt2")


def test_ok_only_when_every_attention_module_was_measured():
    alone = attnscale.probe(Block(), x_input())
    assert alone.verdict == "incomplete" and not alone.ok and alone.exit_code() == 3 and alone.exit_code(strict=True) == 1
    assert alone.summary() == "incomplete: 1 of 2 attention modules measured"
    assert [(m.name, m.verdict) for m in alone.modules] == [("self_attn", "ok"), ("cross_attn", "not measured")]
    assert "cross_attn: made no attention call" in alone.findings()[0]
    assert len(alone.other_softmax) == 1 and "router or a classifier" in alone.other_softmax[0]  # not judged as q.k
    fed = attnscale.probe(Block(), (x_input(), x_input(4)))
    assert fed.ok and fed.summary() == "ok: 2 of 2 attention modules measured"
    with pytest.raises(AssertionError, match="incomplete"):
        attnscale.assert_scaled(Block(), x_input())
    assert attnscale.assert_scaled(Block(), x_input(), strict=False).verdict == "incomplete"
    assert attnscale.probe(Block(power=1.0), x_input()).verdict == "mismatch"  # a mismatch outranks what is missing


@pytest.mark.parametrize("power, verdict", [(0.5, "ok"), (1.0, "mismatch"), (0.0, "mismatch")])
def test_qk_norm_is_judged_by_its_cosine_one_logit(power, verdict):
    read = attnscale.probe(NormedAttention(power), x_input())
    call = read.calls[0]
    assert call.form == "QK-norm" and call.cosine_logit == pytest.approx(D ** (1 - power), rel=1e-3)
    assert call.expected == pytest.approx(D ** 0.5) and read.verdict == verdict


@pytest.mark.parametrize("spec", ["sqrt", "inv_d", "none", "power:0.25", "const:0.3", "qknorm", "qknorm:3"])
def test_the_librarys_own_attention_passes_under_its_own_rule(spec):
    block = ScaledAttention(d_model=WIDTH, n_heads=HEADS, d_head=D, scale=spec)
    assert attnscale.probe(block, x_input(), expect=spec).ok
    differs = not math.isclose(expectation(spec).factor(D), D ** -0.5)
    assert attnscale.probe(block, x_input()).ok is not differs  # against 1/sqrt(d_k): only the rules that equal it


def test_torch_multihead_attention_is_ok_at_one_over_sqrt_d_k():
    mha = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
    x = x_input()
    assert attnscale.probe(mha, (x, x, x)).ok
    assert attnscale.probe(mha, (x, x, x), expect="inv_d").verdict == "mismatch"


def test_zero_keys_and_nan_attention_are_findings_not_ok():
    zero = attnscale.probe(ZeroKeys(), x_input())
    assert zero.verdict == "incomplete" and zero.calls[0].form == "uniform" and "uniform" in zero.findings()[0]
    nan = attnscale.probe(NaNAttention(), x_input())
    assert nan.verdict == "mismatch" and nan.calls[0].form == "not finite" and "NaN" in nan.findings()[0]


def test_no_attention_at_all_is_incomplete():
    read = attnscale.probe(nn.Linear(WIDTH, WIDTH), x_input())
    assert read.verdict == "incomplete" and read.summary() == "incomplete: 0 of 0 attention modules measured"
    assert "no attention call" in read.findings()[0]


# ---------------------------------------------------------------------------------------------------------------
# The command line

MODULES = '''import math, torch, torch.nn as nn, torch.nn.functional as F
W, H = 64, 4
class Attention(nn.Module):
    def __init__(self, power):
        super().__init__(); self.c_attn = nn.Linear(W, 3 * W); self.power = power
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
        return (F.softmax(q @ k.transpose(-1, -2) * (C // H) ** -self.power, -1) @ v).transpose(1, 2).reshape(B, T, C)
class Pair(nn.Module):
    def __init__(self):
        super().__init__(); self.attn, self.cross_attention = Attention(0.5), Attention(0.5)
    def forward(self, x):
        return self.attn(x)
def right(): return Attention(0.5)
def wrong(): return Attention(1.0)
def pair(): return Pair()
def by_d_k(q, k, v, mask=None): return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1], -1) @ v
'''


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "user_modules.py").write_text(MODULES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))


def run(args, capsys):
    from attnscale.cli import main

    with pytest.raises(SystemExit) as leaving:
        main(args)
    out, err = capsys.readouterr()
    return leaving.value.code, out, err


def test_the_module_check_exits_by_its_verdict(user_modules, capsys):
    code, out, _ = run(["audit", "--module", "user_modules:right"], capsys)
    assert code == 0 and "verdict: ok: 1 of 1 attention modules measured (expected: sqrt)" in out
    code, out, _ = run(["audit", "--module", "user_modules:wrong"], capsys)
    assert code == 1 and "1/d_k (0.0625) where 1/sqrt(d_k) (0.25) was expected" in out
    assert run(["audit", "--module", "user_modules:wrong", "--expect", "inv_d"], capsys)[0] == 0
    assert run(["audit", "--module", "user_modules:wrong", "--expect", "0.0625"], capsys)[0] == 0
    code, out, _ = run(["audit", "--module", "user_modules:pair", "--json"], capsys)
    report = json.loads(out)["module"]
    assert code == 3 and report["verdict"] == "incomplete" and report["summary"].startswith("incomplete: 1 of 2")
    assert [m["verdict"] for m in report["modules"]] == ["ok", "not measured"]
    assert run(["audit", "--module", "user_modules:pair", "--strict"], capsys)[0] == 1


def test_the_callable_check_exits_by_its_verdict(user_modules, capsys):
    code, out, _ = run(["audit", "--callable", "user_modules:by_d_k"], capsys)
    assert code == 1 and "1/d_k (0.015625) where 1/sqrt(d_k) (0.125) was expected" in out
    code, out, _ = run(["audit", "--callable", "user_modules:by_d_k", "--expect", "inv_d", "--json"], capsys)
    assert code == 0 and json.loads(out)["callable"]["verdict"] == "ok"


def test_expect_is_checked_before_any_work(user_modules, capsys):
    code, _, err = run(["audit", "--module", "user_modules:right", "--expect", "sqrt+logn:64"], capsys)
    assert code == 2 and err.count("\n") == 1 and "length term" in err
    code, _, err = run(["audit", "gpt2", "--expect", "sqrt"], capsys)
    assert code == 2 and "--expect 'sqrt' is for --module or --callable" in err


def test_a_folder_exits_0_when_ok(tmp_path, capsys):
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                intermediate_size=128, vocab_size=100).save_pretrained(tmp_path)
    code, out, _ = run(["audit", str(tmp_path), "--backends", "eager,sdpa", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "ok" and report["exit_code"] == 0 and not report["incomplete"]


def test_tables_are_whole_when_piped(user_modules, capsys):
    code, out, _ = run(["audit", "--module", "user_modules:wrong"], capsys)
    header = next(line for line in out.splitlines() if "module" in line and "verdict" in line)
    assert len(header) > 80 and "…" not in out  # not cut to Rich's 80 columns


# ---------------------------------------------------------------------------------------------------------------
# Where people keep models: a repo id the hub cache holds, read offline

def cached_repo(tmp_path, monkeypatch, repo_id: str = "someone/tiny-llama") -> Path:
    """A Hugging Face cache laid out as huggingface_hub lays it (refs/main -> snapshots/REV), holding a tiny config."""
    from transformers import LlamaConfig

    cache = tmp_path / "hub"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("a" * 40)
    LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                intermediate_size=128, vocab_size=100).save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    return snapshot


def test_a_repo_id_in_the_hub_cache_resolves_offline(tmp_path, monkeypatch, capsys):
    from attnscale.probing.loading import check_model_dir

    snapshot = cached_repo(tmp_path, monkeypatch)
    assert check_model_dir("someone/tiny-llama") == snapshot
    code, out, _ = run(["audit", "someone/tiny-llama", "--backends", "eager", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["rows"][0]["family"].startswith("someone/tiny-llama (llama") and report["verdict"] == "ok"
    code, _, err = run(["audit", "someone/not-downloaded", "--backends", "eager"], capsys)
    assert code == 2 and "holds no repo 'someone/not-downloaded'" in err and err.count("\n") == 1
    code, _, err = run(["diagnose", "someone/not-downloaded"], capsys)
    assert code == 2 and "holds no repo 'someone/not-downloaded'" in err


class AttnBlock(nn.Module):
    """An attention-named block holding a self-attention and a cross-attention that runs only with encoder states."""

    def __init__(self):
        super().__init__()
        self.self_attn, self.cross_attn = NanoAttention(), NanoAttention()

    def forward(self, x, encoder_states=None):
        y = self.self_attn(x)
        return y if encoder_states is None else y + self.cross_attn(encoder_states)


def test_a_silent_attention_inside_an_attention_block_is_named():
    alone = attnscale.probe(AttnBlock(), x_input())
    assert alone.verdict == "incomplete" and [(m.name, m.verdict) for m in alone.modules] == [
        ("", "ok"), ("cross_attn", "not measured")]
    assert attnscale.probe(AttnBlock(), (x_input(), x_input(4))).summary() == "ok: 1 of 1 attention modules measured"
