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
    """The run's resolution, for a reason; empty without an interval (the ratio's own text
    already says "no interval")."""
    if ratio.mde is None:
        return ""
    return f"; the run could resolve only changes above {ratio.mde:.1%}"


def judge(
    ratio: stats.Ratio,
    threshold: float,
    *,
    claim: str = "faster",
    lower_is_better: bool = True,
    what: str = "time",
    pair: str = "patched/pristine",
) -> Verdict:
    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {CLAIMS}, not {claim!r}")
    numbers = {**ratio.as_dict(), "threshold": threshold, "claim": claim}
    state = stats.classify(ratio, threshold, lower_is_better=lower_is_better)
    label = f"{what} {pair} {ratio.text()}"
    if state == stats.SLOWER:
        return Verdict(FAIL, f"slower: {label}, beyond the {threshold:.0%} threshold", numbers)
    if claim == "faster" and state == stats.FASTER:
        return Verdict(PASS, f"faster: {label}", numbers)
    if claim == "not slower" and stats.within(ratio, threshold, lower_is_better=lower_is_better):
        return Verdict(PASS, f"not slower: {label}", numbers)
    plan = ""
    if claim == "not slower":
        need = stats.rounds_to_within(ratio, threshold, lower_is_better=lower_is_better)
        numbers["rounds_to_within"] = need
        if need is not None:
            plan = f"; about {need} rounds in all would bound it within {threshold:.0%}"
            plan += " if its point and spread held"
    return Verdict(UNRESOLVED, f"{label}{_mde(ratio)}{plan}", numbers)


def judge_shapes(
    ratios: dict[str, stats.Ratio],
    threshold: float,
    *,
    claim: str = "faster",
    lower_is_better: bool = True,
) -> Verdict:
    """One verdict over several shapes of one benchmark: fail when any shape is resolved
    slower; claim ``faster``: pass when at least one shape is resolved faster (the others
    listed as unresolved); claim ``not slower``: pass when every shape excludes a regression."""
    if not ratios:
        return Verdict(UNRESOLVED, "no shape was measured")
    state = {
        name: stats.classify(r, threshold, lower_is_better=lower_is_better)
        for name, r in ratios.items()
    }
    numbers = {name: r.as_dict() for name, r in ratios.items()}

    def listed(names: list[str]) -> str:
        return ", ".join(f"{n} {ratios[n].text()}" for n in names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else ""
        )

    by = {s: [n for n, v in state.items() if v == s] for s in (stats.SLOWER, stats.FASTER)}
    rest = [n for n in ratios if n not in by[stats.SLOWER] + by[stats.FASTER]]
    total = len(ratios)
    if by[stats.SLOWER]:
        return Verdict(
            FAIL,
            f"slower at {len(by[stats.SLOWER])} of {total}: {listed(by[stats.SLOWER])}",
            numbers,
        )
    if claim == "not slower":
        within_all = all(
            stats.within(r, threshold, lower_is_better=lower_is_better) for r in ratios.values()
        )
        if within_all:
            return Verdict(PASS, f"not slower at any of {total} shapes", numbers)
        loose = [
            n
            for n, r in ratios.items()
            if not stats.within(r, threshold, lower_is_better=lower_is_better)
        ]
        return Verdict(
            UNRESOLVED,
            f"a regression beyond {threshold:.0%} not excluded at {listed(loose)}",
            numbers,
        )
    if by[stats.FASTER]:
        tail = f"; no difference resolved at {len(rest)}: {listed(rest)}" if rest else ""
        return Verdict(
            PASS,
            f"faster at {len(by[stats.FASTER])} of {total}: {listed(by[stats.FASTER])}{tail}",
            numbers,
        )
    return Verdict(UNRESOLVED, f"no shape resolved faster: {listed(rest)}", numbers)
