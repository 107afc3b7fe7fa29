"""Intervals against closed forms and simulation: Wilson bounds, the percentile bootstrap, the
Bonferroni critical value, and where an interval lies against a threshold."""

import math
import random
import statistics

import pytest

from attnscale import intervals

Z = intervals.z_of(0.95)


def test_z_is_the_normal_quantile():
    assert Z == pytest.approx(1.959963984540054, abs=1e-12)
    assert intervals.bonferroni_z(1, 0.05) == pytest.approx(Z, abs=1e-12)
    assert intervals.bonferroni_z(39, 0.01) == pytest.approx(intervals.normal_quantile(1 - 0.01 / 78))


@pytest.mark.parametrize("n", [1, 3, 4, 6, 12, 100])
def test_wilson_at_the_edges_has_closed_forms(n):
    assert intervals.wilson(0, n) == pytest.approx((0.0, Z * Z / (n + Z * Z)))
    assert intervals.wilson(n, n) == pytest.approx((n / (n + Z * Z), 1.0))


def test_wilson_matches_its_formula_and_covers_the_rate():
    k, n = 7, 12
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    assert intervals.wilson(k, n) == pytest.approx((centre - half, centre + half))
    assert intervals.wilson(7, 12) == pytest.approx((0.3196, 0.8067), abs=1e-4)  # a textbook value
    assert intervals.wilson(0, 0) == (0.0, 1.0)


def test_wilson_covers_a_true_rate_about_95_percent_of_the_time():
    rng = random.Random(0)
    n, rate, trials = 40, 0.3, 4000
    covered = 0
    for _ in range(trials):
        k = sum(rng.random() < rate for _ in range(n))
        low, high = intervals.wilson(k, n)
        covered += low <= rate <= high
    assert 0.93 <= covered / trials <= 0.97


def test_bootstrap_is_seeded_and_brackets_the_statistic():
    sample = [1.0, 2.0, 2.5, 4.0, 10.0]
    first = intervals.bootstrap(sample, statistics.median, seed=3)
    assert first == intervals.bootstrap(sample, statistics.median, seed=3)
    assert first[0] <= statistics.median(sample) <= first[1]
    assert intervals.bootstrap([5.0] * 4) == (5.0, 5.0)
    assert intervals.bootstrap_ratio([6.0] * 3, [2.0] * 5) == (3.0, 3.0)
    assert intervals.bootstrap_ratio([1.0], [0.0]) == (math.inf, math.inf)


def test_a_censored_run_leaves_the_ratio_open_where_its_resamples_reach():
    """A run unfinished within its budget is given at the budget (its least value) and inf (its
    greatest).  One such run of six in the numerator: a resample's median reaches it where 3 or more of
    its 6 draws are that run, P = 1 - sum_{j<3} C(6,j) (1/6)^j (5/6)^(6-j) = 0.062 > 2.5%, so the high
    end is open while the low end is the one read at the budget.  In the denominator it opens the low
    end instead.  With no bound given, the interval is the plain one (the same resamples)."""
    least = [100.0, 110.0, 120.0, 130.0, 140.0, 300.0]
    greatest = least[:-1] + [math.inf]
    plain = intervals.bootstrap_ratio(least, [50.0] * 4)
    low, high = intervals.bootstrap_ratio(least, [50.0] * 4, numerator_high=greatest)
    assert (low, high) == (plain[0], math.inf) and plain[1] < math.inf
    low, high = intervals.bootstrap_ratio([100.0] * 4, least, denominator_high=greatest)
    assert low == 0.0 and high == intervals.bootstrap_ratio([100.0] * 4, least)[1]
    # a censored run too rare to reach the 2.5% tail: 1 of 20, P(median reaches it) ~ 1e-5
    assert intervals.bootstrap_ratio([100.0] * 20, [50.0] * 4, numerator_high=[100.0] * 19 + [math.inf]) == (2.0, 2.0)
    with pytest.raises(ValueError, match=r"numerator_high and denominator_high must match their samples' lengths \(2, 1\), got 1, 1"):
        intervals.bootstrap_ratio([1.0, 2.0], [1.0], numerator_high=[1.0])
    assert intervals.fmt_interval((0.95, math.inf)) == "[0.95-∞]"


def test_side_of_a_threshold():
    assert intervals.side((0.6, 0.9), 0.5) == intervals.ABOVE
    assert intervals.side((0.1, 0.4), 0.5) == intervals.BELOW
    assert intervals.side((0.4, 0.6), 0.5) == intervals.STRADDLES


def test_an_event_occurs_once_seen_and_fails_only_where_enough_rows_bound_its_rate():
    # At k = 0 the Wilson upper bound is z^2 / (n + z^2): it reaches a rate r from n = z^2 (1/r - 1).
    rare = 0.001
    enough = math.ceil(Z * Z * (1 / rare - 1))
    assert intervals.occurs(0, enough, rare) is False
    assert intervals.occurs(0, enough - 1, rare) is None  # undecided: too few rows to bound the rate
    assert intervals.occurs(1, 10**6, rare) is True and intervals.occurs(1, 1, rare) is True
    assert intervals.occurs(0, 0, rare) is None


@pytest.mark.parametrize("call", [lambda: intervals.wilson(3, 2), lambda: intervals.occurs(0, 10, 0.0), lambda: intervals.wilson(-1, 2),
                                  lambda: intervals.wilson(1.5, 2), lambda: intervals.bootstrap([]),
                                  lambda: intervals.bonferroni_z(0), lambda: intervals.bonferroni_z(3, 1.5),
                                  lambda: intervals.z_of(1.0), lambda: intervals.bootstrap_ratio([], [1.0])])
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_mean_interval_of_a_tensor_equals_that_of_its_values_and_covers_the_mean():
    import torch

    sample = torch.randn(4096, generator=torch.Generator().manual_seed(5)) * 2.0 + 1.0
    from_tensor = intervals.mean_interval(sample)
    from_list = intervals.mean_interval(sample.tolist())
    assert from_tensor == pytest.approx(from_list, rel=1e-12)
    half = intervals.z_of() * 2.0 / math.sqrt(4096)  # the closed form with the true std
    assert from_tensor[1] - from_tensor[0] == pytest.approx(2 * half, rel=0.05)
    assert from_tensor[0] < 1.0 < from_tensor[1]
    assert intervals.mean_interval(sample.view(64, 64)) == from_tensor  # any shape, flattened
    for few in (torch.tensor([1.0]), torch.tensor([]), [2.0], []):
        with pytest.raises(ValueError, match="at least two values"):
            intervals.mean_interval(few)


@pytest.mark.parametrize("sample", [[1.0, float("inf")], [float("nan"), 1.0, 2.0], [1.0, float("-inf")]])
def test_mean_interval_refuses_values_that_are_not_finite_naming_one(sample):
    """A list or a tensor alike: one line naming the value (it was an AttributeError from statistics for a list, and
    a silent (nan, nan) for a tensor)."""
    import torch

    for given in (sample, torch.tensor(sample)):
        with pytest.raises(ValueError, match=r"needs finite values, got (inf|nan|-inf); accepted: finite numbers"):
            intervals.mean_interval(given)
    with pytest.raises(ValueError, match="needs numbers"):
        intervals.mean_interval(["a", 1.0])
