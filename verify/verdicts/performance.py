"""Performance: the 95% interval of a paired variant/baseline ratio (verify.stats) against a
stated noise threshold. Two claims:

- ``faster``: pass only on a resolved speed-up beyond the threshold; fail on a resolved
  slow-down; otherwise "no difference resolved" (with the run's MDE in the reason).
- ``not slower``: pass when the whole interval excludes a regression beyond the threshold;
  fail on a resolved slow-down; otherwise "no difference resolved".
"""

from __future__ import annotations

from verify import stats
from verify.verdicts import FAIL, PASS, UNRESOLVED, Verdict

CLAIMS = ("faster", "not slower")


def _mde(ratio: stats.Ratio) -> str:
    if ratio.mde is None:
        return f"n={ratio.n}: no interval"
    return f"the run could resolve only changes above {ratio.mde:.1%}"


def judge(
    ratio: stats.Ratio,
    threshold: float,
    *,
    claim: str = "faster",
    lower_is_better: bool = True,
    what: str = "time",
) -> Verdict:
    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {CLAIMS}, not {claim!r}")
    numbers = {**ratio.as_dict(), "threshold": threshold, "claim": claim}
    state = stats.classify(ratio, threshold, lower_is_better=lower_is_better)
    label = f"{what} patched/pristine {ratio.text()}"
    if state == stats.SLOWER:
        return Verdict(FAIL, f"slower: {label}, beyond the {threshold:.0%} threshold", numbers)
    if claim == "faster" and state == stats.FASTER:
        return Verdict(PASS, f"faster: {label}", numbers)
    if claim == "not slower" and stats.within(ratio, threshold, lower_is_better=lower_is_better):
        return Verdict(PASS, f"not slower: {label}", numbers)
    return Verdict(UNRESOLVED, f"{label}; {_mde(ratio)}", numbers)
