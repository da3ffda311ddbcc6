"""At the end of a run, one line per distinct skip reason with its count (`skipped: N x why`),
most frequent first: what a CI log shows was not tested, and why."""

from __future__ import annotations

from collections import Counter

import pytest


def reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The skip reason of a report, without pytest's `Skipped: ` prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter) -> None:
    counts = Counter(reason(r) for r in terminalreporter.stats.get("skipped", []))
    if not counts:
        return
    terminalreporter.section("skipped, by reason")
    for why, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        terminalreporter.line(f"skipped: {count} x {why}")
