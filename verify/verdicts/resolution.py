"""Resolution of an A/B run (the A/B core's calibration): what the run could tell apart, from
two controls measured in the same rounds as the patch.

- A/A (the baseline against a second copy of itself): its interval must contain 1, else the
  run sees a difference where there is none -> fail. Its half-width is the run's resolution;
  within `target` (1% for GPU output throughput) the run resolves a `target` effect.
- planted (the baseline slowed by a known amount): it must be resolved slower, with the size
  expected from what was planted inside its interval (`predicted`: the ratio if all of the
  planted delay were on the critical path) -> else fail.

pass: both controls behave and A/A is within `target`; no difference resolved: both behave but
A/A is wider than `target` (the run resolves only larger effects); fail: a control misbehaved."""

from __future__ import annotations

from verify import stats
from verify.verdicts import FAIL, PASS, UNRESOLVED, Verdict


def half_width(ratio: stats.Ratio) -> float:
    """The larger distance of the interval's bounds from 1 (as a fraction)."""
    return max(ratio.high - 1, 1 - ratio.low)


def judge(aa: stats.Ratio, planted: stats.Ratio, predicted: float | None, target: float) -> Verdict:
    if aa.low is None or planted.low is None:
        return Verdict(UNRESOLVED, f"fewer than two rounds (A/A n={aa.n})")
    numbers = {
        "aa": aa.as_dict(),
        "aa_half_width": half_width(aa),
        "planted": planted.as_dict(),
        "planted_predicted": predicted,
        "target": target,
    }
    problems = []
    if not aa.low <= 1 <= aa.high:
        problems.append(f"A/A {aa.text()} excludes 1")
    if not planted.high < 1:
        problems.append(f"planted slowdown not resolved: {planted.text()}")
    elif predicted is not None and not planted.low <= predicted <= planted.high:
        problems.append(f"planted {planted.text()} misses its expected size {predicted:.3f}")
    if problems:
        return Verdict(FAIL, "; ".join(problems), numbers)
    text = f"A/A {aa.text()} (+-{half_width(aa):.2%}); planted {planted.text()}" + (
        f", expected {predicted:.3f}" if predicted is not None else ""
    )
    if half_width(aa) <= target:
        return Verdict(PASS, f"resolves {target * 100:g}%: {text}", numbers)
    return Verdict(
        UNRESOLVED, f"resolves only +-{half_width(aa):.2%}, not {target * 100:g}%: {text}", numbers
    )
