"""Uncertainty for the numbers a verdict rule compares with a threshold.

* :func:`wilson`: the Wilson score interval of a rate (k successes in n trials); unlike the
  normal approximation it stays inside [0, 1] and is usable at k = 0 or k = n with few trials;
* :func:`bootstrap`: a percentile bootstrap interval of any statistic of one sample, and
  :func:`bootstrap_ratio` for a ratio of two independent samples' statistics, both from a
  seeded generator (same seed, same interval);
* :func:`bonferroni_z`: the critical |z| of m two-sided tests whose family-wise false-rejection
  rate is at most ``alpha``;
* :func:`mean_interval`: the normal interval of a mean over independent rows, and
  :func:`t_interval` the Student t interval of a mean over a few (seeds: at 8 values the normal
  interval is 17% too narrow);
* :func:`side`: where an interval lies against a threshold ("above", "below" or "straddles"),
  the one question a rule asks of it: a rule decides a part of a claim only where the interval
  clears the threshold; :func:`at_least`, :func:`at_most` and :func:`inside` ask it as a part
  of a claim (True, False, or None where the interval straddles), and :func:`every` folds the
  parts of "at every setting";
* :func:`occurs`: the part "this event happens" from a count of rows: True once it is seen, False
  only where the Wilson interval shows it rarer than a stated share, None where too few rows
  were looked at to say; :func:`occurs_in` asks it of several groups measured apart.

Pure Python (the t quantile from scipy): these run on a few dozen numbers.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Callable, Sequence

from .errors import UserError

LEVEL = 0.95                # two-sided level of every interval a verdict quotes
BOOTSTRAP_RESAMPLES = 2000
FAMILY_ALPHA = 0.01         # the false-rejection rate of a Monte Carlo test of an exact claim


def normal_quantile(p: float) -> float:
    if not 0 < p < 1:
        raise UserError(f"p must lie in (0, 1), got {p!r}")
    return statistics.NormalDist().inv_cdf(p)


def z_of(level: float = LEVEL) -> float:
    """The two-sided normal critical value for ``level`` (1.96 at 0.95)."""
    if not 0 < level < 1:
        raise UserError(f"level must lie in (0, 1), got {level!r}")
    return normal_quantile(0.5 + level / 2)


def wilson(successes: int, trials: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of ``successes / trials``; (0, 1) for no trials."""
    if not (isinstance(successes, int) and isinstance(trials, int)) or not 0 <= successes <= trials:
        raise UserError(f"need integers 0 <= successes <= trials, got {successes!r} of {trials!r}")
    if trials == 0:
        return 0.0, 1.0
    z = z_of(level)
    rate = successes / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    # at k = 0 or k = n the bound is exactly 0 or 1; rounding must not move it
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == trials else min(1.0, centre + half))


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    values = sorted(values)
    tail = (1 - level) / 2
    low = values[max(0, math.floor(tail * len(values)))]
    high = values[min(len(values) - 1, math.ceil((1 - tail) * len(values)) - 1)]
    return low, high


def bootstrap(sample: Sequence[float], statistic: Callable[[list[float]], float] = statistics.median, *,
              seed: int = 0, level: float = LEVEL, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``sample`` (seeded)."""
    sample = list(sample)
    if not sample:
        raise UserError("bootstrap needs at least one value, got none")
    rng = random.Random(seed)
    draws = [statistic(rng.choices(sample, k=len(sample))) for _ in range(resamples)]
    return _percentiles(draws, level)


def bootstrap_ratio(numerator: Sequence[float], denominator: Sequence[float],
                    statistic: Callable[[list[float]], float] = statistics.median, *, seed: int = 0,
                    level: float = LEVEL, resamples: int = BOOTSTRAP_RESAMPLES,
                    numerator_high: Sequence[float] | None = None,
                    denominator_high: Sequence[float] | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of statistic(numerator) / statistic(denominator), the two
    samples resampled independently (seeded); a zero denominator gives inf.

    Where a value is only a lower bound (a run that did not finish within its budget: its true
    value lies anywhere above it), the samples hold each value's least possible value and
    ``numerator_high`` / ``denominator_high`` its greatest (inf for such a run), index for index.
    A resample draws the same indices from both; the interval's low end reads the least numerators
    over the greatest denominators, its high end the reverse, so it holds whatever the unfinished
    runs' true values are (an end they can move without limit is inf)."""
    numerator, denominator = list(numerator), list(denominator)
    if not numerator or not denominator:
        raise UserError("bootstrap_ratio needs values in both samples")
    numerator_high = numerator if numerator_high is None else list(numerator_high)
    denominator_high = denominator if denominator_high is None else list(denominator_high)
    if len(numerator_high) != len(numerator) or len(denominator_high) != len(denominator):
        raise UserError(f"numerator_high and denominator_high must match their samples' lengths "
                        f"({len(numerator)}, {len(denominator)}), got {len(numerator_high)}, {len(denominator_high)}")

    def ratio(top: float, bottom: float) -> float:
        return top / bottom if bottom else math.inf

    rng = random.Random(seed)
    lows, highs = [], []
    for _ in range(resamples):
        # indices drawn as rng.choices draws values: the same resamples as drawing the values
        tops = rng.choices(range(len(numerator)), k=len(numerator))
        bottoms = rng.choices(range(len(denominator)), k=len(denominator))
        lows.append(ratio(statistic([numerator[i] for i in tops]), statistic([denominator_high[i] for i in bottoms])))
        highs.append(ratio(statistic([numerator_high[i] for i in tops]), statistic([denominator[i] for i in bottoms])))
    return _percentiles(lows, level)[0], _percentiles(highs, level)[1]


def bonferroni_z(tests: int, alpha: float = FAMILY_ALPHA) -> float:
    """The |z| beyond which one of ``tests`` two-sided normal tests rejects, so that all of them
    together reject a true premise with probability at most ``alpha``."""
    if not isinstance(tests, int) or tests < 1:
        raise UserError(f"tests must be an integer >= 1, got {tests!r}")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must lie in (0, 1), got {alpha!r}")
    return normal_quantile(1 - alpha / (2 * tests))


def mean_interval(sample, level: float = LEVEL) -> tuple[float, float]:
    """mean +- z * std / sqrt(n) of a sample of independent values (a list, or a tensor of any
    shape, reduced in float64 without a round trip through Python floats)."""
    if hasattr(sample, "double") and hasattr(sample, "numel"):
        values = sample.detach().double().flatten()
        count = values.numel()
        bad = values[~values.isfinite()]
        first_bad = float(bad[0]) if bad.numel() else None
    else:
        try:
            values = [float(v) for v in sample]
        except (TypeError, ValueError) as error:
            raise UserError(f"the interval of a mean needs numbers: {error}") from None
        count = len(values)
        first_bad = next((v for v in values if not math.isfinite(v)), None)
    if first_bad is not None:
        raise UserError(f"the interval of a mean needs finite values, got {first_bad!r}; accepted: finite numbers")
    if count < 2:
        raise UserError(f"need at least two values for the interval of a mean, got {count}")
    if isinstance(values, list):
        mean, spread = statistics.fmean(values), statistics.stdev(values)
    else:
        mean, spread = float(values.mean()), float(values.std())
    half = z_of(level) * spread / math.sqrt(count)
    return mean - half, mean + half


def t_interval(sample: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """mean +- t(n - 1) * std / sqrt(n): the interval of the mean of a few independent, roughly normal values,
    :func:`mean_interval` (which checks the sample and the level) widened by t(n - 1) / z."""
    from scipy import stats

    low, high = mean_interval(sample, level)
    widen = float(stats.t.ppf(0.5 + level / 2, len(sample) - 1)) / z_of(level)
    mean, half = (low + high) / 2, (high - low) / 2 * widen
    return mean - half, mean + half


ABOVE, BELOW, STRADDLES = "above", "below", "straddles"


def side(interval: tuple[float, float], threshold: float) -> str:
    """"above" if the interval lies at or above the threshold, "below" if wholly below it,
    "straddles" otherwise."""
    low, high = interval
    if low >= threshold:
        return ABOVE
    if high < threshold:
        return BELOW
    return STRADDLES


def at_least(interval: tuple[float, float], threshold: float) -> bool | None:
    """The part "value >= threshold": True if the whole interval is, False if none of it is, None
    (undecided) where it straddles."""
    return {ABOVE: True, BELOW: False}.get(side(interval, threshold))


def at_most(interval: tuple[float, float], threshold: float) -> bool | None:
    """The part "value <= threshold", decided the same way."""
    low, high = interval
    return True if high <= threshold else False if low > threshold else None


def inside(interval: tuple[float, float], low: float, high: float) -> bool | None:
    """The part "low <= value <= high": True if the interval lies inside the band, False if it lies
    wholly outside, None otherwise."""
    if interval[0] >= low and interval[1] <= high:
        return True
    if interval[1] < low or interval[0] > high:
        return False
    return None


def every(parts) -> bool | None:
    """A part that must hold at every setting: False if it fails at one, True if it holds at all,
    None (undecided) otherwise."""
    parts = list(parts)
    return False if False in parts else True if all(p is True for p in parts) else None


def some(parts) -> bool | None:
    """A part that holds if it holds in one case: True if one case holds, False if every case
    fails, None (undecided) otherwise."""
    parts = list(parts)
    return True if True in parts else False if parts and all(p is False for p in parts) else None


def occurs(count: int, trials: int, rare: float, level: float = LEVEL) -> bool | None:
    """The part "the event happens" from ``count`` rows of ``trials`` showing it: True if any does
    (an observed case settles existence), False if none does and the Wilson interval's upper
    bound is at most ``rare``, None (undecided) if none does but too few rows were seen to bound
    the rate below ``rare``."""
    if not 0 < rare < 1:
        raise UserError(f"rare must lie in (0, 1), got {rare!r}")
    if count:
        return True
    return False if wilson(0, trials, level)[1] <= rare else None


def occurs_in(groups, rare: float, level: float = LEVEL) -> bool | None:
    """The part "the event happens" over groups of rows measured apart (``(count, trials)`` each: one
    case, one layer): True if one group shows it, False only where every group bounds its own rate
    at or below ``rare``, None (undecided) otherwise; no groups is undecided."""
    return some(occurs(count, trials, rare, level) for count, trials in groups)


def fmt_interval(interval: tuple[float, float], digits: int = 2, percent: bool = False) -> str:
    """'[0.95-1.7]'; an open end (inf) as ∞: '[0.95-∞]'."""
    low, high = interval

    def number(value: float) -> str:
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        return f"{value:.0%}" if percent else f"{value:.{digits}g}"

    return f"[{number(low)}-{number(high)}]"
