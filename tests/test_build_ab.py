"""verify.build_ab: the staging-fill A/B verdict (patch 0009)."""

from __future__ import annotations

from verify import build_ab


def _row(length: int, low: float, mismatched: int = 0) -> dict:
    return {"L": length, "a_ms_median": 0.17, "b_ms_median": 0.03, "a_over_b": low + 0.1,
            "ci95": [low, low + 0.2], "steps": 100, "mismatched_steps": mismatched}  # fmt: skip


def test_faster_and_equal_passes() -> None:
    assert build_ab.verdict([_row(256, 5.0), _row(4096, 3.0)]) == (True, "")


def test_mismatched_steps_fail() -> None:
    ok, reason = build_ab.verdict([_row(256, 5.0, mismatched=1)])
    assert not ok and "differ at L=[256]" in reason


def test_interval_reaching_one_fails() -> None:
    ok, reason = build_ab.verdict([_row(256, 5.0), _row(4096, 0.95)])
    assert not ok and "L=[4096]" in reason


def test_no_rows_fail() -> None:
    assert build_ab.verdict([]) == (False, "no lengths measured")


def test_table_has_one_line_per_length() -> None:
    assert len(build_ab.table([_row(256, 5.0), _row(4096, 3.0)]).splitlines()) == 4
