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


def masked_attention(module, query, key, value, mask, scaling=None, **kwargs):
    """plain_attention with an additive mask (B, 1, T_q, T_k), as eager applies a causal one."""
    logits = query @ key.transpose(-1, -2) * scaling + mask
    return (torch.softmax(logits, dim=-1) @ value).transpose(1, 2), None


def test_a_large_call_is_probed_on_its_first_query_rows_and_reads_the_same_factor(monkeypatch):
    """Every query row of the function probe is designed alike, so a call of 4,096 tokens (a video model's layer
    over all its frames: 2e8 query-key pairs in 12 heads) is probed on its first rows, its causal mask cut with them:
    the factor and cap read are those of the whole call."""
    tokens, width = 64, 16
    causal = torch.full((tokens, tokens), float("-inf")).triu(1)[None, None]
    q = torch.randn(1, 2, tokens, width)
    call = AttentionCall("layer", torch.nn.Identity(), masked_attention, q, q.clone(), q.clone(), causal,
                         {"scaling": width ** -0.5})
    whole = attention_function.analyse(attention_function.call_measure(call), width)
    seen = []
    monkeypatch.setattr(attention_function, "PROBE_PAIRS", 2 * tokens)  # one row a head: cut to MIN_PROBE_ROWS
    monkeypatch.setattr(call, "function", lambda module, query, key, value, mask, *args, **kwargs:
                        seen.append((query.shape[-2], mask.shape[-2])) or masked_attention(module, query, key, value,
                                                                                             mask, **kwargs))
    first = attention_function.analyse(attention_function.call_measure(call), width)
    assert set(seen) == {(attention_function.MIN_PROBE_ROWS, attention_function.MIN_PROBE_ROWS)}
    assert first.factor == pytest.approx(whole.factor, rel=1e-9) == width ** -0.5
    assert first.nonlinearity == whole.nonlinearity == "linear"


def biased_attention(module, query, key, value, mask, scaling=None, position_bias=None, **kwargs):
    """T5's way: a bias per head, query row and key handed beside q, added to the logits."""
    logits = query @ key.transpose(-1, -2) * scaling + position_bias
    return (torch.softmax(logits, dim=-1) @ value).transpose(1, 2), None


def test_a_call_with_a_tensor_per_query_row_beside_q_is_probed_whole(monkeypatch):
    """T5's position_bias (B, H, T_q, T_k) is handed to the function beside q: cutting q alone to its first rows would
    not fit it, so such a call is probed on every row (and its factor read)."""
    tokens, width = 64, 16
    q = torch.randn(1, 2, tokens, width)
    call = AttentionCall("layer", torch.nn.Identity(), biased_attention, q, q.clone(), q.clone(), None,
                         {"scaling": width ** -0.5, "position_bias": torch.zeros(1, 2, tokens, tokens)})
    monkeypatch.setattr(attention_function, "PROBE_PAIRS", 2 * tokens)
    assert attention_function.first_query_rows(call) is call
    result = attention_function.analyse(attention_function.call_measure(call), width)
    assert result.factor == pytest.approx(width ** -0.5, rel=1e-9)
