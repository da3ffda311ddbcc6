"""Verdict rules, one module per rule; each returns a `Verdict` and can fail on its claim.

| module        | judges                                                                     |
|---------------|----------------------------------------------------------------------------|
| `identity`    | token/vector identity, after a pristine-vs-pristine control                |
| `performance` | the 95% interval of a paired ratio against a stated noise threshold        |
| `kernel`      | correctness, eager time (L2 flushed) and host time per call, per shape     |
| `serve_bench` | `vllm bench serve` output throughput and p99 inter-token latency           |
| `growth`      | how a per-step host cost grows with the generated length                   |

Outcomes: pass / fail / no difference resolved / inconclusive / not applicable / not run.
"no difference resolved" is never a pass: it says the run could not tell (with its MDE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
UNRESOLVED = "no difference resolved"
INCONCLUSIVE = "inconclusive"
NOT_APPLICABLE = "not applicable"
NOT_RUN = "not run"
OUTCOMES = (PASS, FAIL, UNRESOLVED, INCONCLUSIVE, NOT_APPLICABLE, NOT_RUN)
#: How outcomes combine when a step has several parts: the first one present wins.
PRECEDENCE = (FAIL, INCONCLUSIVE, UNRESOLVED, PASS, NOT_APPLICABLE, NOT_RUN)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    reason: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {self.outcome!r}")
        if self.outcome != PASS and not self.reason:
            raise ValueError(f"a {self.outcome!r} verdict needs a reason")


def combine(parts: list[Verdict]) -> Verdict:
    """One verdict from several parts (e.g. per shape): the worst outcome by PRECEDENCE, with
    the reasons of the parts that have it."""
    if not parts:
        return Verdict(NOT_RUN, "nothing was measured")
    worst = min(parts, key=lambda v: PRECEDENCE.index(v.outcome)).outcome
    reasons = [v.reason for v in parts if v.outcome == worst and v.reason]
    return Verdict(worst, "; ".join(dict.fromkeys(reasons)))
