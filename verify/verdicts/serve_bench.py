"""Serving verdict (`vllm bench serve` A/B): output throughput (higher is better) and p99
inter-token latency (lower is better), each as a paired per-round ratio patched/pristine.

Claim ``not slower`` (the default; most patches do not aim to speed up serving): fail when
either metric is resolved worse beyond the threshold; pass when both intervals exclude a
regression beyond it; else no difference resolved. Claim ``faster``: throughput must be
resolved faster and p99 ITL not worse.
"""

from __future__ import annotations

from verify import stats
from verify.verdicts import FAIL, PASS, UNRESOLVED, Verdict, performance

METRICS = {"output_throughput": False, "p99_itl_ms": True}  # name -> lower is better


def judge(
    pristine: dict[str, list[float]],
    patched: dict[str, list[float]],
    threshold: float = 0.05,
    claim: str = "not slower",
) -> Verdict:
    """`pristine` / `patched`: per-round values of each metric, rounds paired by index."""
    parts = {}
    for metric, lower in METRICS.items():
        ratio = stats.paired_ratio(pristine[metric], patched[metric])
        part_claim = claim if metric == "output_throughput" else "not slower"
        parts[metric] = performance.judge(
            ratio, threshold, claim=part_claim, lower_is_better=lower, what=metric
        )
    numbers = {m: v.numbers for m, v in parts.items()}
    failed = [v.reason for v in parts.values() if v.outcome == FAIL]
    if failed:
        return Verdict(FAIL, "; ".join(failed), numbers)
    reasons = "; ".join(v.reason for v in parts.values())
    if all(v.outcome == PASS for v in parts.values()):
        return Verdict(PASS, reasons, numbers)
    return Verdict(UNRESOLVED, reasons, numbers)
