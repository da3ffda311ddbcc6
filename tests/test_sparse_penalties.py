"""verify.sparse_penalties: the dense vs sparse benchmark verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verify import sparse_penalties

PARAMS = {"vocab_size": 151936, "prompt_len": 512}


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
    ok, reason = sparse_penalties.verdict(PARAMS, [_row(4096, 3.0), _row(16384, 0.6)])
    assert ok and reason == ""


def test_slower_where_chosen_fails() -> None:
    ok, reason = sparse_penalties.verdict(PARAMS, [_row(256, 5.0), _row(8192, 0.9)])
    assert not ok and "L=[8192]" in reason


def test_unequal_results_fail() -> None:
    ok, reason = sparse_penalties.verdict(PARAMS, [_row(256, 5.0, equal=False)])
    assert not ok and "differ" in reason


def test_no_rows_fail() -> None:
    assert sparse_penalties.verdict(PARAMS, []) == (False, "no lengths measured")


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
    assert sparse_penalties.verdict(CUDA, rows) == (True, "")


def test_sparse_clearly_faster_off_cpu_fails() -> None:
    ok, reason = sparse_penalties.verdict(CUDA, [_row(256, 1.2), _row(12288, 0.6)])
    assert not ok and "unused on cuda" in reason and "L=[256]" in reason


GPU = {**PARAMS, "device": "cuda"}


def _one_pass(row: dict, ratio: float, identical: bool = True) -> dict:
    return {**row, "one_pass_ms": 1.0 / ratio, "one_pass_bit_identical": identical,
            "dense_over_one_pass_median_of_steps": ratio}  # fmt: skip


def test_one_pass_faster_and_identical_passes() -> None:
    rows = [_one_pass(_row(256, 0.7), 4.0), _one_pass(_row(12288, 0.9), 3.0)]
    assert sparse_penalties.verdict(GPU, rows) == (True, "")


def test_one_pass_bits_differ_fails() -> None:
    rows = [_one_pass(_row(256, 0.7), 4.0), _one_pass(_row(4096, 0.7), 4.0, identical=False)]
    ok, reason = sparse_penalties.verdict(GPU, rows)
    assert not ok and "bits differ" in reason and "L=[4096]" in reason


def test_one_pass_slower_fails() -> None:
    ok, reason = sparse_penalties.verdict(GPU, [_one_pass(_row(4096, 0.7), 0.95)])
    assert not ok and "slower than the dense path" in reason


def test_table_has_one_pass_columns() -> None:
    text = sparse_penalties.table([_one_pass(_row(256, 0.7), 4.0), _row(512, 0.7)])
    assert "one-pass ms" in text and "4.00x" in text and "| - | - | - |" in text
