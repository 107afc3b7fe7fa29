"""The audit's memory guards: what a designed pass and a function probe would hold is estimated from the call's
whole shape (a video tower folds its frames into the batch), and a probe that does not fit runs one design at a
time, or is refused with the bytes it would need; it never grows past the free memory."""

import math

import pytest
import torch

from attnscale.audit import attention_function, measure
from attnscale.errors import UserError
from attnscale.probing.intercept import AttentionCall


def plain_attention(module, query, key, value, mask, scaling=None, **kwargs):
    """(B, H, T, d) in, (B, T, H, d) out, as transformers' attention functions: softmax(q k^T * scaling) v."""
    weights = torch.softmax(query @ key.transpose(-1, -2) * scaling, dim=-1)
    return (weights @ value).transpose(1, 2), weights


def call_of(batch: int, heads: int = 2, tokens: int = 8, width: int = 16) -> AttentionCall:
    q = torch.randn(batch, heads, tokens, width)
    return AttentionCall("layer", torch.nn.Identity(), plain_attention, q, q.clone(), q.clone(), None,
                         {"scaling": width ** -0.5})


def test_a_designed_pass_counts_every_entry_of_the_calls_batch():
    """A video tower's spatial attention runs its 16 frames as a batch of 16; each design runs them all."""
    one, frames = call_of(1), call_of(16)
    assert measure.designed_pass_bytes([frames], 14) == 16 * measure.designed_pass_bytes([one], 14)
    heads, tokens, width = 2, 8, 16
    assert measure.designed_pass_bytes([one], 1) == heads * (3 * tokens * tokens + 2 * (tokens + 2 * tokens) * width) * 4


def test_a_function_probe_that_does_not_fit_runs_one_design_at_a_time_and_measures_the_same(monkeypatch):
    call = call_of(1)
    width = call.query.shape[-1]
    whole = attention_function.analyse(attention_function.call_measure(call), width)
    one = attention_function.probe_bytes([(1, *t.shape[1:]) for t in (call.query, call.key, call.value)], 1,
                                         torch.float64)
    sizes = []
    monkeypatch.setattr(attention_function, "fits", lambda needed, device=None: sizes.append(needed) or needed <= one)
    alone = attention_function.analyse(attention_function.call_measure(call), width)
    assert math.isclose(alone.factor, whole.factor, rel_tol=1e-9) and math.isclose(alone.factor, width ** -0.5, rel_tol=1e-6)
    assert max(sizes) > one and one in sizes  # the batched try was refused before any allocation, then one by one


def test_a_function_probe_that_cannot_fit_at_all_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr(attention_function, "fits", lambda needed, device=None: False)
    with pytest.raises(UserError, match=r"8 queries x 8 keys would need about .* more than the free memory holds"):
        attention_function.analyse(attention_function.call_measure(call_of(1)), 16)
    row = measure.function_results([call_of(1)])[0]
    assert math.isnan(row["factor"]) and "more than the free memory holds" in row["error"]
