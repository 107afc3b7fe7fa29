"""The judge stage across backends: every backend that calls an attention function is measured there, also where
eager computes attention inline, and a backend that drops the factor, the mask or every key is a disagreement."""

from __future__ import annotations

import math

import pytest

from attnscale.audit import record, verdicts
from attnscale.audit import measure as audit
from attnscale.audit.measure import audit_folder
from attnscale.audit.verdicts import family_row

from audit_helpers import FACTOR_REL, TRANSFORMERS


def gpt2_folder(folder) -> str:
    """GPT-2 with reorder_and_upcast_attn: eager computes attention inline (_upcast_and_reordered_attn), sdpa
    calls the attention function; scale_attn_by_inverse_layer_idx divides layer i's factor by i + 1."""
    from transformers import GPT2Config

    GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, reorder_and_upcast_attn=True,
               scale_attn_by_inverse_layer_idx=True).save_pretrained(folder)
    return str(folder)


def test_gpt2_inline_eager_and_sdpa_through_the_function(tmp_path):
    result = audit_folder(gpt2_folder(tmp_path), backends=("eager", "sdpa"))
    assert result.backends["eager"]["reason"] == "inline attention: weights read"
    assert result.backends["sdpa"]["accepted"] and result.backends["sdpa"]["calls"] == 2
    for index, row in enumerate(result.layers):
        expected = 16 ** -0.5 / (index + 1)
        assert row.backends["eager"].path["factor"] == pytest.approx(expected, rel=1e-5)
        assert row.backends["sdpa"].function["factor"] == pytest.approx(expected, rel=1e-9)
        assert row.backends["sdpa"].path["factor"] == pytest.approx(expected, rel=1e-5)
    assert result.verdict == "ok", result.findings
    assert family_row(result, ("eager", "sdpa"))["sdpa"] == "0.125..0.25"


def test_an_sdpa_factor_that_differs_from_eager_inline_is_caught(tmp_path, monkeypatch):
    """The sdpa attention function made to double its factor: the whole path under sdpa reads twice eager's
    inline reading, a backend disagreement (before, sdpa got only an output comparison)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    original = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def doubled(module, query, key, value, attention_mask, scaling=None, **kwargs):
        return original(module, query, key, value, attention_mask, scaling=2 * (scaling or query.shape[-1] ** -0.5),
                        **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", doubled)
    result = audit_folder(gpt2_folder(tmp_path), backends=("eager", "sdpa"))
    assert result.verdict == "backend disagreement"
    assert any("sdpa whole path factor 0.5, eager 0.25" in finding for finding in result.findings), result.findings


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
        rows, of = layer.backends["eager"].rows_masked_everywhere
        assert rows == of > 0 and layer.backends["sdpa"].rows_masked_everywhere is None
        assert math.isclose(verdicts.judged_factor(layer.backends["sdpa"]), 0.25, rel_tol=FACTOR_REL)
    row = verdicts.family_row(result, ("eager", "sdpa"))
    assert row["eager"] == "-" and row["sdpa"] == "0.25" and row["position dependence"].startswith("none")
