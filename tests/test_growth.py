"""verify.growth: the 003 microbenchmark's grows-vs-flat rule."""

from __future__ import annotations

import pytest

from verify.growth import length_growth, length_verdict


def _rows(pen_pr, pen_pa, think_pr, think_pa):
    keys = ("penalties_pristine_ms", "penalties_patched_ms", "think_pristine_ms",
            "think_patched_ms")  # fmt: skip
    columns = zip(pen_pr, pen_pa, think_pr, think_pa, strict=True)
    return [dict(zip(keys, vals, strict=True)) for vals in columns]


def test_pristine_grows_patched_flat_passes():
    rows = _rows([1, 10, 50], [0.3, 0.4, 0.5], [4, 70, 190], [0.2, 0.3, 0.3])
    assert length_growth(rows)["penalties_pristine"] == pytest.approx(50)
    assert length_verdict(rows) == (True, "")


def test_patched_build_growing_with_L_fails():
    # micro-003 of the first H100 run: the patched penalty build grew 9.8x.
    rows = _rows([1.40, 54.9], [0.39, 3.84], [3.9, 192.9], [0.22, 0.34])
    ok, reason = length_verdict(rows)
    assert not ok and reason.startswith("patched penalties cost grows 9.8x")


def test_pristine_that_does_not_grow_fails():
    ok, reason = length_verdict(_rows([1, 3], [1, 1], [1, 10], [1, 1]))
    assert not ok and "pristine penalties cost grows only 3.0x" in reason
