"""Issue 22's host-time goal: 0011's penalty kernel at several output lengths, side by side
(scripts/gpu_penalty_state_length_bench.py -> microbench-gpu-003-state-length). The host time
per call at the longest L must not grow over the shortest's; GPU and eager time may."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from verify.importer import gpu_state_length

LENGTHS = (256, 2048, 8192)


def _rows(host_growth: float, noise: float = 0.002, shape: str = "apply (now), 64 rows") -> list:
    """Length rows whose host time grows by `host_growth` from the shortest L to the longest
    (eager time grows 3x by design); `noise`: per-round spread."""
    rows = []
    for i, length in enumerate(LENGTHS):
        step = i / (len(LENGTHS) - 1)
        rng = random.Random(length)
        host = [
            18.0 * (1 + host_growth * step) * (1 + noise * rng.uniform(-1, 1)) for _ in range(7)
        ]
        eager = [30.0 * (1 + 2 * step)] * 7
        rows.append({"variant": f"L={length}", "baseline": f"L={LENGTHS[0]}", "shape": shape,
                     "vocab": 151936, "bench": "length", "graph_us": eager, "eager_us": eager,
                     "host_us": host})  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "growth,noise,outcome",
    [
        (0.0, 0.002, "pass"),  # host flat while eager triples: only host is judged
        (0.20, 0.002, "fail"),  # host grows 20% with L
        (0.0, 0.08, "no difference resolved"),  # too noisy to bound 5%
    ],
)
def test_host_time_must_not_grow_with_length(growth, noise, outcome):
    verdict, numbers = gpu_state_length.judge_lengths(_rows(growth, noise), 0.05)
    assert verdict.outcome == outcome, verdict.reason
    (key,) = numbers
    assert "L=8192/L=256" in key


def test_a_shape_with_one_length_is_not_a_pass():
    rows = _rows(0.0)[:1] + _rows(0.0, shape="apply (now), 64 rows, prompt 512")
    verdict, _ = gpu_state_length.judge_lengths(rows, 0.05)
    assert verdict.outcome == "inconclusive"
    assert "fewer than two lengths" in verdict.reason


def test_the_record_comes_from_the_run_file(gpu_results_root: Path):
    data = {"kind": "penalty-state-length", "date": "2026-11-26T14:00:00Z", "command": "bench",
            "machine": {"python": "3.12", "gpu": "H100", "cpu": "Xeon", "torch": "2.11"},
            "timed": True, "variants": {"now": {"path": "now.py", "sha256": "0" * 64}},
            "rows": _rows(0.20)}  # fmt: skip
    path = gpu_results_root / "0.22.0" / "micro-penalty-state-length.json"
    path.write_text(json.dumps(data))
    from verify.importer import loop

    (record,) = [r for r in loop.records("0.22.0") if r["step"].endswith("-state-length")]
    assert record["step"] == "microbench-gpu-003-state-length"  # the registry's record name
    assert record["outcome"] == "fail"
    assert "| apply (now), 64 rows | 8192 | 90.0 | 90.0 |" in record["tables"][0]
    assert record["series_hash"] == "unknown"  # the measured file is not the build tree's
