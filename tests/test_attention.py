import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import ScaledAttention, attention, capture, scaling

RULES = ["sqrt", "inv_d", "none", "const:0.3", "power:0.75", "learned", "qknorm", "qknorm:4"]
IMPLS = ["sdpa", "naive", "stable", "online"]


def reference(q, k, v, spec, mask=None):
    """softmax(q k^T * factor) v in float64, with qknorm's normalisation."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    rule = scaling.parse(spec)
    if rule.normalizes_qk:
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    logits = (q @ k.transpose(-2, -1)) * rule.factor(q.shape[-1])
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
    return probs @ v, probs


def qkv(shape=(2, 3, 17, 16), t_k=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, h, t, d = shape
    t_k = t_k or t
    make = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)
    return make(b, h, t, d), make(b, h, t_k, d), make(b, h, t_k, d + 3)


@pytest.mark.parametrize("spec", RULES)
@pytest.mark.parametrize("impl", IMPLS)
def test_every_rule_and_impl_equals_the_float64_reference(spec, impl):
    q, k, v = qkv()
    out = attention(q, k, v, scale=spec, impl=impl)
    expected, _ = reference(q, k, v, spec)
    torch.testing.assert_close(out.to(torch.float64), expected, atol=2e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(t_q=st.integers(1, 40), t_k=st.integers(1, 40), d=st.integers(1, 24), block=st.integers(1, 50),
       causal=st.booleans(), density=st.floats(0.0, 1.0), seed=st.integers(0, 999))
def test_online_equals_stable_for_random_blocks_masks_and_causal(t_q, t_k, d, block, causal, density, seed):
    q, k, v = qkv((1, 2, t_q, d), t_k=t_k, dtype=torch.float64, seed=seed)
    mask = torch.rand(1, 2, t_q, t_k, generator=torch.Generator().manual_seed(seed)) < density
    a = attention(q, k, v, mask=mask, causal=causal, impl="online", block_size=block)
    b = attention(q, k, v, mask=mask, causal=causal, impl="stable")
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_stable_with_masks(causal):
    q, k, v = qkv((2, 4, 33, 32))
    mask = torch.rand(2, 1, 33, 33, generator=torch.Generator().manual_seed(3)) < 0.7
    a = attention(q, k, v, mask=mask, causal=causal, impl="sdpa")
    b = attention(q, k, v, mask=mask, causal=causal, impl="stable")
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(a).all()


def test_causal_is_top_left_aligned_like_torch():
    q, k, v = qkv((1, 1, 5, 8), t_k=9)
    ours = attention(q, k, v, causal=True, impl="stable")
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_return_weights_gives_the_probabilities():
    q, k, v = qkv()
    out, probs = attention(q, k, v, scale="power:0.3", return_weights=True)
    expected_out, expected_probs = reference(q, k, v, "power:0.3")
    torch.testing.assert_close(probs.to(torch.float64), expected_probs, atol=1e-6, rtol=0)
    torch.testing.assert_close(out, probs @ v)
    with pytest.raises(ValueError, match="return_weights"):
        attention(q, k, v, impl="online", return_weights=True)


def test_gradients_through_online_match_stable():
    q, k, v = (t.requires_grad_() for t in qkv((1, 2, 6, 4), dtype=torch.float64))
    fn = lambda q, k, v: attention(q, k, v, impl="online", block_size=4, causal=True)
    assert torch.autograd.gradcheck(fn, (q, k, v))
    grads_online = torch.autograd.grad(fn(q, k, v).square().sum(), (q, k, v))
    grads_stable = torch.autograd.grad(attention(q, k, v, impl="stable", causal=True).square().sum(), (q, k, v))
    for a, b in zip(grads_online, grads_stable):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_work_and_stay_close(impl, dtype):
    q, k, v = qkv((1, 2, 20, 16), dtype=dtype)
    out = attention(q, k, v, impl=impl)
    assert out.dtype == dtype
    expected, _ = reference(q, k, v, "sqrt")
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    torch.testing.assert_close(out.to(torch.float64), expected, atol=tol, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_with_no_allowed_key_give_zeros(impl):
    q, k, v = qkv((1, 1, 4, 8))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out = attention(q, k, v, mask=mask, impl=impl)
    assert torch.equal(out[0, 0, 2], torch.zeros(11))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("bad", [
    lambda q, k, v: attention(q, k[..., :5], v),
    lambda q, k, v: attention(q, k, v[..., :3, :]),
    lambda q, k, v: attention(q[0], k, v),
    lambda q, k, v: attention(q, k, v.double()),
    lambda q, k, v: attention(q.int(), k.int(), v.int()),
    lambda q, k, v: attention(q, k, v, scale="sqrt(d)"),
    lambda q, k, v: attention(q, k, v, impl="flash"),
    lambda q, k, v: attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.bool)),
    lambda q, k, v: attention(q, k, v, mask=torch.ones(17, 17)),
    lambda q, k, v: attention(q * float("nan"), k, v),
    lambda q, k, v: attention(q[..., :0], k[..., :0], v),
])
def test_bad_inputs_raise_value_error(bad):
    with pytest.raises(ValueError):
        bad(*qkv())


def test_t5_init_gives_the_same_logit_std_as_sqrt_with_unit_init():
    """T5 folds 1/sqrt(d_k) into W_q's init; at step 0 the logit spread must match."""
    d_model, d_head, n_heads = 256, 64, 4
    x = torch.randn(8, 64, d_model, generator=torch.Generator().manual_seed(0))
    stds = {}
    for scale, init in (("none", "t5"), ("sqrt", "unit")):
        block = ScaledAttention(d_model, n_heads, d_head, scale=scale, init=init,
                                generator=torch.Generator().manual_seed(1))
        with torch.no_grad(), capture(block) as seen:
            block(x)
        stds[init] = seen["attn"].logits.std().item()
    assert stds["t5"] == pytest.approx(stds["unit"], rel=0.10)
    assert stds["unit"] == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize("spec", RULES)
@pytest.mark.parametrize("impl", IMPLS)
def test_scaled_attention_matches_a_plain_multi_head_computation(spec, impl):
    d_model, n_heads, d_head = 24, 3, 10  # d_head != d_model / n_heads on purpose
    block = ScaledAttention(d_model, n_heads, d_head, scale=spec, impl=impl, causal=True, bias=True,
                            generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 9, d_model)
    heads = lambda w: w(x).view(2, 9, n_heads, d_head).transpose(1, 2)
    expected, _ = reference(heads(block.w_q), heads(block.w_k), heads(block.w_v), spec,
                            mask=torch.ones(9, 9, dtype=torch.bool).tril())
    expected = block.w_o(expected.float().transpose(1, 2).reshape(2, 9, n_heads * d_head))
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)


def test_capture_records_consistent_observations_and_leaves_the_fast_path():
    block = ScaledAttention(32, 4, scale="sqrt", causal=True)
    x = torch.randn(2, 12, 32)
    plain = block(x)
    with capture(block) as seen:
        captured = block(x)
    torch.testing.assert_close(plain, captured, atol=1e-5, rtol=1e-5)
    obs = seen["attn"]
    assert obs.probs.shape == (2, 4, 12, 12) and obs.q.shape == (2, 4, 12, 8)
    assert obs.factor == pytest.approx(1 / math.sqrt(8))
    torch.testing.assert_close(obs.logits.nan_to_num(0.0).tril(), (obs.q @ obs.k.transpose(-2, -1) * obs.factor).tril())
    assert torch.isnan(obs.logits[..., 0, 1:]).all()  # masked (future) entries
    torch.testing.assert_close(obs.probs.sum(-1), torch.ones(2, 4, 12))
    assert block._capture is None
    with pytest.raises(ValueError, match="made no attention call"):  # read from its operations: none is attention
        with capture(torch.nn.Linear(2, 2)):
            pass


def test_learned_and_qknorm_parameters_receive_gradients():
    for spec, name in (("learned", "log_factor"), ("qknorm", "gain")):
        block = ScaledAttention(16, 2, scale=spec)
        block(torch.randn(2, 5, 16)).square().sum().backward()
        grad = getattr(block, name).grad
        assert grad is not None and grad.abs().item() > 0
    assert ScaledAttention(16, 2, scale="learned").factor().item() == pytest.approx(8**-0.5)


def test_module_rejects_bad_configuration():
    with pytest.raises(ValueError, match="divisible"):
        ScaledAttention(10, 3)
    with pytest.raises(ValueError):
        ScaledAttention(16, 2, scale="bogus")
    with pytest.raises(ValueError):
        ScaledAttention(16, 2, init="xavier")
    with pytest.raises(ValueError):
        ScaledAttention(16, 0)
    with pytest.raises(ValueError, match="d_model=16"):
        ScaledAttention(16, 2)(torch.randn(2, 5, 15))


# ----------------------------------------------------------------------------- edge cases, the same in every impl

@pytest.mark.parametrize("impl", IMPLS)
def test_no_keys_give_zeros_and_no_queries_an_empty_output(impl):
    q, k, v = qkv((1, 2, 3, 4), t_k=5)
    no_keys = attention(q, k[..., :0, :], v[..., :0, :], impl=impl)
    assert torch.equal(no_keys, torch.zeros(1, 2, 3, 7))
    no_queries = attention(q[..., :0, :], k, v, impl=impl)
    assert no_queries.shape == (1, 2, 0, 7)
    if impl in ("naive", "stable"):
        out, probs = attention(q, k[..., :0, :], v[..., :0, :], impl=impl, return_weights=True)
        assert probs.shape == (1, 2, 3, 0) and torch.equal(out, no_keys)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_mask_that_would_enlarge_the_output_is_refused(impl):
    q, k, v = qkv((1, 1, 3, 4))
    with pytest.raises(ValueError, match="does not broadcast"):
        attention(q, k, v, mask=torch.ones(2, 1, 3, 3, dtype=torch.bool), impl=impl)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", ["stable", "online", "sdpa"])
def test_half_precision_with_large_q_and_k_stays_finite_and_close_to_float64(impl, dtype):
    """q, k of std 100 at d_k = 64: q.k reaches ~10^5, past float16's 65504.  The scores are
    computed in float32, so the result is the float64 one to the output's rounding."""
    q, k, v = qkv((1, 4, 64, 64), dtype=torch.float64, seed=3)
    q, k, v = (q * 100).to(dtype), (k * 100).to(dtype), v.to(dtype)
    if dtype == torch.float16:
        assert not torch.isfinite(q[0, 0] @ k[0, 0].T).all()  # the product itself overflows float16
    out = attention(q, k, v, impl=impl)
    expected, _ = reference(q, k, v, "sqrt")  # float64 on the same rounded inputs
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), expected, atol=2 * torch.finfo(dtype).eps * 4, rtol=0)


def test_naive_in_half_precision_is_the_baseline_that_overflows():
    q, k, v = qkv((1, 1, 16, 64), dtype=torch.float16, seed=3)
    assert not torch.isfinite(attention(q * 100, k * 100, v, impl="naive")).all()


def test_capture_is_a_mapping_and_leaves_masked_pairs_out_of_logit_statistics():
    torch.manual_seed(0)
    block = ScaledAttention(16, 2, causal=True)
    x = torch.randn(2, 5, 16)
    with capture(block) as seen:
        block(x)
    assert list(seen.keys()) == ["attn"] and "attn" in seen and dict(seen.items())["attn"] is seen["attn"]
    with pytest.raises(KeyError, match="no attention call recorded under 'blocks.0'; recorded: attn"):
        seen["blocks.0"]
    obs = seen["attn"]
    assert torch.isnan(obs.logits.std())  # the raw matrix holds the masked pairs
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    expected = obs.logits[..., allowed]  # (B, H, 15): the pairs a causal query may attend
    assert obs.allowed_logits.numel() == 2 * 2 * 15
    assert obs.logit_std() == pytest.approx(float(expected.double().std()), rel=1e-12)


def test_a_module_read_from_its_operations_leaves_its_masked_pairs_out_too():
    class Causal(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    with capture(Causal()) as seen:
        Causal()(q, k, v)
    (name, obs), = seen.items()
    expected = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(8))[..., torch.ones(4, 4, dtype=torch.bool).tril()]
    assert obs.allowed_logits.numel() == 2 * 10
    assert obs.logit_std() == pytest.approx(float(expected.std()), rel=1e-6)  # the factor as float32 reads it


@pytest.mark.parametrize("impl", ["sdpa", "naive", "stable", "online"])
@pytest.mark.parametrize("allowed", [True, False])
def test_a_scalar_mask_masks_everything_or_nothing(impl, allowed):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4) for _ in range(3))
    got = attention(q, k, v, mask=torch.tensor(allowed), impl=impl, block_size=1)
    expected = attention(q, k, v, impl="stable") if allowed else torch.zeros_like(q)
    assert torch.allclose(got, expected, atol=1e-6)
