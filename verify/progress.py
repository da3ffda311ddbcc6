"""Progress lines on stderr for long steps (download, unpack, git add), and `Steps`: a
pipeline of named steps with a final summary table (step, outcome, time, detail)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from verify.verdicts import PRECEDENCE


def say(message: str) -> None:
    print(f"[patchbench] {message}", file=sys.stderr, flush=True)


class Progress:
    """Prints `label: done/total (pct)` at most every `interval` seconds, and once at the end."""

    def __init__(self, label: str, total: int | None, unit: str = "", interval: float = 2.0):
        self.label, self.total, self.unit, self.interval = label, total, unit, interval
        self.done = 0
        self._last = 0.0
        self._start = time.monotonic()

    def _fmt(self, n: int) -> str:
        if self.unit == "B":
            return f"{n / 2**20:.1f} MiB"
        return f"{n}{self.unit}"

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._print()

    def _print(self) -> None:
        if self.total:
            pct = 100.0 * self.done / self.total
            say(f"{self.label}: {self._fmt(self.done)}/{self._fmt(self.total)} ({pct:.0f}%)")
        else:
            say(f"{self.label}: {self._fmt(self.done)}")

    def finish(self) -> None:
        self._print()
        say(f"{self.label}: done in {time.monotonic() - self._start:.1f}s")


@dataclass
class StepResult:
    name: str
    outcome: str  # one of verify.verdicts.OUTCOMES
    seconds: float | None = None
    detail: str = ""


class Steps:
    """A pipeline of named steps: progress as each starts and ends, a summary table at the end.

    A step whose prerequisite did not pass is `not run` (naming it); a failing step does not
    stop independent later steps.
    """

    def __init__(self, title: str, planned: list[str]):
        self.title, self.planned = title, planned
        self.results: dict[str, StepResult] = {}
        self._start = time.monotonic()

    def _position(self, name: str) -> str:
        index = self.planned.index(name) + 1 if name in self.planned else len(self.results) + 1
        return f"[{index}/{len(self.planned)}]"

    def run(self, name: str, action: Callable[[], object], needs: tuple[str, ...] = ()) -> bool:
        """Run `action`; the step passes when it returns without raising, unless it returns a
        verdict (an object with ``outcome`` and ``reason``, e.g. `results.step_verdict`):
        then that is the step's outcome and its reason the detail. True if it passed."""
        blocked = [n for n in needs if self.outcome(n) != "pass"]
        if blocked:
            why = f"{blocked[0]}: {self.outcome(blocked[0])}"
            return self._record(StepResult(name, "not run", None, why))
        say(f"{self._position(name)} {self.title}: {name} ...")
        started = time.monotonic()
        try:
            verdict = action()
        except Exception as exc:  # the step's own output says why; keep going
            detail = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            return self._record(StepResult(name, "fail", time.monotonic() - started, detail[0]))
        outcome = getattr(verdict, "outcome", "pass")
        reason = " ".join(str(getattr(verdict, "reason", "")).split())
        return self._record(StepResult(name, outcome, time.monotonic() - started, reason))

    def not_applicable(self, name: str, reason: str) -> None:
        self._record(StepResult(name, "not applicable", None, reason))

    def outcome(self, name: str) -> str:
        result = self.results.get(name)
        return result.outcome if result else "not run"

    def _record(self, result: StepResult) -> bool:
        self.results[result.name] = result
        took = f" in {result.seconds:.0f}s" if result.seconds is not None else ""
        why = f" ({result.detail})" if result.detail else ""
        where = f"{self._position(result.name)} {self.title}: {result.name}"
        say(f"{where}: {result.outcome}{took}{why}")
        return result.outcome == "pass"

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results.values() if r.outcome in ("fail", "not run")]

    def overall(self) -> str:
        """fail when a step failed or did not run, else the worst outcome of the steps (pass
        only when every step passed or was not applicable)."""
        if self.failed:
            return "fail"
        outcomes = {r.outcome for r in self.results.values()} - {"not applicable"}
        return min(outcomes | {"pass"}, key=PRECEDENCE.index)

    def table(self) -> str:
        rows = [("step", "outcome", "time", "detail")]
        for name in self.planned + [n for n in self.results if n not in self.planned]:
            r = self.results.get(name, StepResult(name, "not run", None, "not reached"))
            took = f"{r.seconds:.0f}s" if r.seconds is not None else "-"
            rows.append((r.name, r.outcome, took, r.detail[:70]))
        total = time.monotonic() - self._start
        rows.append(("total", self.overall(), f"{total:.0f}s", ""))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows]  # fmt: skip
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.insert(-1, lines[1])
        return f"{self.title}: summary\n" + "\n".join(lines)
