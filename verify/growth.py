"""Verdict of the 003 microbenchmark (issue 8, step 2): how the per-step host cost of the
penalty build and of the thinking-budget scan grows with the generated length L.

The cost must grow with L in pristine and stay flat patched: "grows" = more than
`GROWS` times from the shortest to the longest L, "flat" = less than `FLAT` times.
Rows are `scripts/bench_003_cpu.py` results (one per L, shortest first).
"""

from __future__ import annotations

GROWS = 4.0
FLAT = 2.0
PARTS = ("penalties", "think")


def length_growth(rows: list[dict]) -> dict[str, float]:
    """Cost at the longest L over the cost at the shortest, per part and root."""
    first, last = rows[0], rows[-1]
    return {
        f"{part}_{root}": last[f"{part}_{root}_ms"] / first[f"{part}_{root}_ms"]
        for part in PARTS
        for root in ("pristine", "patched")
    }


def length_verdict(rows: list[dict]) -> tuple[bool, str]:
    """(passes, reason when it does not)."""
    growth = length_growth(rows)
    grown = [p for p in PARTS if growth[f"{p}_pristine"] <= GROWS]
    not_flat = [p for p in PARTS if growth[f"{p}_patched"] >= FLAT]
    if not grown and not not_flat:
        return True, ""
    reasons = [
        f"patched {p} cost grows {growth[f'{p}_patched']:.1f}x with L "
        f"(pristine {growth[f'{p}_pristine']:.1f}x)"
        for p in not_flat
    ]
    reasons += [f"pristine {p} cost grows only {growth[f'{p}_pristine']:.1f}x" for p in grown]
    return False, "; ".join(reasons)
