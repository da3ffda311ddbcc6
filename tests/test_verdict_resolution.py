"""The A/B core's calibration verdict fails when either control misbehaves."""

import pytest

from verify import stats
from verify.verdicts import resolution


def R(ratio, low, high, n=20):
    return stats.Ratio(ratio, low, high, n, 0.01)


AA_TIGHT, AA_WIDE = R(1.002, 0.995, 1.009), R(1.019, 0.977, 1.063)
PLANTED = R(0.907, 0.874, 0.941)


@pytest.mark.parametrize(
    ("aa", "planted", "predicted", "outcome", "words"),
    [
        (AA_TIGHT, PLANTED, 0.903, "pass", "resolves 1%"),
        (AA_WIDE, PLANTED, 0.903, "no difference resolved", "resolves only +-6.30%"),
        (R(1.03, 1.01, 1.05), PLANTED, 0.903, "fail", "excludes 1"),
        (AA_TIGHT, R(0.99, 0.97, 1.01), 0.903, "fail", "not resolved"),
        (AA_TIGHT, R(1.05, 1.02, 1.08), 0.903, "fail", "not resolved"),
        (AA_TIGHT, PLANTED, 0.80, "fail", "misses its expected size"),
    ],
    ids=["tight", "wide", "aa-excludes-1", "planted-missed", "planted-wrong-sign", "wrong-size"],
)
def test_resolution_verdict(aa, planted, predicted, outcome, words):
    verdict = resolution.judge(aa, planted, predicted, 0.01)
    assert verdict.outcome == outcome
    assert words in verdict.reason
