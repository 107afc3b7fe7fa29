import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale.softmax import METHODS, naive_softmax, online_logsumexp, online_softmax, softmax, stable_softmax

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# Tolerance per dtype: a few units of the dtype's epsilon, relative to probabilities <= 1.
ATOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-6, torch.float64: 1e-12}


def reference(x, mask=None):
    x = x.to(torch.float64)
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf"))
    p = torch.softmax(x, dim=-1)
    return torch.nan_to_num(p, nan=0.0)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 6), n=st.integers(1, 70), scale=st.floats(0.1, 8.0), seed=st.integers(0, 10_000),
       method=st.sampled_from(METHODS), dtype=st.sampled_from(DTYPES), block=st.integers(1, 80))
def test_every_method_matches_float64_and_sums_to_one(rows, n, scale, seed, method, dtype, block):
    x = (torch.randn(rows, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).to(dtype)
    p = softmax(x, method=method, block_size=block)
    assert p.dtype == dtype
    # Where exp or its row sum overflows in the dtype, naive fails by design (tested below).
    if method == "naive" and not torch.isfinite(torch.exp(x).sum(-1)).all():
        return
    torch.testing.assert_close(p.to(torch.float64), reference(x), atol=ATOL[dtype], rtol=0)
    torch.testing.assert_close(p.to(torch.float64).sum(-1), torch.ones(rows, dtype=torch.float64),
                               atol=ATOL[dtype] * n ** 0.5 + ATOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["stable", "online"])
def test_shift_invariance(dtype, method):
    x = torch.randn(8, 50, dtype=torch.float64)
    shift = torch.randn(8, 1, dtype=torch.float64) * 100
    a = softmax(x.to(dtype), method=method)
    # Shifted in float64 first, so both inputs are the same real numbers up to one rounding.
    b = softmax((x + shift).to(dtype), method=method)
    tol = {torch.float16: 0.1, torch.bfloat16: 0.5, torch.float32: 1e-4, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(a.to(torch.float64), b.to(torch.float64), atol=tol, rtol=0)


def test_naive_is_shift_invariant_only_without_overflow():
    x = torch.randn(4, 30, dtype=torch.float32)
    torch.testing.assert_close(naive_softmax(x), naive_softmax(x + 5.0), atol=1e-6, rtol=0)
    assert torch.isnan(naive_softmax(x + 200.0)).any()  # exp(200) = inf in float32: inf / inf


@pytest.mark.parametrize("dtype", DTYPES)
def test_naive_overflows_exactly_past_ln_finfo_max(dtype):
    threshold = math.log(torch.finfo(dtype).max)
    below = torch.tensor([[threshold * 0.99, 0.0]], dtype=dtype)
    above = torch.tensor([[threshold * 1.02 + 1, 0.0]], dtype=dtype)
    assert torch.isfinite(naive_softmax(below)).all()
    assert not torch.isfinite(naive_softmax(above)).all()
    assert torch.isfinite(stable_softmax(above)).all()
    assert torch.isfinite(online_softmax(above)[0]).all()


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), n=st.integers(1, 90), block=st.integers(1, 100), seed=st.integers(0, 10_000),
       density=st.floats(0.0, 1.0))
def test_online_equals_stable_with_masks_and_any_block_size(rows, n, block, seed, density):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g, dtype=torch.float64) * 5
    mask = torch.rand(rows, n, generator=g) < density
    p_online, lse = online_softmax(x, mask, block_size=block)
    torch.testing.assert_close(p_online, stable_softmax(x, mask), atol=1e-12, rtol=0)
    expected_lse = torch.logsumexp(x.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(lse, expected_lse, atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fully_masked_rows_give_zeros_not_nan(method, dtype):
    x = torch.randn(3, 7).to(dtype)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1] = False
    p = softmax(x, mask=mask, method=method)
    assert torch.equal(p[1], torch.zeros(7, dtype=dtype))
    assert torch.isfinite(p).all()
    assert torch.equal(p[~mask], torch.zeros_like(p[~mask]))


def test_mask_broadcasts():
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True, False, True])
    torch.testing.assert_close(stable_softmax(x, mask), reference(x, mask.expand(2, 4, 6)))


def test_online_logsumexp_of_a_masked_row_is_minus_inf():
    lse = online_logsumexp(torch.zeros(2, 5), torch.tensor([[False] * 5, [True] * 5]))
    assert torch.isneginf(lse[0]) and lse[1].item() == pytest.approx(math.log(5))


@pytest.mark.parametrize("bad", [
    dict(x=torch.arange(5), method="stable"),
    dict(x=torch.randn(3), method="fast"),
    dict(x=torch.randn(3), method="online", block_size=0),
    dict(x=torch.randn(3, 4), method="stable", mask=torch.ones(3, 4)),
    dict(x=torch.randn(3, 4), method="stable", mask=torch.ones(2, 4, dtype=torch.bool)),
    dict(x=[1.0, 2.0], method="stable"),
])
def test_bad_input_raises_value_error(bad):
    with pytest.raises(ValueError):
        softmax(**bad)


def test_a_plus_inf_logit_gives_nan_not_a_quiet_row_of_zeros():
    x = torch.tensor([[float("inf"), 1.0, 0.0]])
    assert torch.isnan(stable_softmax(x)).any()
    assert torch.isnan(online_softmax(x)[0]).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_online_softmax_stays_exact_for_huge_equal_logits(dtype):
    big = 1046528.0 if dtype != torch.float16 else 60000.0
    x = torch.tensor([[big, big]], dtype=dtype)
    assert torch.equal(online_softmax(x)[0], torch.tensor([[0.5, 0.5]], dtype=dtype))
    assert torch.equal(stable_softmax(x), torch.tensor([[0.5, 0.5]], dtype=dtype))


# ----------------------------------------------------------------------------- edge cases, the same in every method

@pytest.mark.parametrize("method", ["naive", "stable", "online"])
@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 0), (0,)])
def test_no_keys_or_no_rows_give_an_empty_result(method, shape):
    out = softmax(torch.randn(shape), method=method)
    assert out.shape == shape and out.numel() == 0


@pytest.mark.parametrize("method", ["naive", "stable", "online"])
def test_a_0d_input_is_refused(method):
    with pytest.raises(ValueError, match="at least one dimension"):
        softmax(torch.tensor(1.0), method=method)


@pytest.mark.parametrize("method", ["naive", "stable", "online"])
@pytest.mark.parametrize("mask_shape", [(3, 1, 4), (2, 4)])
def test_a_mask_that_would_enlarge_the_output_is_refused(method, mask_shape):
    with pytest.raises(ValueError, match="does not broadcast to \\(1, 4\\)"):
        softmax(torch.randn(1, 4), mask=torch.ones(mask_shape, dtype=torch.bool), method=method)
