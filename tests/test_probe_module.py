"""attnscale.probe on any nn.Module: the factor each attention call applies to the projections' q·k, read from the
operations the module runs, against the closed form of each module's definition."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import attnscale
from attnscale import ScaledAttention
from attnscale.cli import main as cli_main

WIDTH, HEADS = 64, 4
D = WIDTH // HEADS
REL = 1e-4


def x_input(batch_first: bool = True) -> torch.Tensor:
    x = torch.randn(2, 6, WIDTH, generator=torch.Generator().manual_seed(3))
    return x if batch_first else x.transpose(0, 1)


def only_call(module, example, **kwargs):
    read = attnscale.probe(module, example, **kwargs)
    assert len(read.calls) == 1 and not read.unread, read.to_dict()
    return read.calls[0]


class NanoGPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention, as its model.py writes it: the fused path and the plain one."""

    def __init__(self, flash: bool):
        super().__init__()
        self.c_attn, self.c_proj, self.flash = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH), flash

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(torch.ones(T, T).tril() == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class AlibiAttention(nn.Module):
    """Scaled q·k plus a bias linear in the distance: not a pure factor."""

    def __init__(self):
        super().__init__()
        self.w_q, self.w_k = nn.Linear(WIDTH, D), nn.Linear(WIDTH, D)

    def forward(self, x):
        q, k = self.w_q(x), self.w_k(x)
        positions = torch.arange(x.shape[1])
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(D) - 0.5 * (positions[:, None] - positions[None, :]).abs()
        return torch.softmax(logits, dim=-1) @ x


@pytest.mark.parametrize("need_weights", [True, False])
def test_torch_multihead_attention(need_weights):
    mha = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
    x = x_input()
    call = only_call(mha, (x, x, x), need_weights=need_weights)
    assert call.factor == pytest.approx(D ** -0.5, rel=REL) and call.d_k == D
    if need_weights:  # the slow path folds the factor into q before torch.bmm
        assert call.q_scale == pytest.approx(D ** -0.5, rel=REL) and call.factor_at_call == pytest.approx(1, rel=REL)
    else:
        assert call.kind.startswith("_scaled_dot_product") and call.factor_at_call == pytest.approx(D ** -0.5, rel=REL)


@pytest.mark.parametrize("training", [True, False])
def test_torch_transformer_encoder_layer(training):
    layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 128, batch_first=True).train(training)
    call = only_call(layer, x_input())
    assert call.factor == pytest.approx(D ** -0.5, rel=REL) and call.module == "self_attn"
    if training:  # dropout sends SDPA down its math path: q and k each times d^-1/4
        assert call.q_scale == pytest.approx(D ** -0.25, rel=REL) and call.k_scale == pytest.approx(D ** -0.25, rel=REL)


@pytest.mark.parametrize("flash", [True, False])
def test_a_nanogpt_style_module(flash):
    call = only_call(NanoGPTAttention(flash), x_input())
    assert call.factor == pytest.approx(D ** -0.5, rel=REL) and call.q_from == "c_attn" and call.form == "constant"


@pytest.mark.parametrize("spec, expected", [("sqrt", D ** -0.5), ("inv_d", 1 / D), ("none", 1.0), ("const:0.3", 0.3),
                                            ("power:0.75", D ** -0.75), ("learned", D ** -0.5)])
def test_scaled_attention_under_each_fixed_rule(spec, expected):
    call = only_call(ScaledAttention(d_model=WIDTH, n_heads=HEADS, d_head=D, scale=spec, causal=True), x_input())
    assert call.factor == pytest.approx(expected, rel=REL)


def test_a_learned_factor_is_read_where_it_stands():
    block = ScaledAttention(d_model=WIDTH, n_heads=HEADS, d_head=D, scale="learned")
    with torch.no_grad():
        for parameter in block.parameters():
            if parameter.numel() == 1:
                parameter.add_(0.7)  # the log-temperature: the factor times e^0.7
    assert only_call(block, x_input()).factor == pytest.approx(D ** -0.5 * math.exp(0.7), rel=REL)


def test_qk_norm_is_named_with_its_cosine_one_logit():
    call = only_call(ScaledAttention(d_model=WIDTH, n_heads=HEADS, d_head=D, scale="qknorm:3"), x_input())
    assert call.form == "QK-norm" and call.factor is None and "is 3" in call.detail


def test_a_length_term_is_a_factor_that_moves_with_the_row():
    call = only_call(ScaledAttention(d_model=WIDTH, n_heads=HEADS, d_head=D, scale="sqrt+logn:2", causal=True),
                     x_input())
    assert call.form == "varies per query row" and call.factor is None


def test_x_transformers_attention_both_paths():
    from x_transformers import Encoder

    for flash in (False, True):
        encoder = Encoder(dim=WIDTH, depth=1, heads=HEADS, attn_dim_head=D, attn_flash=flash)
        call = only_call(encoder, x_input())
        assert call.factor == pytest.approx(D ** -0.5, rel=REL) and call.q_from.endswith("to_q")


def test_fair_esm_multihead_attention_and_its_rotary_variant():
    from esm.multihead_attention import MultiheadAttention

    x = x_input(batch_first=False)
    call = only_call(MultiheadAttention(WIDTH, HEADS, self_attention=True), (x, x, x))
    assert call.factor == pytest.approx(D ** -0.5, rel=REL) and call.q_scale == pytest.approx(D ** -0.5, rel=REL)
    rotary = only_call(MultiheadAttention(WIDTH, HEADS, self_attention=True, use_rotary_embeddings=True), (x, x, x))
    assert rotary.form == "not read" and rotary.factor is None and "rotation" in rotary.detail


def test_an_additive_bias_is_named_not_folded():
    call = only_call(AlibiAttention(), x_input())
    assert call.form == "additive term" and call.factor is None


def test_refusals_name_what_was_passed():
    with pytest.raises(TypeError, match="needs an nn.Module, got function"):
        attnscale.probe(lambda x: x, x_input())
    with pytest.raises(ValueError, match="Linear failed on the example input"):
        attnscale.probe(nn.Linear(3, 3), x_input())
    read = attnscale.probe(nn.Linear(WIDTH, WIDTH), x_input())
    assert read.calls == [] and "no attention call" in read.unread[0]


def test_the_cli_reads_a_module_of_the_users(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_model.py").write_text(
        "import torch.nn as nn\n\ndef build():\n    return nn.MultiheadAttention(64, 4, batch_first=True)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["audit", "--module", "my_model:build", "--input-shape", "2,8,64", "--json"])
    assert exit_info.value.code == 0
    report = json.loads(capsys.readouterr().out)["module"]
    assert report["calls"][0]["factor"] == pytest.approx(0.25, rel=REL) and report["input_shape"] == [2, 8, 64]


# ----------------------------------------------------------------------------- capture of any model

def test_capture_of_a_transformers_model_agrees_with_its_own_attention_weights():
    from attnscale import capture
    from attnscale.probing.loading import load_model

    model, tokenizer = load_model(None)  # all-MiniLM-L6-v2, offline
    ids = tokenizer("The factor keeps the logits in range.", return_tensors="pt")
    with torch.no_grad(), capture(model) as seen:
        out = model(**ids, output_attentions=True)
    names = list(seen)
    assert names == [f"encoder.layer.{i}.attention.self" for i in range(6)]
    for (name, call), weights in zip(seen.items(), out.attentions):
        assert call.factor == pytest.approx(32 ** -0.5, rel=REL) and call.q.shape == (1, 12, weights.shape[-1], 32)
        assert torch.allclose(call.probs.float(), weights, atol=1e-6)
        reference = (call.q.double() @ call.k.double().transpose(-1, -2)) * call.factor
        finite = torch.isfinite(call.logits)
        assert torch.allclose(call.logits.double()[finite], reference[finite], rtol=1e-5, atol=1e-5)


def test_capture_of_torch_attention_under_both_paths():
    from attnscale import capture

    mha, x = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True), x_input()
    with capture(mha) as seen:
        _, weights = mha(x, x, x)
    call = seen["MultiheadAttention"]
    assert torch.allclose(call.probs.float().view(2, HEADS, 6, 6).mean(1), weights, atol=1e-6)
    with capture(mha) as fused:
        out, _ = mha(x, x, x, need_weights=False)
    call = fused["MultiheadAttention"]
    assert call.factor == pytest.approx(D ** -0.5, rel=REL)
    v = F.linear(x, mha.in_proj_weight[2 * WIDTH:], mha.in_proj_bias[2 * WIDTH:]).view(2, 6, HEADS, D).transpose(1, 2)
    mixed = (call.probs.float() @ v).transpose(1, 2).reshape(2, 6, WIDTH)
    assert torch.allclose(mha.out_proj(mixed), out, atol=1e-5)  # the recomputed probabilities are the call's


def test_capture_of_a_module_without_attention_is_refused():
    from attnscale import capture
    from attnscale.errors import UserError

    linear = nn.Linear(WIDTH, WIDTH)
    with pytest.raises(UserError, match="made no attention call"):
        with capture(linear) as _:
            linear(x_input())


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_numerics_checks_a_real_models_own_q_and_k(capsys):
    code, out, _ = run_cli(["numerics", "--model", "default", "--layer", "2", "--json"], capsys)
    assert code == 0
    (report,) = json.loads(out)
    assert report["layer"] == 2 and report["module"] == "encoder.layer.2.attention.self"
    assert report["factor"] == pytest.approx(32 ** -0.5, rel=REL) and report["dtype"] == "float16"
    for args, needle in ((["numerics", "--model", "default", "--layer", "6"], "--layer 6 is out of range"),
                         (["numerics", "--layer", "1"], "apply only with --model"),
                         (["numerics", "--model", "default", "--scale", "none"], "--scale")):
        code, _, err = run_cli(args, capsys)
        assert code == 2 and needle in err, err


@pytest.mark.parametrize("example, words", [(torch.zeros(1, 0, 16), r"example input 0 is empty \(shape \(1, 0, 16\)\)"),
                                            (torch.zeros(0, 4, 16), r"example input 0 is empty \(shape \(0, 4, 16\)\)"),
                                            (torch.empty(1, 4, 16, device="meta"), "example input 0 is a meta tensor")])
def test_probe_refuses_an_input_with_no_values_before_running_the_module(example, words):
    ran = []

    class Attending(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            ran.append(True)
            return self.attn(x, x, x)[0]

    with pytest.raises(ValueError, match=words):
        attnscale.probe(Attending(), example)
    assert ran == []
