"""A patch measured beside the engine-level controls: the device plan (scripts/gpu_engine_aa.sh
with PB_PATCHES) and the importer's reader `engine-patch-ab` passing, unresolved, failing and
inconclusive on synthetic runs of the front-end's record format."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from verify import registry
from verify.ab import rounds as ab_rounds
from verify.ab.stages import Stage, stage_results
from verify.gpu import engine_aa
from verify.gpu.penalty_plan import PlanError
from verify.importer import loop

SLUG = "mrv2-skip-fp32-logits-copy"  # 0001 on 0.22.0: its e2e step reads engine-ab-mrv2-*
CONFIG = {"batch": 128, "output_len": 512, "input_len": 2, "temperature": 1.0}
CELLS = ["pristine/c", "pristine2/c", "planted/c", "only-0001/c"]
META = {
    "kind": "engine-ab",
    "command": "PB_PATCHES=only-0001 bash scripts/gpu_engine_aa.sh engine-ab-mrv2-qwen3-8b",
    "vllm_version": "0.22.0",
    "series_hash": "abc1234567",
    "date": "2026-11-25T13:00:00+00:00",
    "model": "qwen3-8b",
    "machine": {"python": "3.12", "cpu": "Xeon", "gpu": "NVIDIA H200", "torch": "2.11"},
    "workers": {v.split("/")[0]: {"model_runner": "MRV2"} for v in CELLS},
    "planted_gpu_delay_us": 100,
}
RIGHT = 1 / 1.02  # the planted slowdown of a 2% share slept, all on the critical path


def synthetic_run(patch: float, noise: float = 0.002, aa: float = 1.0, n: int = 18) -> dict:
    """A record as the engine front-end writes it: each round's wall time 4 s x drift x noise;
    the planted engine slept 2% of pristine's time, the patch ran `patch` as fast and
    pristine2 `aa` as fast as pristine."""
    rng = random.Random(5)
    drift: dict[int, float] = {}
    speed = {"planted": RIGHT, "only-0001": patch, "pristine2": aa}

    def measure(cell: str, index: int) -> dict:
        drift.setdefault(index, rng.uniform(0.95, 1.05))
        elapsed = 4.0 * drift[index] * rng.gauss(1, noise)
        values = {"token_ids_hash": "h"}
        if cell.startswith("planted/"):
            values.update(planted_steps=512, planted_slept_s=0.02 * elapsed)
        elapsed /= speed.get(cell.split("/")[0], 1.0)
        return {**values, "elapsed_s": elapsed, "tok_per_s": 65536 / elapsed}

    stage = Stage((128, 2, 512), CELLS)
    stage.rounds = ab_rounds.run_rounds(measure, CELLS, n, warmup=0)
    stage.status = f"ran {n} rounds"
    record = {**META, "configs": {"c": CONFIG}, "cells": CELLS}
    pairs = [("pristine/c", v) for v in CELLS[1:]]
    stage_results(record, [stage], pairs, 0.005, quiet=True)
    return record


def _import(root: Path, run: dict) -> dict:
    (root / "0.22.0" / "engine-ab-mrv2-qwen3-8b.json").write_text(json.dumps(run))
    made = [r for tier, r in loop.tiered("0.22.0") if r["step"] == "e2e-gpu-mrv2-qwen3-8b"]
    assert len(made) == 1
    return made[0]


@pytest.fixture
def root(gpu_results_root: Path) -> Path:
    return gpu_results_root


def test_a_resolved_speed_up_beyond_the_threshold_passes(root):
    record = _import(root, synthetic_run(patch=1.01))
    assert record["outcome"] == "pass", record["reason"]
    assert record["reason"].startswith("faster: output tok/s only-0001/pristine")
    assert record["numbers"]["controls"] == "pass" and record["numbers"]["runner"] == "MRV2"
    assert record["numbers"]["model"] == "qwen3-8b"
    assert "| only-0001/pristine |" in record["tables"][0]
    assert "runner MRV2, B=128 x 2 prompt tokens x 512 output tokens" in record["tables"][0]
    assert SLUG in record["patches"]
    tokens = record["numbers"]["tokens"]
    assert tokens == {"control (pristine2 = pristine)": True, "only-0001 = pristine": True}


def test_no_change_is_no_difference_resolved_never_a_pass(root):
    record = _import(root, synthetic_run(patch=1.0))
    assert record["outcome"] == "no difference resolved", record["reason"]


def test_a_resolved_slow_down_fails(root):
    record = _import(root, synthetic_run(patch=0.98))
    assert record["outcome"] == "fail", record["reason"]


def test_an_aa_that_excludes_one_makes_the_patch_inconclusive(root):
    """The same speed-up is not judged when pristine's twin differs from pristine."""
    record = _import(root, synthetic_run(patch=1.01, aa=1.006))
    assert record["outcome"] == "inconclusive", record["reason"]
    assert "controls failed" in record["reason"]


def test_a_run_without_the_patch_makes_no_record(root):
    run = synthetic_run(patch=1.01)
    run["comparisons"] = [c for c in run["comparisons"] if "only-0001" not in c["variant"]]
    (root / "0.22.0" / "engine-ab-mrv2-qwen3-8b.json").write_text(json.dumps(run))
    assert not [r for _, r in loop.tiered("0.22.0") if r["step"] == "e2e-gpu-mrv2-qwen3-8b"]


def test_the_registry_step_names_the_reader_and_a_threshold():
    step = next(
        s for s in registry.load()[SLUG].steps_on("0.22.0") if s.reader == "engine-patch-ab"
    )
    assert tuple(step.records) == ("e2e-gpu-mrv2-qwen3-8b",) and not step.frozen
    assert registry.threshold("0.22.0", "e2e-gpu-mrv2-qwen3-8b") == step.threshold


# ---------------------------------------------------------------------------------------------
# the device plan


def test_the_plan_measures_each_patch_beside_the_controls():
    items = engine_aa.plan(
        128, 512, 0.1, gpu_budget=130 * 2**30, patches=("only-0001", "at-0005", "at-0006"),
        input_len=2,
    )  # fmt: skip
    assert "--variant=only-0001=/tmp/pb-sites/only-0001" in items
    config = json.loads(next(i for i in items if i.startswith("--config=")).split("=", 2)[2])
    assert config["input_len"] == 2
    compares = [i.removeprefix("--compare=") for i in items if i.startswith("--compare=")]
    assert "pristine/plain-b128-l512:only-0001/plain-b128-l512" in compares
    assert "at-0005/plain-b128-l512:at-0006/plain-b128-l512" in compares  # the patch on its base
    assert len(compares) == 4  # A/A, planted, only-0001, at-0006 over at-0005


def test_a_patch_that_is_no_overlay_root_is_refused():
    with pytest.raises(SystemExit, match="only-NNNN or at-NNNN"):
        engine_aa.plan(128, 512, 0.1, gpu_budget=130 * 2**30, patches=("patched",))


def test_engines_that_do_not_fit_together_are_refused():
    engine_aa.plan(128, 512, 0.1, gpu_budget=130 * 2**30, model_shape="qwen3-8b",
                   patches=("only-0001",))  # fmt: skip
    with pytest.raises(PlanError, match="5 engines"):  # five 8B-shaped engines exceed an H200
        engine_aa.plan(
            128, 512, 0.1, gpu_budget=130 * 2**30, model_shape="qwen3-8b",
            patches=("at-0005", "at-0006"),
        )  # fmt: skip


def test_the_plan_command_builds_each_patch_root_over_the_bundle(tmp_path, monkeypatch):
    """--patch makes the patch's import root (the bundle with its overlay files) before the
    engines start; the bundle is checked against the overlay's pristine files first."""
    monkeypatch.setattr(engine_aa.importlib.metadata, "version", lambda name: "0.22.0")
    monkeypatch.setattr(engine_aa, "SITES", tmp_path / "sites")
    overlay, bundle = tmp_path / "overlay", tmp_path / "bundle"
    target = Path("vllm") / "v1" / "worker" / "gpu" / "sample" / "sampler.py"
    for root, text in ((overlay / "0.22.0" / "pristine", "old"), (bundle, "old"),
                       (overlay / "0.22.0" / "only-0001", "new")):  # fmt: skip
        (root / target).parent.mkdir(parents=True)
        (root / target).write_text(text)
    args = ["--shape", "8x16", "--patch", "only-0001", "--input-len", "2", "--overlay",
            str(overlay), "--base-site", str(bundle), "--out-args", str(tmp_path / "args"),
            "--meta", str(tmp_path / "meta.json")]  # fmt: skip
    assert engine_aa.main(args) == 0
    assert (tmp_path / "sites" / "only-0001" / target).read_text() == "new"
    assert json.loads((tmp_path / "meta.json").read_text())["patches_measured"] == ["only-0001"]
    (bundle / target).write_text("another release")
    with pytest.raises(SystemExit, match="bundle files differ"):
        engine_aa.main(args)
