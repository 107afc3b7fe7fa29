"""The judge stage across backends: every backend that calls an attention function is measured there, also where
eager computes attention inline."""

from __future__ import annotations

import pytest

from attnscale.audit.measure import audit_folder
from attnscale.audit.verdicts import family_row


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
        assert row["backends"]["eager"]["path"]["factor"] == pytest.approx(expected, rel=1e-5)
        assert row["backends"]["sdpa"]["function"]["factor"] == pytest.approx(expected, rel=1e-9)
        assert row["backends"]["sdpa"]["path"]["factor"] == pytest.approx(expected, rel=1e-5)
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
