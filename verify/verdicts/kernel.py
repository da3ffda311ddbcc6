"""Kernel verdict: correctness, then speed the way vLLM calls the kernel (eagerly).

Raw rows (the kernel raw-data contract, as ``scripts/gpu_kernel_bench.py`` writes them)::

    {variant, baseline, vocab, requests, draft_tokens (int | list), draft_probs (bool),
     identical (bool), graph_us: [per-round medians], eager_us: [per-round medians, L2 flushed],
     host_us: [per-round medians]}

(or, for a benchmark that names its shapes, `shape` (str) in place of requests, draft_tokens
and draft_probs).

Per shape the variant is compared with its baseline row of the same shape and round order:

- fail when any row of the variant is not identical;
- fail when the eager ratio or the host ratio is resolved slower beyond the threshold;
- claim ``faster``: pass when eager is resolved faster and host is not slower;
  claim ``not slower``: pass when both intervals exclude a regression beyond the threshold;
- inconclusive when eager or host figures are missing (a CUDA-graph time alone never passes);
- otherwise no difference resolved.

The step's verdict is the worst shape's, and its reason counts the shapes per outcome.
"""

from __future__ import annotations

from typing import Any

from verify import stats
from verify.verdicts import FAIL, INCONCLUSIVE, PASS, UNRESOLVED, Verdict, combine

Row = dict[str, Any]


def shape_key(row: Row) -> tuple:
    if "shape" in row:  # a benchmark that names its shapes itself
        return (row["vocab"], row["shape"])
    draft = row["draft_tokens"]
    return (
        row["vocab"],
        row["requests"],
        tuple(draft) if isinstance(draft, list) else draft,
        bool(row["draft_probs"]),
    )


def shape_name(row: Row) -> str:
    if "shape" in row:
        return row["shape"]
    draft = row["draft_tokens"]
    draft = "ragged" if isinstance(draft, list) else draft
    probs = ", draft probs" if row["draft_probs"] else ""
    return f"vocab {row['vocab']}, {row['requests']}x{draft}{probs}"


def _ratio(base: list[float], var: list[float]) -> stats.Ratio | None:
    n = min(len(base), len(var))
    return stats.paired_ratio(base[:n], var[:n]) if n else None


def judge_shape(row: Row, base: Row, threshold: float, claim: str) -> Verdict:
    name = shape_name(row)
    if not row["identical"]:
        return Verdict(FAIL, f"{name}: output differs from the reference")
    eager = _ratio(base.get("eager_us") or [], row.get("eager_us") or [])
    host = _ratio(base.get("host_us") or [], row.get("host_us") or [])
    numbers = {"eager": eager and eager.as_dict(), "host": host and host.as_dict()}
    states = {
        what: stats.classify(r, threshold) if r else None
        for what, r in (("eager", eager), ("host", host))
    }
    slower = [w for w, s in states.items() if s == stats.SLOWER]
    if slower:
        detail = ", ".join(
            f"{w} {r.text()}" for w, r in (("eager", eager), ("host", host)) if w in slower
        )
        return Verdict(FAIL, f"{name}: slower ({detail})", numbers)
    missing = [w for w, r in (("eager", eager), ("host", host)) if r is None]
    if missing:
        return Verdict(INCONCLUSIVE, f"{' and '.join(missing)} time not recorded", numbers)
    if claim == "faster":
        ok = states["eager"] == stats.FASTER
    else:
        ok = stats.within(eager, threshold) and stats.within(host, threshold)
    if ok:
        return Verdict(PASS, f"{name}: eager {eager.text()}, host {host.text()}", numbers)
    return Verdict(UNRESOLVED, f"{name}: eager {eager.text()}, host {host.text()}", numbers)


def judge(rows: list[Row], variant: str, threshold: float, claim: str) -> Verdict:
    """Verdict of `variant` over every shape it was measured at."""
    mine = [r for r in rows if r["variant"] == variant]
    if not mine:
        return Verdict(INCONCLUSIVE, f"no rows of variant {variant!r}")
    by_shape = {(r["variant"], shape_key(r)): r for r in rows}
    parts = []
    for row in mine:
        base = by_shape.get((row["baseline"], shape_key(row)))
        if base is None:
            parts.append(Verdict(INCONCLUSIVE, f"{shape_name(row)}: no {row['baseline']} row"))
        else:
            parts.append(judge_shape(row, base, threshold, claim))
    worst = combine(parts)
    counts = {
        o: sum(p.outcome == o for p in parts) for o in dict.fromkeys(p.outcome for p in parts)
    }
    summary = ", ".join(f"{o} at {n} of {len(parts)} shapes" for o, n in counts.items())
    examples = [p.reason for p in parts if p.outcome == worst.outcome][:3]
    reason = f"{variant} vs {mine[0]['baseline']}: {summary}" + (
        f" (e.g. {'; '.join(examples)})" if worst.outcome != PASS else ""
    )
    if worst.outcome == INCONCLUSIVE and "not recorded" in worst.reason:
        reason += "; a CUDA-graph time alone is not the way vLLM launches the kernel"
    return Verdict(worst.outcome, reason, {"shapes": len(parts), "outcomes": counts})
