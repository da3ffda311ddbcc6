"""verify.sparse_penalties: the dense vs sparse benchmark verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verify import sparse_penalties

PARAMS = {"vocab_size": 151936, "prompt_len": 512}
THRESHOLD = 0.05  # a noise threshold as a registry step states it


def _row(length: int, ratio: float, equal: bool = True) -> dict:
    return {"L": length, "dense_ms": 1.0, "sparse_ms": 1.0 / ratio,
            "ratio_median_of_steps": ratio, "equal": equal}  # fmt: skip


@pytest.mark.parametrize("version,patch", [("0.22.0", "0008"), ("0.33.0", "0005")])
def test_ratio_matches_the_patch(version: str, patch: str) -> None:
    root = Path(__file__).resolve().parent.parent / "patches" / version
    text = next(root.glob(f"{patch}-*.patch")).read_text()
    ratio = re.search(r"^\+_SPARSE_PENALTIES_MIN_RATIO = (\d+)$", text, re.M)
    assert ratio and int(ratio.group(1)) == sparse_penalties.SPARSE_MIN_RATIO


def test_chosen_up_to() -> None:
    assert sparse_penalties.chosen_up_to(PARAMS) == 151936 // 12 - 512


def test_slower_beyond_the_switch_passes() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_row(4096, 3.0), _row(16384, 0.6)], THRESHOLD)
    assert judged.outcome == "pass" and "no interval recorded" in judged.reason


def test_slower_where_chosen_fails() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_row(256, 5.0), _row(8192, 0.9)], THRESHOLD)
    assert judged.outcome == "fail" and "L=[8192]" in judged.reason


def test_unequal_results_fail() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_row(256, 5.0, equal=False)], THRESHOLD)
    assert judged.outcome == "fail" and "differ" in judged.reason


def test_no_rows_fail() -> None:
    judged = sparse_penalties.verdict(PARAMS, [], THRESHOLD)
    assert (judged.outcome, judged.reason) == ("fail", "no lengths measured")


def test_table_has_one_line_per_length() -> None:
    assert len(sparse_penalties.table([_row(256, 2.0), _row(512, 1.5)]).splitlines()) == 4


CUDA = {**PARAMS, "device": "cuda"}


@pytest.mark.parametrize("version,patch", [("0.22.0", "0008"), ("0.33.0", "0005")])
def test_the_patch_takes_the_sparse_path_for_cpu_logits_only(version: str, patch: str) -> None:
    root = Path(__file__).resolve().parent.parent / "patches" / version
    text = next(root.glob(f"{patch}-*.patch")).read_text()
    assert '+        logits.device.type == "cpu"' in text


def test_never_chosen_off_cpu() -> None:
    assert sparse_penalties.chosen_up_to(CUDA) == -1


def test_dense_faster_off_cpu_passes() -> None:
    rows = [_row(256, 0.7), _row(4096, 1.04), _row(12288, 0.6)]  # 1.04: within the noise
    assert sparse_penalties.verdict(CUDA, rows, THRESHOLD).outcome == "pass"


def test_sparse_clearly_faster_off_cpu_fails() -> None:
    judged = sparse_penalties.verdict(CUDA, [_row(256, 1.2), _row(12288, 0.6)], THRESHOLD)
    assert judged.outcome == "fail"
    assert "unused on cuda" in judged.reason and "L=[256]" in judged.reason


GPU = {**PARAMS, "device": "cuda"}


def _one_pass(row: dict, ratio: float, identical: bool = True) -> dict:
    return {**row, "one_pass_ms": 1.0 / ratio, "one_pass_bit_identical": identical,
            "dense_over_one_pass_median_of_steps": ratio}  # fmt: skip


def test_one_pass_faster_and_identical_passes() -> None:
    rows = [_one_pass(_row(256, 0.7), 4.0), _one_pass(_row(12288, 0.9), 3.0)]
    assert sparse_penalties.verdict(GPU, rows, THRESHOLD).outcome == "pass"


def test_one_pass_bits_differ_fails() -> None:
    rows = [_one_pass(_row(256, 0.7), 4.0), _one_pass(_row(4096, 0.7), 4.0, identical=False)]
    judged = sparse_penalties.verdict(GPU, rows, THRESHOLD)
    assert judged.outcome == "fail"
    assert "bits differ" in judged.reason and "L=[4096]" in judged.reason


def test_one_pass_slower_fails() -> None:
    judged = sparse_penalties.verdict(GPU, [_one_pass(_row(4096, 0.7), 0.95)], THRESHOLD)
    assert judged.outcome == "fail" and "slower than the dense path" in judged.reason


def test_table_has_one_pass_columns() -> None:
    text = sparse_penalties.table([_one_pass(_row(256, 0.7), 4.0), _row(512, 0.7)])
    assert "one-pass ms" in text and "4.00x (median)" in text and "| - | - | - |" in text


# Runs that kept per-step times: judged on the paired ratio's 95% interval (verify.stats).


def _timed(length: int, speedup: float, spread: float = 0.02, steps: int = 12) -> dict:
    """A row with per-step times whose dense / sparse ratio is `speedup`, +-`spread` per step."""
    dense = [10.0 * (1 + 0.1 * (i % 3)) for i in range(steps)]
    sparse = [d / (speedup * (1 + spread * (-1) ** i)) for i, d in enumerate(dense)]
    return {**_row(length, speedup), "dense_ms_steps": dense, "sparse_ms_steps": sparse}


def test_interval_faster_where_chosen_passes_with_its_interval() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_timed(256, 20.0), _timed(8192, 2.0)], THRESHOLD)
    assert judged.outcome == "pass"
    assert re.search(r"dense / sparse 2\.00 \[1\.9\d, 2\.0\d\], n=12 at L=8192", judged.reason)
    assert "no interval" not in judged.reason


def test_interval_slower_where_chosen_fails() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_timed(256, 20.0), _timed(8192, 0.8)], THRESHOLD)
    assert judged.outcome == "fail" and "L=[8192]" in judged.reason


def test_interval_that_reaches_one_where_chosen_is_unresolved() -> None:
    judged = sparse_penalties.verdict(
        PARAMS, [_timed(256, 20.0), _timed(4096, 1.01, 0.2)], THRESHOLD
    )
    assert judged.outcome == "no difference resolved" and "L=[4096]" in judged.reason


def test_interval_beyond_the_switch_is_not_judged_on_cpu() -> None:
    judged = sparse_penalties.verdict(PARAMS, [_timed(4096, 3.0), _timed(16384, 0.6)], THRESHOLD)
    assert judged.outcome == "pass"


def test_interval_unused_gain_off_cpu_fails_and_an_open_one_is_unresolved() -> None:
    assert sparse_penalties.verdict(CUDA, [_timed(256, 1.5)], THRESHOLD).outcome == "fail"
    assert sparse_penalties.verdict(CUDA, [_timed(256, 0.7)], THRESHOLD).outcome == "pass"
    open_ = sparse_penalties.verdict(CUDA, [_timed(256, 1.08, 0.2)], THRESHOLD)
    assert open_.outcome == "no difference resolved"


def test_interval_one_pass_slower_fails() -> None:
    row = _timed(4096, 0.7)
    row |= {"one_pass_ms_steps": [d / 0.8 for d in row["dense_ms_steps"]],
            "one_pass_bit_identical": True}  # fmt: skip
    judged = sparse_penalties.verdict(CUDA, [row], THRESHOLD)
    assert judged.outcome == "fail" and "slower than the dense path" in judged.reason


def test_numbers_and_table_carry_the_intervals() -> None:
    rows = [_timed(256, 20.0)]
    assert sparse_penalties.numbers(PARAMS, rows)["dense_over_sparse"]["256"]["n"] == 12
    assert re.search(r"\| 20\.00x \[\d+\.\d\d, \d+\.\d\d\] \|", sparse_penalties.table(rows))


def test_the_threshold_is_the_callers():
    # a 4% one-pass slowdown, tightly resolved: within a 5% threshold, beyond a 1% one
    rows = [_one_pass(_timed(4096, 0.7), 0.96)]
    rows[0]["one_pass_ms_steps"] = [d / 0.96 for d in rows[0]["dense_ms_steps"]]
    assert sparse_penalties.verdict(GPU, rows, 0.05).outcome != "fail"
    assert sparse_penalties.verdict(GPU, rows, 0.01).outcome == "fail"
