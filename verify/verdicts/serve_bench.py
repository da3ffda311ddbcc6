"""Serving verdict (`vllm bench serve` A/B): output throughput (higher is better) and p99
inter-token latency (lower is better), each as a paired per-round ratio patched/pristine.

Claim ``not slower`` (the default; most patches do not aim to speed up serving): fail when
either metric is resolved worse beyond the threshold; pass when both intervals exclude a
regression beyond it; else no difference resolved. Claim ``faster``: throughput must be
resolved faster and p99 ITL not worse.

A round whose value is below DEGENERATE_FRACTION of the metric's largest round measured nothing
(on the 2-core CPU server the whole stream can reach the client in one burst: p99 ITL 0.003 ms
beside rounds of 10-150 ms). Such a round and its pair are left out of that metric, and the
reason says how many; a metric left with fewer than two pairs is not judged ("no difference
resolved"), so the step cannot pass on it.
"""

from __future__ import annotations

from verify import stats
from verify.verdicts import FAIL, PASS, UNRESOLVED, Verdict, performance

METRICS = {"output_throughput": False, "p99_itl_ms": True}  # name -> lower is better
DEGENERATE_FRACTION = 0.01


def measured_pairs(a: list[float], b: list[float]) -> tuple[list[float], list[float], list[int]]:
    """(a, b) without the paired rounds where either value measured nothing, and the indices
    of the rounds left out."""
    floor = DEGENERATE_FRACTION * max([*a, *b], default=0.0)
    left = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if min(x, y) <= floor]
    keep = [i for i in range(len(a)) if i not in left]
    return [a[i] for i in keep], [b[i] for i in keep], left


def _judge_metric(a: list[float], b: list[float], metric: str, threshold: float, claim: str):
    """One metric's verdict over its measured pairs (see measured_pairs)."""
    a, b, left = measured_pairs(a, b)
    out = f"{len(left)} of {len(a) + len(left)} rounds measured nothing (a value below "
    out += f"{DEGENERATE_FRACTION:.0%} of the largest)"
    if len(a) < 2:
        return Verdict(UNRESOLVED, f"{metric} not judged: {out}", {"rounds_left_out": left})
    lower = METRICS[metric]
    part = performance.judge(
        stats.paired_ratio(a, b), threshold, claim=claim, lower_is_better=lower, what=metric
    )
    if not left:
        return part
    return Verdict(part.outcome, f"{part.reason} ({out}: left out with their pairs)",
                   {**part.numbers, "rounds_left_out": left})  # fmt: skip


def judge(
    pristine: dict[str, list[float]],
    patched: dict[str, list[float]],
    threshold: float,
    claim: str = "not slower",
) -> Verdict:
    """`pristine` / `patched`: per-round values of each metric, rounds paired by index."""
    parts = {}
    for metric in METRICS:
        part_claim = claim if metric == "output_throughput" else "not slower"
        parts[metric] = _judge_metric(
            pristine[metric], patched[metric], metric, threshold, part_claim
        )
    numbers = {m: v.numbers for m, v in parts.items()}
    failed = [v.reason for v in parts.values() if v.outcome == FAIL]
    if failed:
        return Verdict(FAIL, "; ".join(failed), numbers)
    reasons = "; ".join(v.reason for v in parts.values())
    if all(v.outcome == PASS for v in parts.values()):
        return Verdict(PASS, reasons, numbers)
    return Verdict(UNRESOLVED, reasons, numbers)
