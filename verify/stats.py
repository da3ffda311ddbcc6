"""The project's one statistics module: paired, interleaved A/B rounds compared on the log scale.

Every benchmark measures a baseline and a variant in the same round (interleaved), so the
per-round ratio ``variant_i / baseline_i`` cancels most machine drift. Ratios are averaged on
the log scale (geometric mean) and the 95% interval is ``exp(mean(log r) +- t * sd / sqrt(n))``
with Student's t from scipy: the bounds are always positive and ``1/r`` gives the same interval
inverted.

The minimum detectable effect (MDE) of a run is the smallest relative change it could have
resolved with 80% power at the 5% level: ``exp((t_0.975 + t_0.80) * sd / sqrt(n)) - 1`` (a
fraction, 0.05 = 5%). A "no difference resolved" next to an MDE of 30% says the run was too
noisy, not that the patch is neutral.

`classify` turns a ratio into one of three outcomes against a stated noise threshold:
``faster`` / ``slower`` when the interval excludes 1 and the point estimate lies beyond the
threshold, else ``no difference resolved``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from scipy.stats import t as student_t

FASTER = "faster"
SLOWER = "slower"
UNRESOLVED = "no difference resolved"
CONFIDENCE = 0.95
POWER = 0.80


@dataclass(frozen=True)
class Ratio:
    """Geometric-mean ratio variant/baseline over ``n`` paired rounds.

    ``low``/``high`` are None (no interval) with fewer than two rounds; ``mde`` likewise."""

    ratio: float
    low: float | None
    high: float | None
    n: int
    mde: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    def text(self, digits: int = 3) -> str:
        """``1.052 [0.981, 1.128], n=6`` (or ``1.052 (n=1, no interval)``)."""
        if self.low is None or self.high is None:
            return f"{self.ratio:.{digits}f} (n={self.n}, no interval)"
        return (
            f"{self.ratio:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}], n={self.n}"
        )


def t_quantile(df: int, q: float = 0.5 + CONFIDENCE / 2) -> float:
    """Student-t quantile (scipy)."""
    return float(student_t.ppf(q, df))


def from_log_ratios(logs: Sequence[float]) -> Ratio:
    """A Ratio from per-round log ratios."""
    n = len(logs)
    if n == 0:
        raise ValueError("no paired rounds to compare")
    mean = statistics.fmean(logs)
    if n < 2:
        return Ratio(math.exp(mean), None, None, n, None)
    se = statistics.stdev(logs) / math.sqrt(n)
    half = t_quantile(n - 1) * se
    detectable = (t_quantile(n - 1) + t_quantile(n - 1, POWER)) * se
    return Ratio(
        math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, math.expm1(detectable)
    )


def _paired_logs(baseline: Sequence[float], variant: Sequence[float]) -> list[float]:
    """log(variant[i] / baseline[i]) per round; every value must be positive: a zero or negative
    round measured nothing."""
    if len(baseline) != len(variant):
        raise ValueError(f"unpaired rounds: {len(baseline)} baseline vs {len(variant)} variant")
    bad = [x for x in (*baseline, *variant) if not x > 0]
    if bad:
        raise ValueError(f"a round measured a non-positive value ({bad[0]!r}); no ratio")
    return [math.log(v / b) for b, v in zip(baseline, variant, strict=True)]


def paired_ratio(baseline: Sequence[float], variant: Sequence[float]) -> Ratio:
    """Ratio variant/baseline of paired rounds (``baseline[i]`` and ``variant[i]`` measured in
    the same round)."""
    return from_log_ratios(_paired_logs(baseline, variant))


def clustered_ratio(
    baseline: Sequence[float], variant: Sequence[float], clusters: Sequence[object]
) -> Ratio:
    """Ratio variant/baseline of paired rounds grouped into clusters (e.g. the rounds of one
    set of engine instances between restarts): each cluster's mean log ratio is one
    observation, so the interval carries the between-cluster spread (an engine instance's own
    offset) and `n` counts clusters. One cluster gives the ratio without an interval."""
    logs = _paired_logs(baseline, variant)
    if len(clusters) != len(logs):
        raise ValueError(f"{len(clusters)} cluster labels for {len(logs)} rounds")
    groups: dict[object, list[float]] = {}
    for label, log in zip(clusters, logs, strict=True):
        groups.setdefault(label, []).append(log)
    return from_log_ratios([statistics.fmean(g) for g in groups.values()])


def paired_spread(baseline: Sequence[float], variant: Sequence[float]) -> float | None:
    """The standard deviation of the per-round log ratios of paired rounds: how far one run's
    rounds scatter (0.015 is about 1.5% per round); None with fewer than two rounds."""
    logs = _paired_logs(baseline, variant)
    return statistics.stdev(logs) if len(logs) > 1 else None


def ratio_of_ratios(rounds: Sequence[float]) -> Ratio:
    """A Ratio from per-round ratios already formed by the run (each must be positive)."""
    if any(not r > 0 for r in rounds):
        raise ValueError("a per-round ratio is not positive; no log-scale interval")
    return from_log_ratios([math.log(r) for r in rounds])


def classify(ratio: Ratio, threshold: float, *, lower_is_better: bool = True) -> str:
    """``faster`` / ``slower`` / ``no difference resolved`` for a variant/baseline ratio.

    `threshold` is the noise threshold as a fraction (0.02 = 2%): a change smaller than that is
    not called a difference even when the interval excludes 1. `lower_is_better` is True for
    times (ratio < 1 is faster) and False for throughputs (ratio > 1 is faster)."""
    if threshold < 0:
        raise ValueError("the noise threshold is a non-negative fraction")
    if ratio.low is None or ratio.high is None:
        return UNRESOLVED
    improved = ratio.high < 1 if lower_is_better else ratio.low > 1
    regressed = ratio.low > 1 if lower_is_better else ratio.high < 1
    beyond = abs(math.log(ratio.ratio)) > math.log1p(threshold)
    if improved and beyond:
        return FASTER
    if regressed and beyond:
        return SLOWER
    return UNRESOLVED


def within(ratio: Ratio, threshold: float, *, lower_is_better: bool = True) -> bool:
    """True when the whole interval excludes a regression larger than `threshold` (a resolved
    "not slower"; a non-inferiority check)."""
    if ratio.high is None or ratio.low is None:
        return False
    worst = ratio.high if lower_is_better else 1 / ratio.low
    return worst <= 1 + threshold


def rounds_to_within(
    ratio: Ratio, threshold: float, *, lower_is_better: bool = True, most: int = 10_000
) -> int | None:
    """The fewest rounds in all at which `within` would hold if the point estimate and the
    per-round spread stayed as measured (a planning figure, not a result); None without an
    interval, when the point itself is at or beyond the threshold, or beyond `most` rounds."""
    if ratio.low is None or ratio.high is None or ratio.n < 2:
        return None
    point = math.log(ratio.ratio)
    margin = math.log1p(threshold) - (point if lower_is_better else -point)
    if margin <= 0:
        return None
    sd = math.log(ratio.high / ratio.ratio) * math.sqrt(ratio.n) / t_quantile(ratio.n - 1)
    for n in range(ratio.n, most + 1):
        if t_quantile(n - 1) * sd / math.sqrt(n) <= margin:
            return n
    return None
