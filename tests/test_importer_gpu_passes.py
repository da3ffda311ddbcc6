"""verify.importer.gpu: the importers behind committed `pass` records (results/gpu/*/), each on
synthetic step files on which it must pass and on which it must not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_importer_gpu import META  # the step files' shared meta
from verify.importer import cpu, gpu


def _write(root: Path, step: str, data: dict, version: str = "0.22.0") -> None:
    (root / version).mkdir(exist_ok=True)
    (root / version / f"{step}.json").write_text(json.dumps({**META, **data}))


# micro_003_build (and cpu.build_effect, which states its effect) ---------------------------
def _build_row(length: int, low: float, mismatched: int = 0) -> dict:
    return {"L": length, "a_ms_median": 0.6, "b_ms_median": 0.2, "a_over_b": low + 0.05,
            "ci95": [low, low + 0.1], "steps": 200, "mismatched_steps": mismatched}  # fmt: skip


def _write_build(root: Path, rows: list[dict]) -> None:
    _write(root, "micro", {"step": "micro"})
    params = {"batch": 64, "device": "cuda", "async_placeholders": True}
    _write(root, "micro-003-build-ab", {"params": params, "results": rows})


@pytest.mark.parametrize(
    "rows, outcome, said",
    [
        ([_build_row(256, 3.0), _build_row(4096, 2.8)], "pass", "2.85x [2.80, 2.90] at L=4096"),
        ([_build_row(256, 3.0), _build_row(4096, 0.95)], "fail", "interval reaches 1"),
        ([_build_row(256, 3.0, mismatched=2)], "fail", "tensors differ at L=[256]"),
    ],
)
def test_micro_003_build_needs_equal_tensors_and_a_faster_gather(
    gpu_results_root, rows, outcome, said
):
    _write_build(gpu_results_root, rows)
    record = gpu.micro_003_build("0.22.0")
    assert record["step"] == "microbench-gpu-003-build"
    assert record["outcome"] == outcome and said in record["reason"]


def test_micro_003_build_needs_the_micro_steps_metadata(gpu_results_root):
    params = {"batch": 64, "device": "cuda", "async_placeholders": True}
    _write(gpu_results_root, "micro-003-build-ab", {"params": params, "results": []})
    assert gpu.micro_003_build("0.22.0") is None


def test_build_effect_states_each_length():
    effect = cpu.build_effect([_build_row(256, 3.0), _build_row(4096, 1.5)])
    assert (
        effect
        == "per-row loop / one gather: 3.05x [3.00, 3.10] at L=256, 1.55x [1.50, 1.60] at L=4096"
    )


# micro_002 (and _round_ratio, which pairs its rounds) --------------------------------------
PRISTINE_US = [130.0, 134.0, 128.0, 131.0, 136.0, 129.0]


def _measure(factor: float) -> dict:
    patched = [u * factor * (1 + 0.002 * (i % 3)) for i, u in enumerate(PRISTINE_US)]
    return {"median_us": {"pristine": 131.0, "patched": 131.0 * factor},
            "round_median_us": {"pristine": PRISTINE_US, "patched": patched}}  # fmt: skip


def _micro_002(step: dict[int, float], contents_ok: bool = True) -> dict:
    rows = [
        {"batch": batch, "prompt_len": 128,
         "measures": {"step": _measure(f), "md": _measure(3.0), "md_read": _measure(1.0)}}
        for batch, f in step.items()
    ]  # fmt: skip
    return {"step": "micro-002", "status": "ok", "date_utc": META["date"], "python": "3.12",
            "vllm_version": "0.18.1", "contents_ok": contents_ok, "results": rows}  # fmt: skip


def test_round_ratio_pairs_the_per_round_medians():
    ratio = gpu._round_ratio(_measure(0.5))
    assert ratio.n == 6 and 0.49 < ratio.low < ratio.ratio < ratio.high < 0.52


@pytest.mark.parametrize(
    "step, contents_ok, outcome, said",
    [
        ({1: 0.5, 64: 1.0}, True, "pass", "faster at 1 of 2: b1/p128"),
        ({1: 0.5, 64: 1.5}, True, "fail", "slower at 1 of 2: b64/p128"),
        ({1: 0.5, 64: 1.0}, False, "fail", "prompt-id contents differ"),
        ({1: 1.0}, True, "no difference resolved", "no shape resolved faster"),
    ],
)
def test_micro_002_judges_the_pooling_step_per_shape(
    gpu_results_root, step, contents_ok, outcome, said
):
    _write(gpu_results_root, "micro-002", _micro_002(step, contents_ok), version="0.18.1")
    record = gpu.micro_002()
    assert record["step"] == "microbench-gpu-002" and record["vllm_version"] == "0.18.1"
    assert record["outcome"] == outcome and said in record["reason"]
    assert "md_time_patched_over_pristine" in record["numbers"]  # reported, not judged


# upstream_tests and records ------------------------------------------------------------------
def _upstream(new: list[str], patched_failures: int = 0) -> dict:
    def variant(failures: int) -> dict:
        return {"command": "-m pytest tests/v1/sample", "tests": 109, "passed": 109 - failures,
                "failures": failures, "errors": 0, "skipped": 0}  # fmt: skip

    summary = {"new_failures": new, "pre_existing_failures": []}
    return {"variants": {"pristine": variant(0), "patched": variant(patched_failures)},
            "summary": summary}  # fmt: skip


@pytest.mark.parametrize(
    "data, outcome, said",
    [
        (_upstream([]), "pass", ""),
        (_upstream(["tests/v1/sample/test_sampler.py::test_x"], 1), "fail", "test_x"),
        (_upstream([], patched_failures=1), "fail", "new failures: []"),
    ],
)
def test_upstream_tests_pass_only_without_patched_failures(gpu_results_root, data, outcome, said):
    _write(gpu_results_root, "upstream-tests", data)
    record = gpu.upstream_tests("0.22.0")
    assert record["step"] == "upstream-tests-gpu" and record["outcome"] == outcome
    assert said in record["reason"]
    assert record["numbers"]["patched_tests"] == 109


def test_records_gathers_what_the_step_files_allow(gpu_results_root):
    assert gpu.records("0.22.0") == []
    _write(gpu_results_root, "upstream-tests", _upstream([]))
    made = {r["step"]: r["outcome"] for r in gpu.records("0.22.0")}
    assert made == {"upstream-tests-gpu": "pass"}
