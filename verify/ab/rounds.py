"""The round loop of the A/B core: every variant is measured once per round, in an order that
rotates from round to round (for two variants: A B, B A, A B, ...), warm-up rounds are
discarded, and each comparison is a paired ratio of the rounds' values through `verify.stats`.

The loop knows nothing about what a measurement is: `measure(variant, round_index)` returns a
dict of metrics (a `vllm bench serve` run against one server, an engine's timed batch, ...).
A time budget ends the loop after the last whole round that fits, so a 9-minute device call
keeps every round it finished."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from verify import stats

Measure = Callable[[str, int], dict[str, float]]


@dataclass
class Round:
    index: int
    order: tuple[str, ...]
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    warmup: bool = False
    block: int | None = None  # the engine instances' restart block (None: no restarts)


def round_orders(variants: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """One order per round from a cyclic Latin square (for two variants A B, B A, ...), and for
    more than two its mirror after it, so each variant runs equally often in every position
    and after each other variant."""
    n = len(variants)
    orders = [tuple(variants[(i + k) % n] for k in range(n)) for i in range(n)]
    if n > 2:
        orders += [tuple(reversed(o)) for o in orders]
    return [orders[i % len(orders)] for i in range(rounds)]


def run_rounds(
    measure: Measure,
    variants: Sequence[str],
    rounds: int,
    *,
    warmup: int = 1,
    budget_s: float | None = None,
    on_round: Callable[[Round], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Round]:
    """`warmup` + `rounds` rounds (fewer when `budget_s` runs out: the loop stops before a round
    that would not fit, judged by the slowest round so far)."""
    if len(set(variants)) != len(variants) or len(variants) < 2:
        raise ValueError(f"need at least two distinct variants, got {list(variants)}")
    started, slowest, done = clock(), 0.0, []
    for i, order in enumerate(round_orders(variants, warmup + rounds)):
        if budget_s is not None and done and clock() - started + slowest > budget_s:
            break
        t0 = clock()
        rnd = Round(i, order, warmup=i < warmup)
        for variant in order:
            rnd.values[variant] = measure(variant, i)
        slowest = max(slowest, clock() - t0)
        done.append(rnd)
        if on_round:
            on_round(rnd)
    return done


def paired(rounds: Sequence[Round], baseline: str, variant: str, metric: str) -> stats.Ratio:
    """variant/baseline of `metric` over the counted (non-warm-up) rounds; where the engines
    were restarted between blocks of rounds, over the blocks (`stats.clustered_ratio`: n is
    the number of blocks)."""
    counted = [r for r in rounds if not r.warmup]
    if not counted:
        raise ValueError("no counted rounds (all were warm-up, or none ran)")
    base = [r.values[baseline][metric] for r in counted]
    var = [r.values[variant][metric] for r in counted]
    if any(r.block is not None for r in counted):  # engines restarted: one value per block
        return stats.clustered_ratio(base, var, [r.block for r in counted])
    return stats.paired_ratio(base, var)


def compare(
    rounds: Sequence[Round],
    baseline: str,
    variant: str,
    metric: str,
    *,
    threshold: float,
    higher_is_better: bool,
) -> dict:
    """The ratio with its interval and MDE, and `faster` / `slower` / `no difference resolved`
    against the noise threshold."""
    ratio = paired(rounds, baseline, variant, metric)
    outcome = stats.classify(ratio, threshold, lower_is_better=not higher_is_better)
    counted = [r for r in rounds if not r.warmup]
    blocks = {r.block for r in counted if r.block is not None}
    unit = f" engine restarts ({len(counted)} rounds)" if blocks else ""
    return {
        "baseline": baseline,
        "variant": variant,
        "metric": metric,
        **ratio.as_dict(),
        **({"blocks": len(blocks), "rounds": len(counted)} if blocks else {}),
        "threshold": threshold,
        "outcome": outcome,
        "text": f"{variant}/{baseline} {metric} {ratio.text()}{unit}"
        + (f", MDE {ratio.mde:.1%}" if ratio.mde is not None else ""),
    }


def from_records(records: Sequence[dict]) -> list[Round]:
    """Rounds back from `as_records` (a record's raw part)."""
    return [
        Round(r["index"], tuple(r["order"]), r["values"], r["warmup"], r.get("block"))
        for r in records
    ]


def as_records(rounds: Sequence[Round]) -> list[dict]:
    """Rounds as plain dicts (the raw part of a record)."""
    out = []
    for r in rounds:
        out.append({"index": r.index, "order": list(r.order), "warmup": r.warmup})
        if r.block is not None:
            out[-1]["block"] = r.block
        out[-1]["values"] = r.values
    return out
