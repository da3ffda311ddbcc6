"""verify.importer: CPU-tier records re-judged by the current rules; gaps named."""

from __future__ import annotations

import pytest

from verify import importer, results
from verify.importer import cpu


def _old(step: str, numbers: dict, outcome: str = "pass") -> dict:
    return {
        "schema": 1, "step": step, "seed": "series", "vllm_version": "0.22.0",
        "series_hash": results.series_hash("0.22.0"),
        "machine": {"cpu": "AMD EPYC", "gpu": None, "python": "3.11.7"},
        "date": "2026-11-24T00:00:00+00:00", "command": "python -m verify.e2e x",
        "outcome": outcome, "reason": "", "numbers": numbers, "tables": [],
    }  # fmt: skip


def _runs(thr: list[float], itl: list[float]) -> list[dict]:
    return [{"output_throughput": t, "p99_itl_ms": i} for t, i in zip(thr, itl, strict=True)]


def test_serve_bench_that_passed_on_throughput_alone_fails_on_p99_itl() -> None:
    runs = {
        "pristine": _runs([100, 102, 98, 101], [4.0, 4.1, 3.9, 4.0]),
        "patched": _runs([101, 101, 99, 100], [15.6, 16.0, 15.2, 15.8]),
    }
    record = cpu.rejudge(_old("e2e-serve-bench", {"runs": runs}))
    assert record["outcome"] == "fail" and "p99_itl_ms" in record["reason"]
    assert record["schema"] == 2 and record["machine"]["python"] == "3.11.7"


def test_not_run_markers_are_dropped_and_identity_needs_a_control() -> None:
    assert cpu.rejudge(_old("e2e-not-run-000", {}, "not run") | {"reason": "x"}) is None
    differ = cpu.rejudge(_old("e2e-token-identity", {"differing": ["greedy-0"]}))
    assert differ["outcome"] == "inconclusive"
    same = cpu.rejudge(_old("e2e-token-identity", {"differing": []}))
    assert same["outcome"] == "pass"
    assert importer.missing_data(same) == ["pristine-vs-pristine control"]


@pytest.mark.parametrize(
    ("numbers", "outcome"),
    [
        ({"differing": ["greedy-0"], "control_differing": []}, "fail"),
        ({"differing": ["greedy-0"], "control_differing": ["seeded-1"]}, "inconclusive"),
        ({"differing": [], "control_differing": []}, "pass"),
        ({"differing": ["greedy-0"], "pristine_rerun_differing": []}, "fail"),
        ({"differing_vectors": [3], "control_differing_vectors": []}, "fail"),
    ],
    ids=["control-agrees", "control-differs", "identical", "older-rerun", "embeddings"],
)
def test_identity_records_are_rejudged_with_their_control(numbers, outcome) -> None:
    step = "e2e-embeddings" if "differing_vectors" in numbers else "e2e-token-identity"
    record = cpu.rejudge(_old(step, numbers, outcome) | {"reason": "how far they diverged"})
    assert record["outcome"] == outcome
    assert importer.missing_data(record) == []
    if outcome != "pass":
        assert record["reason"] == "how far they diverged"  # the step's own account is kept


def test_missing_provenance_is_named_not_invented() -> None:
    record = cpu.upgrade(_old("equivalence-penalty-output-tokens", {}))
    record["machine"] = {"python": results.UNKNOWN, "gpu": "H100"}
    assert importer.missing_data(record) == ["machine python"]
    assert cpu.provenance({"machine": {"cpu_count": 2}})["cpu"] == results.UNKNOWN


def test_one_paired_round_is_named_but_ten_are_not() -> None:
    record = {"step": "x", "machine": {}, "reason": "ratio 0.96 [0.94, 0.98], n=10"}
    assert importer.missing_data(record) == []
    record["reason"] = "ratio 0.96, n=1"
    assert importer.missing_data(record) == ["more than one paired round"]
