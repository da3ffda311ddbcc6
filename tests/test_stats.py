"""verify.stats: log-scale paired ratios, their interval, the MDE and the three outcomes."""

from __future__ import annotations

import math

import pytest

from verify import stats

BASE = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0]


def test_geometric_mean_and_interval_match_scipy() -> None:
    from scipy import stats as sp

    variant = [80.0, 83.0, 77.0, 82.0, 78.0, 81.0]
    r = stats.paired_ratio(BASE, variant)
    logs = [math.log(v / b) for b, v in zip(BASE, variant, strict=True)]
    low, high = sp.t.interval(0.95, len(logs) - 1, loc=sum(logs) / 6, scale=sp.sem(logs))
    assert r.ratio == pytest.approx(math.exp(sum(logs) / 6))
    assert (r.low, r.high) == pytest.approx((math.exp(low), math.exp(high)))
    assert r.n == 6 and 0 < r.mde < 0.05


def test_paired_spread_is_the_sd_of_the_log_ratios() -> None:
    variant = [80.0, 83.0, 77.0, 82.0, 78.0, 81.0]
    logs = [math.log(v / b) for b, v in zip(BASE, variant, strict=True)]
    mean = sum(logs) / 6
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 5)
    assert stats.paired_spread(BASE, variant) == pytest.approx(sd)
    assert stats.paired_spread([1.0], [2.0]) is None
    with pytest.raises(ValueError, match="non-positive"):
        stats.paired_spread([1.0, 0.0], [1.0, 1.0])


def test_bounds_never_negative_on_wild_rounds() -> None:
    # The serve-bench rounds that gave "p99_itl 4.063 [-4.511, 12.637]" with a symmetric t.
    r = stats.paired_ratio([4.26, 4.39, 0.0024], [3.9, 4.1, 3.7])
    assert r.low > 0 and r.high > r.ratio > r.low
    assert stats.classify(r, 0.02) == stats.UNRESOLVED


def test_faster_on_a_resolved_speedup() -> None:
    r = stats.paired_ratio(BASE, [x * 0.8 for x in [100, 101, 99, 100, 98, 102]])
    assert stats.classify(r, 0.02) == stats.FASTER
    assert stats.classify(r, 0.02, lower_is_better=False) == stats.SLOWER


def test_slower_on_a_resolved_slowdown() -> None:
    r = stats.paired_ratio(BASE, [x * 1.3 for x in [100, 101, 99, 100, 98, 102]])
    assert stats.classify(r, 0.02) == stats.SLOWER
    assert not stats.within(r, 0.05)


def test_no_difference_when_the_interval_straddles_one() -> None:
    r = stats.paired_ratio(BASE, [110.0, 92.0, 105.0, 95.0, 103.0, 97.0])
    assert r.low < 1 < r.high
    assert stats.classify(r, 0.0) == stats.UNRESOLVED


def test_resolved_but_within_noise_is_no_difference() -> None:
    r = stats.paired_ratio(BASE, [x * 0.99 for x in BASE])
    assert r.high < 1  # resolved: every round is exactly 1% faster
    assert stats.classify(r, 0.02) == stats.UNRESOLVED
    assert stats.classify(r, 0.005) == stats.FASTER
    assert stats.within(r, 0.02)


def test_one_round_has_no_interval_and_resolves_nothing() -> None:
    r = stats.paired_ratio([100.0], [50.0])
    assert (r.low, r.high, r.mde) == (None, None, None)
    assert stats.classify(r, 0.02) == stats.UNRESOLVED
    assert "no interval" in r.text()


def test_mde_shrinks_with_more_rounds() -> None:
    noisy = [1.1, 0.9, 1.05, 0.95]
    few = stats.ratio_of_ratios(noisy)
    many = stats.ratio_of_ratios(noisy * 4)
    assert many.mde < few.mde


@pytest.mark.parametrize("base, var", [([1.0, 2.0], [1.0]), ([1.0, 0.0], [1.0, 1.0]), ([], [])])
def test_bad_rounds_are_named_errors(base, var) -> None:
    with pytest.raises(ValueError):
        stats.paired_ratio(base, var)


def _spread(point: float, sd: float, n: int) -> list[float]:
    """n log ratios with mean log(point) and sample standard deviation `sd` exactly."""
    raw = [i - (n - 1) / 2 for i in range(n)]
    scale = sd / math.sqrt(sum(x * x for x in raw) / (n - 1))
    return [math.log(point) + scale * x for x in raw]


@pytest.mark.parametrize("point, sd, n", [(0.995, 0.045, 10), (1.0, 0.03, 6), (1.01, 0.08, 4)])
def test_rounds_to_within_is_where_the_same_spread_first_bounds_it(point, sd, n) -> None:
    now = stats.from_log_ratios(_spread(point, sd, n))
    need = stats.rounds_to_within(now, 0.02, lower_is_better=False)
    assert need is not None and need > n
    assert stats.within(
        stats.from_log_ratios(_spread(point, sd, need)), 0.02, lower_is_better=False
    )
    before = stats.from_log_ratios(_spread(point, sd, need - 1))
    assert not stats.within(before, 0.02, lower_is_better=False)


def test_no_rounds_bound_a_point_beyond_the_threshold() -> None:
    beyond = stats.from_log_ratios(_spread(0.97, 0.02, 8))  # a 3% loss: more rounds resolve it
    assert stats.rounds_to_within(beyond, 0.02, lower_is_better=False) is None
    assert stats.rounds_to_within(stats.from_log_ratios([0.0]), 0.02) is None  # no interval


def test_clustered_ratio_takes_one_value_per_cluster() -> None:
    """Rounds of two engine-instance blocks: the interval is over the blocks' mean log ratios,
    so a per-instance offset that per-round pairing resolves (0.3% within every block) is not
    called a difference once the instances' offsets disagree."""
    base = [100.0] * 8
    var = [100.3] * 4 + [99.7] * 4  # block 0 +0.3%, block 1 -0.3%, no spread within a block
    per_round = stats.paired_ratio(base[:4], var[:4])
    assert per_round.low == per_round.high  # no spread: a zero-width "resolved" interval
    clustered = stats.clustered_ratio(base, var, [0, 0, 0, 0, 1, 1, 1, 1])
    assert clustered.n == 2
    assert clustered.low < 1 < clustered.high
    means = [math.log(1.003), math.log(0.997)]
    assert clustered.ratio == pytest.approx(math.exp(sum(means) / 2))


def test_clustered_ratio_of_one_cluster_has_no_interval_and_bad_labels_fail() -> None:
    one = stats.clustered_ratio([1.0, 1.0], [1.1, 1.2], ["a", "a"])
    assert one.n == 1 and one.low is None
    with pytest.raises(ValueError, match="cluster labels"):
        stats.clustered_ratio([1.0, 1.0], [1.1, 1.2], ["a"])
