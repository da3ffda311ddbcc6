"""Issue 20's engine-level resolution proof: the engine front-end's planted accounting (steps and
seconds slept per round, the predicted slowdown), the device plan (scripts/gpu_engine_aa.sh),
and the importer's verdict passing, unresolved, failing and inconclusive on synthetic runs."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from verify.ab import rounds as ab_rounds
from verify.ab.__main__ import (
    Stage,
    build_parser,
    cells_of,
    comparisons_of,
    parse_config,
    parse_variant,
    plant_count_env,
    stage_results,
    with_plant_count,
)
from verify.gpu import engine_aa
from verify.importer import gpu_engine_resolution as importer
from verify.series import series_hash

# ---------------------------------------------------------------------------------------------
# planted accounting


def test_only_a_planted_variant_gets_a_count_file(tmp_path):
    assert plant_count_env("pristine", {}, tmp_path) == {}
    env = plant_count_env("planted", {"PATCHBENCH_PLANT_DELAY_MS": "0.1"}, tmp_path)
    assert env == {"PATCHBENCH_PLANT_COUNT": str(tmp_path / "plant-count-planted")}


def test_a_measurement_gets_the_steps_and_seconds_slept_during_it(tmp_path):
    count = tmp_path / "count"
    count.write_text("16 0.002")  # a warm-up before the measurement

    def run(mark) -> dict:
        count.write_text("1040 0.130")
        return {"tok_per_s": 1.0}

    got = with_plant_count({"PATCHBENCH_PLANT_COUNT": str(count)}, run)
    assert got["planted_steps"] == 1024 and got["planted_slept_s"] == pytest.approx(0.128)
    assert with_plant_count({}, run) == {"tok_per_s": 1.0}

    def run_marked(mark) -> dict:  # the count starts where the run marks its timed part
        count.write_text("1100 0.140")
        mark()
        count.write_text("1200 0.150")
        return {"tok_per_s": 1.0}

    got = with_plant_count({"PATCHBENCH_PLANT_COUNT": str(count)}, run_marked)
    assert got["planted_steps"] == 100 and got["planted_slept_s"] == pytest.approx(0.010)


def test_a_gpu_plant_count_adds_the_measured_gpu_seconds(tmp_path):
    count = tmp_path / "count"
    count.write_text("8 0.001 0.0008")

    def run(mark) -> dict:
        count.write_text("520 0.065 0.0520")
        return {}

    got = with_plant_count({"PATCHBENCH_PLANT_COUNT": str(count)}, run)
    assert got["planted_steps"] == 512 and got["planted_gpu_s"] == pytest.approx(0.0512)


#: A stand-in engine worker (no vLLM): a batch of L tokens takes L scheduler steps of 10 ms
#: (claimed, not slept); with PATCHBENCH_PLANT_DELAY_MS each step also "sleeps" that long, and
#: the count file is written the way verify/ab/plant's shim writes it.
PLANTED_STAND_IN = """
import json, os, sys
from verify.ab.engines import serve_requests
prefix = sys.argv[sys.argv.index("--prefix") + 1]
delay = float(os.environ.get("PATCHBENCH_PLANT_DELAY_MS", "0")) / 1000
count = os.environ.get("PATCHBENCH_PLANT_COUNT")
steps = [0]
def handle(request):
    config = request["config"]
    length = request.get("warmup_tokens") or config["output_len"]
    steps[0] += length
    if count:
        with open(count, "w") as fh:
            fh.write(f"{steps[0]} {steps[0] * delay:.6f}")
    elapsed = length * (0.010 + delay)
    tokens = config["batch"] * length
    return {"elapsed_s": elapsed, "output_tokens": tokens, "tok_per_s": tokens / elapsed,
            "token_ids_hash": "h", "first_tokens": []}
serve_requests(handle, prefix, {"startup_s": 0.0, "kv_cache_tokens": 10**6, "gpu": None,
                                "model_runner": "MRV2"})
"""


def test_engine_front_end_records_the_planted_seconds_and_predicts_the_slowdown(tmp_path):
    from verify.ab.__main__ import main

    (tmp_path / "worker.py").write_text(PLANTED_STAND_IN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "worker.py"} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "ab.json"
    items = engine_aa.plan(4, 100, 0.5, gpu_budget=2**40)
    rc = main(
        ["engine", "--model", "m", *items, "--rounds", "4", "--python", str(python),
         "--work", str(tmp_path / "work"), "--out", str(out)]
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert rc == 0 and len(record["rounds"]) == 4
    name = "plain-b4-l100"
    for rnd in record["rounds"]:
        planted = rnd["values"][f"planted/{name}"]
        assert planted["planted_steps"] == 100  # the warm-up's 16 steps are not counted
        assert planted["planted_slept_s"] == pytest.approx(0.05)
        assert "planted_steps" not in rnd["values"][f"pristine/{name}"]
    aa, slow = record["comparisons"]
    assert aa["ratio"] == pytest.approx(1.0) and "predicted_if_all_on_critical_path" not in aa
    assert slow["ratio"] == pytest.approx(1.0 / 1.05)
    assert slow["predicted_if_all_on_critical_path"] == pytest.approx(1.0 / 1.05)


# ---------------------------------------------------------------------------------------------
# the device plan


def test_the_plan_is_three_pristine_engines_the_front_end_accepts():
    items = engine_aa.plan(64, 1024, 0.1, async_scheduling=False)
    args = build_parser().parse_args(["engine", "--model", "m", *items, "--out", "x"])
    variants = {n: (p, e) for n, p, e in (parse_variant(v, "/site") for v in args.variant)}
    assert list(variants) == ["pristine", "pristine2", "planted"]
    assert variants["planted"][1] == {"PATCHBENCH_PLANT_DELAY_MS": "0.1"}
    assert variants["pristine"][0] == variants["pristine2"][0] == ["/site"]
    configs = dict(parse_config(c) for c in args.config)
    cells = cells_of(args, variants, configs)
    assert comparisons_of(args, cells, configs) == [
        ("pristine/plain-b64-l1024", "pristine2/plain-b64-l1024"),
        ("pristine/plain-b64-l1024", "planted/plain-b64-l1024"),
    ]
    engine = json.loads(args.engine_args)
    assert engine["kv_cache_memory_bytes"] > 64 * (32 + 1024) * 114688
    assert engine["async_scheduling"] is False
    with pytest.raises(SystemExit, match="do not fit"):
        engine_aa.plan(64, 8160, 0.1)  # three such engines exceed the H100
    with pytest.raises(SystemExit, match="above 0"):
        engine_aa.plan(64, 1024, 0)


def test_the_plan_command_writes_arguments_and_meta(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_aa.importlib.metadata, "version", lambda name: "0.22.0")
    args, meta, overlay = tmp_path / "args", tmp_path / "meta.json", tmp_path / "overlay"
    common = ["--command", "c", "--out-args", str(args), "--meta", str(meta)]
    rc = engine_aa.main(["--shape", "64x512", "--overlay", str(overlay), *common])
    assert rc == 0 and "--config=plain-b64-l512=" in args.read_text()
    written = json.loads(meta.read_text())
    assert written["vllm_version"] == "0.22.0" and written["planted_delay_ms"] == 0.1
    assert written["series_hash"] == series_hash("0.22.0") and "patch_hashes" not in written
    (overlay / "0.22.0").mkdir(parents=True)
    (overlay / "0.22.0" / "PATCH_HASHES.json").write_text('{"subject": "abc"}')
    (overlay / "0.22.0" / "SERIES_HASH").write_text("stale\n")  # another series: not used
    engine_aa.main(["--overlay", str(overlay), *common])
    assert "patch_hashes" not in json.loads(meta.read_text())
    (overlay / "0.22.0" / "SERIES_HASH").write_text(series_hash("0.22.0") + "\n")
    engine_aa.main(["--overlay", str(overlay), *common])
    assert json.loads(meta.read_text())["patch_hashes"] == {"subject": "abc"}


# ---------------------------------------------------------------------------------------------
# importer: synthetic runs through the front-end's record format

CONFIG = {"batch": 64, "output_len": 1024, "input_len": 32, "temperature": 1.0}
CELLS = ["pristine/c", "pristine2/c", "planted/c"]
META = {
    "kind": "engine-ab",
    "command": "bash scripts/gpu_engine_aa.sh t",
    "vllm_version": "0.22.0",
    "series_hash": "abc1234567",
    "date": "2026-11-25T13:00:00+00:00",
    "machine": {"python": "3.12", "cpu": "Xeon", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.9"},
    "workers": {
        v: {"model_runner": "MRV2", "async_scheduling": True}
        for v in ("pristine", "pristine2", "planted")
    },
    "planted_delay_ms": 0.1,
}


def synthetic_run(
    planted: float, noise: float, share: float = 0.03, n: int = 20, count: bool = True
) -> dict:
    """A record as the engine front-end writes it: each round's wall time 5 s x drift x noise;
    the planted engine slept `share` of pristine's time and ran `planted` as fast."""
    rng = random.Random(3)
    drift: dict[int, float] = {}

    def measure(cell: str, index: int) -> dict:
        drift.setdefault(index, rng.uniform(0.9, 1.1))
        elapsed = 5.0 * drift[index] * rng.gauss(1, noise)
        values = {"token_ids_hash": "h"}
        if cell.startswith("planted/"):
            if count:
                values.update(planted_steps=1024, planted_slept_s=share * elapsed)
            elapsed /= planted
        return {**values, "elapsed_s": elapsed, "tok_per_s": 65536 / elapsed}

    stage = Stage((64, 32, 1024), CELLS)
    stage.rounds = ab_rounds.run_rounds(measure, CELLS, n, warmup=1)
    stage.status = f"ran {n + 1} rounds"
    record = {**META, "configs": {"c": CONFIG}, "cells": CELLS}
    pairs = [("pristine/c", "pristine2/c"), ("pristine/c", "planted/c")]
    stage_results(record, [stage], pairs, 0.01)
    return record


@pytest.fixture
def root(gpu_results_root: Path) -> Path:
    return gpu_results_root


def _import(root: Path, *runs: dict) -> dict:
    for i, run in enumerate(runs):
        (root / "0.22.0" / f"engine-aa-{i}.json").write_text(json.dumps(run))
    return importer.engine_resolution("0.22.0")


RIGHT = 1 / 1.03  # the planted slowdown of a 3% share slept, all on the critical path


def test_a_tight_aa_and_a_planted_effect_of_its_predicted_size_pass(root):
    record = _import(root, synthetic_run(RIGHT, noise=0.004))
    assert record["outcome"] == "pass", record["reason"]
    assert record["step"] == "gpu-engine-resolution" and "resolves 1%" in record["reason"]
    numbers = record["numbers"]
    assert numbers["aa"]["low"] <= 1 <= numbers["aa"]["high"] and numbers["aa_half_width"] <= 0.01
    assert numbers["aa"]["n"] == 20  # the warm-up round left out
    assert numbers["planted_predicted"] == pytest.approx(RIGHT, abs=0.002)
    assert numbers["workers"]["planted"]["model_runner"] == "MRV2"
    assert numbers["tokens_identical_across_engines"] is True  # pristine and pristine2 agree
    assert "| pristine2 / pristine (A/A) |" in record["tables"][0]
    assert record["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_an_aa_wider_than_one_percent_is_not_a_pass(root):
    record = _import(root, synthetic_run(0.9, noise=0.03, share=0.111, n=8))
    assert record["outcome"] == "no difference resolved", record["reason"]
    assert "not 1%" in record["reason"] and record["numbers"]["aa_half_width"] > 0.01


def test_a_production_shape_run_must_resolve_half_a_percent(root):
    """The same rounds pass at +-1% on the small model and are not a pass at a production
    shape (verify.gpu.shapes), whose target is +-0.5%."""
    run = synthetic_run(RIGHT, noise=0.01, n=20)
    small = _import(root, run)
    assert small["outcome"] == "pass", small["reason"]
    assert 0.005 < small["numbers"]["aa_half_width"] <= 0.01
    big = _import(root, {**run, "model": "qwen3-8b"})
    assert big["outcome"] == "no difference resolved" and "not 0.5%" in big["reason"]


def test_the_target_is_the_harness_proofs_data(root, monkeypatch):
    """patches/harness-proofs.toml sets the target: the same rounds judged against a wider
    production target pass."""
    from verify import registry

    run = {**synthetic_run(RIGHT, noise=0.01, n=20), "model": "qwen3-8b"}
    assert _import(root, run)["outcome"] == "no difference resolved"
    proofs = registry.harness_proofs()
    proofs["gpu-engine-resolution"]["production_target"] = 0.01
    monkeypatch.setattr(registry, "harness_proofs", lambda root=None: proofs)
    assert _import(root, run)["outcome"] == "pass"


def test_rounds_in_engine_restart_blocks_are_judged_over_the_blocks(root):
    """A run with --restart-every: identical engines whose instances differ by up to 0.5% from
    block to block (tight within each block) pass with the interval over the blocks; judged
    per round, the same A/A excludes 1."""
    run = synthetic_run(RIGHT, noise=0.0005, n=24)
    offsets = [1.004, 1.001, 1.005, 0.998]  # +0.2% on average: excluded by 24 tight rounds
    for rnd in run["rounds"]:
        rnd["block"] = max(rnd["index"] - 1, 0) // 6
        rnd["values"]["pristine2/c"]["tok_per_s"] *= offsets[rnd["block"]]
    per_round = _import(root, run)
    assert per_round["outcome"] == "pass"  # blocks in the rounds: judged over them already
    assert per_round["numbers"]["aa"]["n"] == 4
    flat = {**run, "rounds": [{k: v for k, v in r.items() if k != "block"} for r in run["rounds"]]}
    assert _import(root, flat)["outcome"] == "fail"  # per round: an A/A that excludes 1
    run["restart_every"] = 6
    record = _import(root, run)
    assert record["numbers"]["engine_restarts"] == {"every": 6, "blocks": 4, "rounds": 24}


@pytest.mark.parametrize(
    ("planted", "words"),
    [(1.02, "not resolved"), (0.995, "misses its expected size")],
    ids=["wrong-sign", "wrong-size"],
)
def test_a_planted_effect_of_the_wrong_sign_or_size_fails(root, planted, words):
    record = _import(root, synthetic_run(planted, noise=0.002))
    assert record["outcome"] == "fail" and words in record["reason"]


def test_without_the_seconds_slept_the_size_cannot_be_checked(root):
    record = _import(root, synthetic_run(RIGHT, noise=0.004, count=False))
    assert record["outcome"] == "inconclusive" and "cannot be checked" in record["reason"]


def test_the_newest_run_is_judged_and_earlier_ones_are_listed(root):
    old = {**synthetic_run(1.02, noise=0.002), "date": "2026-11-25T12:00:00+00:00"}
    record = _import(root, old, synthetic_run(RIGHT, noise=0.004))
    assert record["outcome"] == "pass"
    (earlier,) = record["numbers"]["earlier_runs"]
    assert earlier["outcome"] == "fail" and earlier["date"] == old["date"]


def test_a_run_with_no_counted_round_is_not_run(root):
    run = synthetic_run(RIGHT, noise=0.004)
    run["rounds"], run["stopped"] = [], "no engine started"
    record = _import(root, run)
    assert record["outcome"] == "not run" and "no engine started" in record["reason"]


def test_a_single_counted_round_resolves_nothing(root):
    record = _import(root, synthetic_run(RIGHT, noise=0.004, n=1))
    assert record["outcome"] == "no difference resolved" and "fewer than two" in record["reason"]
