"""Growth with the generated length L (0.22.0's 003 patches): pristine's per-step host cost
grows with L; the patched cost must grow far less and be lower at the longest L.

Rule (replaces "patched < 2x", which failed a 130x improvement whose patched cost rose
0.05 -> 0.19 ms): with g = cost(longest L) / cost(shortest L) per part,

- inconclusive when pristine grows <= GROWS (the workload did not exercise the length);
- fail when the patched cost at the longest L is not below pristine's, or when the patched
  growth is more than the square root of pristine's (log g_patched > log g_pristine / 2:
  the patched cost still scales with L at more than half pristine's rate);
- pass otherwise.
"""

from __future__ import annotations

import math

from verify.verdicts import FAIL, INCONCLUSIVE, PASS, Verdict, combine

GROWS = 4.0
PARTS = ("penalties", "think")


def length_growth(rows: list[dict]) -> dict[str, float]:
    """Cost at the longest L over the cost at the shortest, per part and root."""
    first, last = rows[0], rows[-1]
    return {
        f"{part}_{root}": last[f"{part}_{root}_ms"] / first[f"{part}_{root}_ms"]
        for part in PARTS
        if f"{part}_pristine_ms" in first
        for root in ("pristine", "patched")
    }


def _part(rows: list[dict], part: str) -> Verdict:
    first, last = rows[0], rows[-1]
    pristine = last[f"{part}_pristine_ms"] / first[f"{part}_pristine_ms"]
    patched = last[f"{part}_patched_ms"] / first[f"{part}_patched_ms"]
    span = f"L {first['L']}..{last['L']}"
    if pristine <= GROWS:
        return Verdict(INCONCLUSIVE, f"pristine {part} grows only {pristine:.1f}x over {span}")
    if last[f"{part}_patched_ms"] >= last[f"{part}_pristine_ms"]:
        return Verdict(FAIL, f"patched {part} is not faster than pristine at L {last['L']}")
    if math.log(patched) > math.log(pristine) / 2:
        return Verdict(
            FAIL,
            f"patched {part} still scales with L: {patched:.1f}x vs pristine {pristine:.1f}x "
            f"over {span}",
        )
    return Verdict(
        PASS,
        f"{part}: pristine {pristine:.1f}x, patched {patched:.1f}x over {span}; "
        f"{last[f'{part}_pristine_ms'] / last[f'{part}_patched_ms']:.0f}x faster at L {last['L']}",
    )


def judge(rows: list[dict]) -> Verdict:
    """Rows: one per L, shortest first, with ``<part>_{pristine,patched}_ms`` medians."""
    if len(rows) < 2:
        return Verdict(INCONCLUSIVE, "fewer than two lengths measured")
    parts = [_part(rows, p) for p in PARTS if f"{p}_pristine_ms" in rows[0]]
    verdict = combine(parts)
    if verdict.outcome == PASS:
        return Verdict(PASS, "; ".join(v.reason for v in parts), length_growth(rows))
    return Verdict(verdict.outcome, verdict.reason, length_growth(rows))
