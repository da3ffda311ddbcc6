"""Reports: PR-template order, 'not run' marking, fail wins, plots, the index matrix."""

from __future__ import annotations

import json

from tests.conftest import TRAILERS, commit_change
from verify import report


def _result(step, seed, outcome, reason="", numbers=None, series="current"):
    return {
        "schema": 1, "step": step, "seed": seed, "vllm_version": "9.9.0", "series_hash": series,
        "machine": {"cpu": "AMD EPYC", "gpu": None}, "date": "2026-11-23T00:00:00+00:00",
        "command": f"nox -s {step}", "outcome": outcome, "reason": reason,
        "numbers": numbers or {}, "tables": [],
    }  # fmt: skip


def test_report_marks_missing_steps_not_run(make_tree, workspace):
    tree = make_tree("9.9.0")
    tree.apply()
    trailers = TRAILERS.replace("tests/test_sampler.py", "tests/equivalence/test_003_penalties.py")
    commit_change(
        tree, "vllm/sampler.py", "x + 1\n", "x - 1\n", "[Perf] Faster penalties", trailers
    )
    tree.export()
    from verify.series import series_hash

    current = series_hash("9.9.0", workspace / "patches")
    results = workspace / "results" / "cpu" / "9.9.0"
    results.mkdir(parents=True)
    plot = {"x": [1, 2], "series": {"pristine": [1, 2], "patched": [1, 1]}, "xlabel": "L"}
    files = {
        "eq.json": _result("equivalence", "003", "pass", numbers={"passed": 12}),
        "bench.json": _result(
            "microbench-003", "003", "pass", numbers={"ratio": 3.5, "plot": plot}
        ),
        "e2e.json": _result("e2e-token-identity", "series", "fail", reason="2 requests differ"),
        "other.json": _result("gsm8k", "001", "pass"),
        "old.json": _result("serve-bench", "003", "pass", series="0123456789"),
    }
    for name, data in files.items():
        if data["series_hash"] == "current":
            data["series_hash"] = current
        (results / name).write_text(json.dumps(data))

    index = report.build(
        "9.9.0", workspace / "reports", workspace / "patches", workspace / "results"
    )
    text = (index.parent / "0001-Perf-Faster-penalties.md").read_text()
    assert text.index("## Purpose") < text.index("## Test Plan") < text.index("## Test Result")
    assert "| Equivalence (pristine vs patched, randomized) | pass |" in text
    assert "| End-to-end generation A/B (CPU) | fail |" in text
    assert "| gsm8k accuracy through lm_eval | not run |" in text  # seed 001's result is not ours
    assert "| Serving benchmark (vllm bench serve) | stale |" in text
    assert text.count("not run: no result file was recorded") == len(report.STEPS) - 4
    assert "| ratio | 3.5 |" in text
    assert (index.parent / "bench.png").exists()
    matrix = index.read_text()
    assert "| [[Perf] Faster penalties](0001-Perf-Faster-penalties.md) | pass | not run |" in matrix


def test_steps_go_to_the_most_specific_column():
    assert report._category("e2e-gsm8k") == "gsm8k"
    assert report._category("e2e-serve-bench") == "serve-bench"
    assert report._category("e2e-embeddings") == "embeddings"
    assert report._category("e2e-gpu-penalties-v1") == "e2e-gpu"
    assert report._category("e2e-token-identity") == "e2e"
    assert report._category("equivalence-003") == "equivalence"


def test_not_run_on_cpu_marker_covers_cpu_e2e_columns():
    from pathlib import Path

    from verify.series import Patch

    patch = Patch("0001-x.patch", Path("x"), "[Perf] x", "", {"Verify": "test_000_x.py"}, ())
    found = [
        _result("e2e-not-run-000", "000", "not run", reason="MRV2 is GPU only"),
        _result("e2e-gsm8k", "series", "pass"),
        _result("e2e-serve-bench", "series", "pass"),
    ]
    grouped = report.results_for(patch, found)
    for key in report.CPU_E2E_STEPS:
        assert report.verdict(grouped[key]) == "not run", key


def test_sections_end_only_at_a_label():
    body = (
        "Why: the build still copies B x L ids, so its host time\n"
        "grows with the generated length L: 0.39 ms at L=256.\n\n"
        "How: copy only new positions.\n\n"
        "Future plan: fold it into 0004."
    )
    assert report._section(body, "Why").endswith("L: 0.39 ms at L=256.")
    assert report._section(body, "How") == "copy only new positions."


def test_machine_name_of_cpu_and_gpu_records():
    assert report._machine_name({"cpu": "AMD EPYC", "gpu": None}) == "AMD EPYC"
    assert report._machine_name({"cpu_model": "AMD EPYC", "cpu_count": 2}) == "AMD EPYC"
    assert report._machine_name({"cpu": "x", "gpu": "NVIDIA H100 80GB HBM3"}).startswith("NVIDIA")
