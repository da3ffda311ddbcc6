"""verify.importer.penalty_memory: the MRV2 penalty state's bytes judged against the pin's and
the doubling bound, on synthetic runs."""

from __future__ import annotations

from verify.importer import penalty_memory

MIB = 1 << 20


def _row(k: int, rows: int, n: int = 1024, vocab: int = 151936) -> dict:
    per_row = (vocab + vocab // 32) * 4
    return {"max_num_reqs": n, "vocab": vocab, "penalty_requests": k,
            "pristine_bytes": n * per_row, "patched_bytes": rows * per_row,
            "patched_rows": rows, "kv_tokens_freed": (n - rows) * per_row // 147456}  # fmt: skip


def test_rows_within_the_doubling_bound_pass_and_the_headline_names_the_saving():
    rows = [_row(0, 0), _row(1, 8), _row(64, 64), _row(1024, 1024)]
    verdict = penalty_memory.judge(rows)
    assert verdict.outcome == "pass", verdict.reason
    assert "612 MiB -> 0" in verdict.reason
    headline = penalty_memory.headline(rows, None)
    assert (
        headline.startswith("612 MiB -> 0 of GPU memory")
        and "64 penalty requests take 38 MiB" in headline
    )


def test_the_headline_names_the_warm_up_rows_the_run_recorded():
    rows = [_row(0, 0), _row(1, 8), _row(8, 8), _row(64, 64), _row(1024, 1024)]
    assert "the kernel warm-up's 8 rows, 4.8 MiB, stay" in penalty_memory.headline(rows, 8)
    assert "warm-up" not in penalty_memory.headline(rows, None)


def test_a_state_that_keeps_rows_without_penalty_requests_fails():
    assert penalty_memory.judge([_row(0, 8), _row(64, 64)]).outcome == "fail"


def test_a_state_above_the_doubling_bound_or_the_old_size_fails():
    assert penalty_memory.judge([_row(0, 0), _row(8, 32)]).outcome == "fail"
    assert penalty_memory.judge([_row(0, 0), _row(1024, 1100)]).outcome == "fail"
