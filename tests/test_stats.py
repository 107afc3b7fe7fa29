import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import numerics, stats
from attnscale.attention import attention


def random_probs(rows, n, seed=0, temperature=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, n, generator=g, dtype=torch.float64) * temperature, dim=-1)


@pytest.mark.parametrize("n", [2, 7, 128])
def test_uniform_rows_have_the_closed_forms(n):
    p = torch.full((3, n), 1.0 / n, dtype=torch.float64)
    torch.testing.assert_close(stats.entropy(p), torch.full((3,), math.log(n), dtype=torch.float64))
    torch.testing.assert_close(stats.normalized_entropy(p), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(stats.effective_support(p), torch.full((3,), float(n), dtype=torch.float64))
    torch.testing.assert_close(stats.kl_to_uniform(p), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(stats.max_prob(p), torch.full((3,), 1.0 / n, dtype=torch.float64))
    # J = I/n - 11^T/n^2 has eigenvalues 1/n (n-1 times) and 0.
    torch.testing.assert_close(stats.jacobian_spectral(p), torch.full((3,), 1.0 / n, dtype=torch.float64))
    torch.testing.assert_close(stats.jacobian_frobenius(p), torch.full((3,), math.sqrt(n - 1) / n, dtype=torch.float64))


def test_one_hot_rows_are_fully_saturated():
    p = torch.zeros(2, 9, dtype=torch.float64)
    p[:, 4] = 1.0
    assert torch.equal(stats.entropy(p), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(stats.normalized_entropy(p), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(stats.effective_support(p), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(stats.kl_to_uniform(p), torch.full((2,), math.log(9), dtype=torch.float64))
    assert torch.equal(stats.jacobian_frobenius(p), torch.zeros(2, dtype=torch.float64))
    assert stats.jacobian_spectral(p).abs().max() < 1e-12


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 9999), temperature=st.floats(0.01, 20))
def test_jacobian_is_the_derivative_of_softmax_and_norms_agree(n, seed, temperature):
    logits = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * temperature
    p = torch.softmax(logits, dim=-1)
    autograd_jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), logits)
    torch.testing.assert_close(stats.softmax_jacobian(p), autograd_jacobian, atol=1e-12, rtol=0)
    torch.testing.assert_close(stats.jacobian_frobenius(p), torch.linalg.matrix_norm(autograd_jacobian), atol=1e-10, rtol=0)
    torch.testing.assert_close(stats.jacobian_spectral(p), torch.linalg.matrix_norm(autograd_jacobian, ord=2), atol=1e-10, rtol=0)
    torch.testing.assert_close(stats.jacobian_diagonal(p), torch.diagonal(autograd_jacobian))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 50), seed=st.integers(0, 9999))
def test_kl_to_uniform_equals_its_definition(n, seed):
    p = random_probs(4, n, seed, temperature=3.0)
    direct = (p * torch.log(p * n)).sum(-1)
    torch.testing.assert_close(stats.kl_to_uniform(p), direct, atol=1e-12, rtol=0)
    assert (stats.normalized_entropy(p) <= 1 + 1e-12).all() and (stats.normalized_entropy(p) >= 0).all()


def test_masks_restrict_every_statistic_to_the_valid_keys():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 12, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 12, generator=g) < 0.6
    mask[:, 0] = True
    mask[:, 1] = True
    p = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    for row in range(5):
        valid = p[row][mask[row]]
        assert stats.entropy(p, mask)[row].item() == pytest.approx(stats.entropy(valid).item())
        assert stats.normalized_entropy(p, mask)[row].item() == pytest.approx(stats.normalized_entropy(valid).item())
        assert stats.kl_to_uniform(p, mask)[row].item() == pytest.approx(stats.kl_to_uniform(valid).item())
        assert stats.jacobian_frobenius(p, mask)[row].item() == pytest.approx(stats.jacobian_frobenius(valid).item())
        moments = stats.logit_moments(logits, mask)
        assert moments["mean"][row].item() == pytest.approx(logits[row][mask[row]].mean().item())
        assert moments["std"][row].item() == pytest.approx(logits[row][mask[row]].std(unbiased=False).item())
        assert moments["max_abs"][row].item() == pytest.approx(logits[row][mask[row]].abs().max().item())


def test_rows_with_one_valid_key_have_no_normalised_entropy():
    p = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, False, False], [True, True, False]])
    ne = stats.normalized_entropy(p, mask)
    assert math.isnan(ne[0].item()) and ne[1].item() == pytest.approx(1.0)
    summary = stats.summarize(p, mask)
    assert summary["rows"] == 1 and summary["uniform_share"] == 1.0 and summary["saturated_share"] == 0.0


def test_summarize_counts_saturated_and_uniform_rows():
    one_hot = torch.zeros(4, 10, dtype=torch.float64)
    one_hot[:, 0] = 1
    uniform = torch.full((6, 10), 0.1, dtype=torch.float64)
    summary = stats.summarize(torch.cat([one_hot, uniform]))
    assert summary["saturated_share"] == pytest.approx(0.4)
    assert summary["uniform_share"] == pytest.approx(0.6)
    assert summary["normalized_entropy"] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="two or more valid keys"):
        stats.summarize(torch.ones(3, 1))


def test_bad_input_raises():
    with pytest.raises(ValueError):
        stats.entropy(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError):
        stats.entropy(torch.ones(3, 4), mask=torch.ones(2, 4, dtype=torch.bool))


# ----------------------------------------------------------------------------- rows that hold no distribution

ROW_STATS = ["entropy", "normalized_entropy", "effective_support", "max_prob", "kl_to_uniform", "jacobian_frobenius",
             "jacobian_spectral"]


@pytest.mark.parametrize("name", ROW_STATS)
def test_rows_without_a_distribution_are_nan_and_leave_the_others_alone(name):
    """One convention: a fully masked row, an all-zero row (softmax of a fully masked row) and
    a row with NaN give NaN; every other row gets what it gets alone."""
    probs = random_probs(5, 4, seed=1)
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[1] = False
    probs[2] = 0.0
    probs[3, 1] = float("nan")
    got = getattr(stats, name)(probs, mask)
    assert torch.isnan(got[1:4]).all()
    for row in (0, 4):
        torch.testing.assert_close(got[row], getattr(stats, name)(probs[row : row + 1])[0])


@pytest.mark.parametrize("name", ROW_STATS)
def test_no_keys_at_all_is_nan_per_row(name):
    got = getattr(stats, name)(torch.zeros(3, 0))
    assert got.shape == (3,) and torch.isnan(got).all()


def test_one_key_rows_are_one_hot_distributions():
    one = torch.ones(2, 1, dtype=torch.float64)
    assert torch.equal(stats.entropy(one), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(stats.effective_support(one), torch.ones(2, dtype=torch.float64))
    assert torch.equal(stats.max_prob(one), torch.ones(2, dtype=torch.float64))
    assert torch.equal(stats.kl_to_uniform(one), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(stats.jacobian_frobenius(one), torch.zeros(2, dtype=torch.float64))
    assert torch.equal(stats.jacobian_spectral(one), torch.zeros(2, dtype=torch.float64))
    assert torch.isnan(stats.normalized_entropy(one)).all()


@pytest.mark.parametrize("name", [*ROW_STATS, "softmax_jacobian", "jacobian_diagonal"])
@pytest.mark.parametrize("bad, message", [([[1.5, -0.5]], "negative"), ([[0.5, 0.6]], "sum to 1"),
                                          ([[3.0, 1.0, -2.0]], "negative"), ([[2.0, 3.0]], "sum to 1")])
def test_negative_or_unnormalised_probabilities_are_refused(name, bad, message):
    with pytest.raises(ValueError, match=message):
        getattr(stats, name)(torch.tensor(bad, dtype=torch.float64))


def test_rounding_of_half_precision_softmax_is_accepted():
    logits = torch.randn(64, 1024, generator=torch.Generator().manual_seed(0)) * 3
    for dtype in (torch.float16, torch.bfloat16):
        assert torch.isfinite(stats.entropy(torch.softmax(logits.to(dtype), dim=-1))).all()


def test_logit_moments_of_rows_without_keys_are_nan():
    logits = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    moments = stats.logit_moments(logits, torch.tensor([[True, True], [False, False]]))
    assert torch.equal(moments["mean"][0], torch.tensor(2.0)) and moments["max_abs"][0] == 3.0
    assert all(torch.isnan(value[1]) for value in moments.values())
    empty = stats.logit_moments(torch.zeros(4, 0))
    assert all(value.shape == (4,) and torch.isnan(value).all() for value in empty.values())


def test_summarize_leaves_out_rows_without_a_distribution():
    probs = random_probs(4, 6, seed=2)
    whole = stats.summarize(probs[:2])
    probs[2] = float("nan")
    probs[3] = 0.0
    assert stats.summarize(probs) == whole


def test_jacobians_too_large_for_memory_are_refused_before_any_allocation(monkeypatch):
    """300,000 keys would need 300,000^2 float64 entries per row (720 GB): refused, naming the size."""
    monkeypatch.setenv("ATTNSCALE_MEMORY_LIMIT", "1G")
    probs = torch.full((1, 300_000), 1 / 300_000)
    for function in (stats.jacobian_spectral, stats.softmax_jacobian):
        with pytest.raises(ValueError, match="300000 keys"):
            function(probs)


def test_meta_tensors_are_refused_by_name():
    meta = torch.empty(2, 4, 8, device="meta")
    with pytest.raises(ValueError, match="q is on the meta device"):
        attention(meta, meta, meta)
    with pytest.raises(ValueError, match="meta device"):
        numerics.precision_check(meta, meta)
    with pytest.raises(ValueError, match="meta device"):
        stats.entropy(meta.softmax(-1))


@pytest.mark.parametrize("width", [0, 1, 4])
def test_row_table_equals_each_statistic_alone(width):
    """row_table checks the rows once and gives, bit for bit, what each function gives alone: with a
    mask, a fully masked row, an all-zero row, a NaN row and a one-key row among normal ones."""
    probs = random_probs(6, width, seed=3) if width else torch.zeros(6, 0)
    mask = torch.ones(6, width, dtype=torch.bool)
    if width == 4:
        mask[0, 2] = False
        probs[0] = probs[0].masked_fill(~mask[0], 0.0) / probs[0].masked_fill(~mask[0], 0.0).sum()
        mask[1] = False
        probs[2] = 0.0
        probs[3, 1] = float("nan")
        mask[4, 1:] = False
        probs[4] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    table = stats.row_table(probs, mask)
    for name in ROW_STATS[:-1]:
        assert torch.equal(table[name].isnan(), getattr(stats, name)(probs, mask).isnan()), name
        assert torch.equal(table[name].nan_to_num(7.0), getattr(stats, name)(probs, mask).nan_to_num(7.0)), name
    assert torch.equal(table["n_valid"], stats.n_valid(probs, mask))
    if width == 4:
        assert stats.summarize(probs, mask, table=table) == stats.summarize(probs, mask)
