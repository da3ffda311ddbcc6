"""The engine A/B front-end (`python -m verify.ab engine`), issue 22's plan, and the importer of
its records: stages and budget, a synthetic run round-tripped through the record format, and
the penalty-cost verdict passing, failing and unresolved."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.ab import cpus, engines
from verify.ab import rounds as ab_rounds
from verify.ab.__main__ import (
    Stage,
    comparisons_of,
    estimate_round_s,
    parse_config,
    plan_stages,
    stage_results,
)
from verify.ab.cpus import compact_cpus, cpu_shares, cpu_ticks, split_cpus, thread_cpu
from verify.ab.engines import (
    Engine,
    EngineError,
    step_stats,
    timed_generate,
    timer_summary,
)
from verify.gpu import penalty_plan
from verify.importer import engine_runs, gpu_engine_ab

PEN = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}
CONFIGS = {
    "plain": {"batch": 64, "output_len": 2048, "input_len": 32, "temperature": 1.0},
    "pen": {"batch": 64, "output_len": 2048, "input_len": 32, "temperature": 1.0, **PEN},
    "plain-b128": {"batch": 128, "output_len": 2048, "input_len": 32, "temperature": 1.0},
}


def test_config_parsing_names_bad_keys():
    name, config = parse_config('pen={"batch": 4, "output_len": 8, "presence_penalty": 1.5}')
    assert (name, config["input_len"], config["presence_penalty"]) == ("pen", 32, 1.5)
    with pytest.raises(SystemExit, match="unknown keys"):
        parse_config('x={"batch": 4, "output_len": 8, "top_q": 1}')
    with pytest.raises(SystemExit, match="must be given"):
        parse_config('x={"batch": 4}')
    with pytest.raises(SystemExit, match="seed must be"):
        parse_config('x={"batch": 4, "output_len": 8, "seed": "1"}')
    assert parse_config('x={"batch": 4, "output_len": 8, "seed": null}')[1]["seed"] is None
    with pytest.raises(SystemExit, match="not JSON"):
        parse_config("x={batch: 4}")


def test_cells_of_one_shape_share_a_stage_and_only_they_compare():
    cells = ["a/plain", "a/pen", "b/plain", "a/plain-b128", "b/plain-b128"]
    stages = plan_stages(cells, CONFIGS)
    assert [s.cells for s in stages] == [["a/plain", "a/pen", "b/plain"], cells[3:]]
    args = SimpleNamespace(compare=["a/plain:a/pen", "a/plain:b/plain"])
    assert comparisons_of(args, cells, CONFIGS) == [("a/plain", "a/pen"), ("a/plain", "b/plain")]
    with pytest.raises(SystemExit, match="different shapes"):
        comparisons_of(SimpleNamespace(compare=["a/plain:a/plain-b128"]), cells, CONFIGS)


def test_round_estimate_uses_each_cell_rate_and_the_slowest_for_unseen_ones():
    stage = Stage((64, 32, 2048), ["a/plain", "a/pen"])
    assert estimate_round_s(stage, CONFIGS, {}) is None
    plain_key = ("a", json.dumps({"temperature": 1.0}))
    rates = {plain_key: 1e-4, ("z", "{}"): 5e-4}
    assert estimate_round_s(stage, CONFIGS, rates) == pytest.approx(64 * 2048 * (1e-4 + 5e-4))


def test_plan_pairs_each_cost_and_patched_against_the_baselines():
    args = penalty_plan.plan(
        ["pristine", "series", "patched"], [(64, 2048), (32, 2048)], [(64, 2048)], ["plain", "pen"]
    )
    compares = [a.split("=", 1)[1] for a in args if a.startswith("--compare=")]
    assert "patched/plain-b64-l2048:patched/pen-b64-l2048" in compares
    assert "series/pen-b32-l2048:patched/pen-b32-l2048" in compares
    assert "pristine/pen-b64-l2048:patched/pen-b64-l2048" in compares
    assert not any("pristine/" in c and "b32" in c for c in compares)  # pristine: B=64 only
    cells = [a.split("=", 1)[1] for a in args if a.startswith("--cell=")]
    assert cells.index("patched/pen-b64-l2048") < cells.index("series/plain-b32-l2048")


def test_plan_second_engine_of_a_build_runs_that_build():
    args = penalty_plan.plan(["series", "series2", "patched"], [(32, 2048)], [], ["pen"])
    variants = [a.split("=", 1)[1] for a in args if a.startswith("--variant=")]
    assert variants[0].split("=", 1)[1] == variants[1].split("=", 1)[1] != ""
    assert "--cell=series2/pen-b32-l2048" in args
    with pytest.raises(penalty_plan.PlanError, match="unknown"):
        penalty_plan.plan(["series3"], [(32, 2048)], [], ["pen"])


def test_plan_refuses_engines_that_do_not_fit_the_gpu_together():
    with pytest.raises(penalty_plan.PlanError, match="do not fit"):
        penalty_plan.plan(["series", "patched"], [(256, 2048)], [], ["plain", "pen"])
    args = penalty_plan.plan(["patched"], [(64, 8160)], [], ["plain", "pen"])
    engine = json.loads(args[-1].split("=", 1)[1])
    assert engine["max_model_len"] == 8192 and engine["kv_cache_memory_bytes"] > 64 * 8192 * 114688


def test_plan_in_turn_gives_each_engine_the_gpu_alone():
    shapes, samplings = [(256, 2048)], ["plain", "pen"]
    args = penalty_plan.plan(["series", "patched"], shapes, [], samplings, in_turn=True)
    assert args[-1] == "--in-turn"
    engine = json.loads(args[-2].split("=", 1)[1])
    assert engine["kv_cache_memory_bytes"] >= 256 * 2080 * penalty_plan.KV_BYTES_PER_TOKEN
    with pytest.raises(penalty_plan.PlanError, match="not with one GPU per variant"):
        penalty_plan.plan(["series", "patched"], shapes, [], samplings, gpu_each=["0", "1"],
                          in_turn=True)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# importer: synthetic runs through the front-end's record format

META = {
    "kind": "engine-ab",
    "command": "bash scripts/gpu_penalties_ab.sh t",
    "vllm_version": "0.22.0",
    "series_hash": "abc1234567",
    "date": "2026-11-25T09:00:00+00:00",
    "machine": {"python": "3.12", "cpu": "Xeon", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.9"},
}


def synthetic_run(
    effects: dict[str, float],
    noise: float,
    n: int = 8,
    tokens=None,
    control: bool = False,
    variants: tuple[str, ...] = ("series", "patched"),
    seed: int = 1,
) -> dict:
    """A record as the engine front-end writes it: tok/s = 6000 x round drift x effect x noise;
    `tokens`: {cell: hash} (default one hash per config); `control`: a second series engine."""
    rng = random.Random(seed)
    variants = ("series", "series2", "patched") if control else variants
    cells = [f"{v}/{c}" for v in variants for c in ("plain", "pen")]
    cells.append("patched/plain-b128")
    drift: dict[int, float] = {}

    def measure(cell: str, index: int) -> dict:
        drift.setdefault(index, rng.uniform(0.9, 1.1))
        tput = 6000 * drift[index] * effects.get(cell, 1.0) * rng.gauss(1, noise)
        config = cell.split("/")[1]
        return {"tok_per_s": tput, "token_ids_hash": (tokens or {}).get(cell, f"h-{config}")}

    stages = plan_stages(cells, CONFIGS)
    stages[0].rounds = ab_rounds.run_rounds(measure, stages[0].cells, n, warmup=1)
    stages[0].status = f"ran {n + 1} rounds"
    stages[1].status = "not run: out of time (a round needs about 40 s, 12 s left)"
    record = {**META, "configs": json.loads(json.dumps(CONFIGS)), "cells": cells}
    stage_results(record, stages, [("patched/plain", "patched/pen")], 0.01)
    return record


@pytest.fixture
def root(gpu_results_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Results root whose goal range is the synthetic runs' one measured shape."""
    monkeypatch.setattr(
        gpu_engine_ab, "goal_params", lambda v: (((64, 2048, False, True),), "H100")
    )
    return gpu_results_root


def _import(root: Path, run: dict, engine_pairs: bool = False) -> dict:
    """The record of `run`; `engine_pairs`: beside it two runs of the same code on another GPU
    model (another pool) whose builds run plain requests alike, so that the plain A/A, judged
    over engine pairs, has an interval."""
    if engine_pairs:
        for i in (1, 2):
            pair = synthetic_run({}, 0.002, seed=1 + i)
            pair |= {"date": f"2026-11-25T0{6 + i}:00:00+00:00", "machine": {"gpu": "NVIDIA H200"}}
            (root / "0.22.0" / f"penalties-ab-pair{i}.json").write_text(json.dumps(pair))
    (root / "0.22.0" / "penalties-ab.json").write_text(json.dumps(run))
    return gpu_engine_ab.penalty_cost("0.22.0")


def test_a_synthetic_run_round_trips_into_the_record(root):
    run = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    record = _import(root, run, engine_pairs=True)
    shape = _pooled(record, "B=64 L=2048")
    done = ab_rounds.from_records(run["rounds"])
    first = [r for r in done if r.index in run["stages"][0]["rounds"]]
    direct = ab_rounds.paired(first, "patched/plain", "patched/pen", "tok_per_s")
    assert shape["patched penalized/plain (no top-k/top-p)"] == direct.as_dict()
    assert shape["patched penalized/plain (no top-k/top-p)"]["n"] == 8  # warm-up left out
    assert shape["series penalized/plain (no top-k/top-p)"]["ratio"] == pytest.approx(0.85, 0.01)
    assert record["outcome"] == "pass", record["reason"]
    assert "B=128 L=2048 (not run: out of time" in record["reason"]
    assert "| patched penalty cost, no top-k/top-p |" in record["tables"][0]
    assert record["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"


def _pooled(record: dict, shape: str, gpu: str = "H100") -> dict:
    """The record's numbers of the one pool at `shape` on `gpu`."""
    pooled = record["numbers"]["pooled"].items()
    (found,) = [v for k, v in pooled if k.startswith(shape + ",") and gpu in k]
    return found


def test_a_resolved_penalty_cost_beyond_two_percent_fails(root):
    record = _import(root, synthetic_run({"patched/pen": 0.95, "series/pen": 0.95}, 0.002))
    assert record["outcome"] == "fail"
    assert "penalized/plain" in record["reason"]


def test_patched_slower_than_the_series_on_plain_in_every_engine_pair_fails(root):
    for i in (1, 2):
        run = synthetic_run({"patched/plain": 0.95, "patched/pen": 0.95}, noise=0.002, seed=i)
        run["date"] = f"2026-11-25T1{i}:00:00+00:00"
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    record = gpu_engine_ab.penalty_cost("0.22.0")
    assert record["outcome"] == "fail"
    assert (
        "plain requests, every shape, tok/s over engine pairs (n = runs) patched/series"
        in (record["reason"])
    )
    aa = record["numbers"]["patched/series plain, engine pairs as units"]
    assert aa["n"] == 2 and aa["ratio"] == pytest.approx(0.95, abs=0.005)


def test_one_engine_pair_slower_on_plain_is_no_difference_resolved(root):
    # One run's engines differ by 5% on plain requests: the engine pair it drew or the build?
    # Its rounds cannot tell; the pool still shows that run's ratio over its rounds.
    run = synthetic_run({"patched/plain": 0.95, "patched/pen": 0.95}, noise=0.002)
    record = _import(root, run)
    assert record["outcome"] == "no difference resolved"
    assert "over engine pairs (n = runs) patched/series 0.95" in record["reason"]
    assert "(n=1, no interval)" in record["reason"]
    shown = _pooled(record, "B=64 L=2048")["patched/series (plain, no top-k/top-p)"]
    assert shown["ratio"] == pytest.approx(0.95, abs=0.005) and shown["n"] == 8


def test_the_engines_plain_difference_is_taken_out_of_the_penalized_comparison(root):
    # The patched engine runs 6% faster on everything (plain is the same work in both builds:
    # an engine difference), its penalties cost what the series' cost.
    run = synthetic_run(
        {"series/pen": 0.9, "patched/plain": 1.06, "patched/pen": 1.06 * 0.9}, noise=0.002
    )
    record = _import(root, run)
    shape = _pooled(record, "B=64 L=2048")
    assert shape["patched/series (penalized, no top-k/top-p)"]["ratio"] == pytest.approx(1.06, 0.01)
    path = shape["patched/series (penalized over plain, no top-k/top-p)"]
    assert path["ratio"] == pytest.approx(1.0, abs=0.005)
    row = next(r for r in record["key_table"].splitlines() if r.startswith("| 64 | 2048 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert float(cells[7].split()[0]) == pytest.approx(1.06, rel=0.01)
    assert float(cells[8].split()[0]) == pytest.approx(1.0, abs=0.005)


def test_a_slower_penalty_path_fails_though_the_patched_engine_is_faster(root):
    # Penalized patched/series reads 1.06 x 0.96 = 1.018 (not slower on its own), but the same
    # engines differ by 6% on plain requests: the penalty path itself is 4% slower.
    effects = {"series/pen": 0.9, "patched/plain": 1.06, "patched/pen": 1.06 * 0.9 * 0.96}
    record = _import(root, synthetic_run(effects, noise=0.002))
    assert record["outcome"] == "fail"
    assert "penalized over plain, no top-k/top-p patched/series" in record["reason"]


def test_a_wide_interval_is_no_difference_resolved(root):
    record = _import(root, synthetic_run({"patched/pen": 0.99}, noise=0.05, n=3))
    assert record["outcome"] == "no difference resolved"


def test_patched_tokens_differing_from_a_self_consistent_series_fail(root):
    run = synthetic_run({}, 0.002, tokens={"patched/pen": "other"}, control=True)
    record = _import(root, run)
    assert record["outcome"] == "fail" and "tokens" in record["reason"]


def test_tokens_are_not_judged_without_a_second_engine_of_the_baseline(root):
    run = synthetic_run({}, 0.002, tokens={"patched/pen": "other"})
    record = _import(root, run, engine_pairs=True)
    assert record["outcome"] == "pass"  # GPU engines need not agree across starts
    shape = _pooled(record, "B=64 L=2048")
    assert "differ; not judged" in shape["tokens patched vs series (penalized, no top-k/top-p)"]


def test_a_second_engine_of_the_series_shows_its_own_plain_aa_beside_not_judged(root):
    run = synthetic_run({"series2/plain": 0.97, "series2/pen": 0.97}, 0.002, control=True)
    record = _import(root, run, engine_pairs=True)
    aa = _pooled(record, "B=64 L=2048")[
        "series2/series (plain, no top-k/top-p, one build, not judged)"
    ]
    assert aa["ratio"] == pytest.approx(0.97, abs=0.01)
    assert record["outcome"] == "pass"  # shown, never a verdict part
    (table,) = [t for t in record["tables"] if "H100" in t.splitlines()[0]]
    assert "two engines of one build" in table


def test_tokens_are_inconclusive_when_the_control_engines_disagree(root):
    run = synthetic_run(
        {}, 0.002, tokens={"patched/pen": "other", "series2/pen": "x"}, control=True
    )
    assert _import(root, run)["outcome"] == "inconclusive"


def test_the_key_table_puts_each_builds_penalty_cost_side_by_side(root):
    record = _import(root, synthetic_run({"series/pen": 0.85, "patched/pen": 0.99}, 0.002))
    row = next(r for r in record["key_table"].splitlines() if r.startswith("| 64 | 2048 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2:4] == ["no top-k/top-p, seeded", "-"]  # no pristine engine in this run
    assert _share(cells[4]) == pytest.approx(0.15, abs=0.005) and cells[4].endswith("n=8")
    assert _share(cells[5]) == pytest.approx(0.01, abs=0.005)
    assert cells[6] == "-"  # no v0.22.0 engine on MRV2 in this run
    assert float(cells[7].split()[0]) == pytest.approx(1.0, rel=0.01)  # plain: the A/A
    assert float(cells[8].split()[0]) == pytest.approx(0.99 / 0.85, rel=0.01)
    # the GPU model and model shape the rounds ran on
    assert cells[9] == "H100 80GB HBM3, qwen3-0.6b-random: 2026-11-25T09:00"
    judged = record["key_table"].splitlines()[-1]  # the plain A/A over runs, under the rows
    assert judged.startswith("Plain requests, patched / series tok/s over every run (judged)")
    assert "(n=1, no interval)" in judged


def _share(cell: str) -> float:
    """The leading percentage of a key-table cell ('14.9% [14.6%, 15.2%], n=8' -> 0.149)."""
    return float(cell.split("%")[0]) / 100


def test_an_earlier_series_run_lends_only_pristines_cost(root):
    earlier = synthetic_run(
        {"pristine/pen": 0.55, "patched/pen": 0.5}, 0.002, variants=("pristine", "patched")
    )
    earlier |= {"series_hash": "0ld0ld0ld0", "date": "2026-11-24T09:00:00+00:00"}
    (root / "0.22.0" / "penalties-ab-earlier.json").write_text(json.dumps(earlier))
    current = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    record = _import(root, current, engine_pairs=True)
    assert record["outcome"] == "pass", record["reason"]  # the earlier patched is not judged
    assert len(record["numbers"]["runs"]) == 3  # with the two engine pairs on the H200
    rows = [
        r
        for r in record["key_table"].splitlines()
        if r.startswith("| 64 | 2048 |") and "H200" not in r
    ]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert _share(cells[3]) == pytest.approx(0.45, abs=0.005)
    assert cells[4:9] == ["-", "-", "-", "-", "-"]
    assert cells[9].endswith("(earlier patch form: pristine only)")


def test_the_key_table_gives_v0220_on_mrv2_its_own_cost_column(root):
    effects = {"series/pen": 0.85, "patched/pen": 0.99, "mrv2/pen": 0.95}
    record = _import(root, synthetic_run(effects, 0.002, variants=("series", "patched", "mrv2")))
    row = next(r for r in record["key_table"].splitlines() if r.startswith("| 64 | 2048 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert _share(cells[6]) == pytest.approx(0.05, abs=0.005)
    assert _share(cells[5]) == pytest.approx(0.01, abs=0.005)


def test_runs_at_one_shape_pool_their_rounds_on_one_gpu_model(root):
    runs = [synthetic_run({"patched/pen": 0.99}, 0.01, n=4) for _ in range(3)]
    runs[1]["date"] = "2026-11-25T10:00:00+00:00"
    runs[2] |= {"date": "2026-11-25T11:00:00+00:00", "machine": {"gpu": "NVIDIA H200"}}
    for i, run in enumerate(runs):
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    pooled = gpu_engine_ab.penalty_cost("0.22.0")["numbers"]["pooled"]
    (h100,) = [k for k in pooled if "H100" in k]
    (h200,) = [k for k in pooled if "H200" in k]
    assert "2 run(s): 2026-11-25T09:00: ran 5 rounds [alone: patched penalized/plain" in h100
    assert "n=4, sd 1." in h100 and "; 2026-11-25T10:00: ran 5 rounds [alone" in h100
    cost = "patched penalized/plain (no top-k/top-p)"
    assert pooled[h100][cost]["n"] == 8 and pooled[h200][cost]["n"] == 4


def test_each_run_of_a_pool_says_where_it_ran_and_what_it_measured_alone(root):
    quiet, busy = (synthetic_run({"patched/pen": e}, noise, n=6) for e, noise in
                   ((0.99, 0.002), (0.95, 0.05)))  # fmt: skip
    busy["date"] = "2026-11-25T10:00:00+00:00"
    busy["command"] += " PB_PARALLEL='GPU 1 of 4, CPUs 16-31 (taskset), beside 3 other jobs'"
    quiet["command"] += " PB_HOP_CPUS_EVERY=16"
    for i, run in enumerate((quiet, busy)):
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    (title,) = [k for k in gpu_engine_ab.penalty_cost("0.22.0")["numbers"]["pooled"] if "B=64" in k]
    first, second = re.findall(r"\[([^]]*)\]", title)
    assert first.startswith("alone, engine threads hopping CPUs every 16 steps: patched")
    assert "penalized/plain 0.99" in first and "n=6" in first
    assert second.startswith("beside 3 other jobs: patched penalized/plain 0.9")
    spread = [float(re.search(r"sd ([0-9.]+)%", s).group(1)) for s in (first, second)]
    assert spread[0] < 1.0 < spread[1]


def test_the_reason_names_each_pools_gpu_and_seeding(root):
    """Two pools of one shape (H100, H200) are told apart in the verdict's reason."""
    runs = [synthetic_run({"patched/pen": 0.97}, 0.03, n=4) for _ in range(2)]
    runs[1] |= {"date": "2026-11-25T11:00:00+00:00", "machine": {"gpu": "NVIDIA H200"}}
    for i, run in enumerate(runs):
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    reason = gpu_engine_ab.penalty_cost("0.22.0")["reason"]
    assert "B=64 L=2048 (H100, qwen3-0.6b-random, seeded)" in reason
    assert "B=64 L=2048 (H200, qwen3-0.6b-random, seeded)" in reason


def test_a_production_shape_run_pools_apart_and_names_its_model_and_entropy(root):
    """A run of the 8B shape is not pooled with the small model's runs of the same cell."""
    runs = [synthetic_run({"patched/pen": 0.97}, 0.03, n=4) for _ in range(2)]
    entropy = {"output_entropy": {"measured_nats": 1.0032}, "model_runner": "V1"}
    runs[1] |= {"model": "qwen3-8b", "workers": {"patched": entropy, "series": entropy}}
    for i, run in enumerate(runs):
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    reason = gpu_engine_ab.penalty_cost("0.22.0")["reason"]
    assert "B=64 L=2048 (H100, qwen3-0.6b-random, seeded)" in reason
    assert "B=64 L=2048 (H100, qwen3-8b, 1.00 nats, seeded)" in reason


def test_a_pass_short_of_the_goal_range_is_inconclusive(root, monkeypatch):
    run = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    assert _import(root, run, engine_pairs=True)["outcome"] == "pass"
    cells = ((64, 2048, False, True), (64, 8000, False, True))
    monkeypatch.setattr(gpu_engine_ab, "goal_params", lambda v: (cells, "H100"))
    record = _import(root, run, engine_pairs=True)
    assert record["outcome"] == "inconclusive"
    assert "goal cells not measured: B=64 L>=8000 no top-k/top-p, seeded" in record["reason"]
    assert record["numbers"]["goal_not_measured"] == ["B=64 L>=8000 no top-k/top-p, seeded"]


def test_a_seeded_pool_covers_no_unseeded_goal_cell(root, monkeypatch):
    """A seed per request lengthens the step and dilutes the penalty cost: the goal's unseeded
    cell stays unmeasured until an unseeded run covers it."""
    run = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    cells = ((64, 2048, False, False),)
    monkeypatch.setattr(gpu_engine_ab, "goal_params", lambda v: (cells, "H100"))
    record = _import(root, run, engine_pairs=True)
    assert record["outcome"] == "inconclusive"
    assert record["numbers"]["goal_not_measured"] == ["B=64 L=2048 no top-k/top-p, unseeded"]


def test_the_goal_cells_and_gpu_come_from_the_registry_step():
    cells, gpu = gpu_engine_ab.goal_params("0.22.0")
    assert gpu == "H100" and (64, 8000, False, False) in cells and len(cells) == 6


def test_a_goal_range_measured_off_the_h100_says_so(root):
    """The goal is stated on the H100: a goal range covered on an H200 alone keeps its
    verdict and says where it was measured; on the H100 it says nothing more."""
    run = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    on_h100 = _import(root, run, engine_pairs=True)
    assert on_h100["outcome"] == "pass" and "the issue's GPU" not in on_h100["reason"]
    assert on_h100["numbers"]["goal_not_measured_on_H100"] == []
    run["machine"] = {**run["machine"], "gpu": "NVIDIA H200"}
    on_h200 = _import(root, run, engine_pairs=True)
    assert on_h200["outcome"] == "pass"
    assert "goal range measured on H200, not all of it on the H100" in on_h200["reason"]
    cells = on_h200["numbers"]["goal_not_measured_on_H100"]
    assert cells == ["B=64 L=2048 no top-k/top-p, seeded"]


def test_goal_cells_on_the_h100_without_the_series_are_named(root):
    """The goal's "never slower than the series" holds on the H100 only where patched met the
    series there: a patched-only H100 run beside an H200 run with both builds says so."""
    both = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    both["machine"] = {**both["machine"], "gpu": "NVIDIA H200"}
    alone = synthetic_run({"patched/pen": 0.998}, noise=0.002, variants=("patched",))
    alone["date"] = "2026-11-25T11:00:00+00:00"
    for i, run in enumerate((both, alone)):
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    record = gpu_engine_ab.penalty_cost("0.22.0")
    cell = "B=64 L=2048 no top-k/top-p, seeded"
    assert record["numbers"]["goal_not_measured_on_H100"] == []
    assert record["numbers"]["goal_not_compared_with_series_on_H100"] == [cell]
    assert "on the H100 not compared with the series at any goal cell" in record["reason"]


def test_a_stopped_run_is_named_by_its_last_exception_line():
    tail = (
        "patched engine exited with code 1; log tail (/w/patched.log):\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "ValueError: an earlier one\n"
        "torch.distributed.DistNetworkError: failed to listen; name: EADDRINUSE\n"
    )
    assert gpu_engine_ab.stop_cause(tail) == (
        "patched engine exited with code 1: "
        "torch.distributed.DistNetworkError: failed to listen; name: EADDRINUSE"
    )
    assert gpu_engine_ab.stop_cause("out of time") == "out of time"


def test_a_stopped_run_beside_measured_ones_is_named_not_counted_as_unmeasured(root):
    """A run that died at start-up leaves its shape measured by the others: the verdict keeps
    its outcome and names the run among those that stopped, not among the shapes not measured
    (here B=128, which no run reached)."""
    dead = synthetic_run({}, 0.002, seed=9)
    for stage in dead["stages"]:
        stage["rounds"], stage["status"] = [], "not run: the engine exited"
    dead |= {"rounds": [], "date": "2026-11-25T05:00:00+00:00", "stopped": "engine exited"}
    (root / "0.22.0" / "penalties-ab-dead.json").write_text(json.dumps(dead))
    run = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, noise=0.002)
    record = _import(root, run, engine_pairs=True)
    assert record["outcome"] == "pass"
    assert "runs that stopped: run 2026-11-25T05:00:00+00:00: engine exited" in record["reason"]
    assert [text.split(" (")[0] for text in record["numbers"]["not_run"]] == ["B=128 L=2048"]


def test_nothing_measured_is_not_run(root):
    run = synthetic_run({}, 0.002)
    for stage in run["stages"]:
        stage["rounds"], stage["status"] = [], "not run: out of time"
    run["rounds"] = []
    assert _import(root, run)["outcome"] == "not run"


# ---------------------------------------------------------------------------------------------
# engine lifecycle with a stand-in worker (no vLLM): requests, errors, a dying worker, stop

FAKE_WORKER = """
import sys
from verify.ab.engines import serve_requests
def handle(request):
    if request.get("die"):
        sys.exit(7)
    return {"echo": request["config"], "seq": request["seq"], "bad": 1 / request["divisor"]}
serve_requests(handle, sys.argv[1], {"startup_s": 0.0})
"""


def _fake_engine(tmp_path: Path) -> Engine:
    prefix = tmp_path / "fake"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return Engine([sys.executable, "-c", FAKE_WORKER, str(prefix)], env, prefix, "fake").start()


def test_engine_answers_requests_and_reports_worker_errors(tmp_path):
    engine = _fake_engine(tmp_path)
    try:
        assert engine.wait_ready(timeout=60) == {"startup_s": 0.0}
        assert engine.call({"config": "a", "divisor": 2}, timeout=60)["echo"] == "a"
        with pytest.raises(EngineError, match="ZeroDivisionError"):
            engine.call({"config": "b", "divisor": 0}, timeout=60)
        assert engine.call({"config": "c", "divisor": 1}, timeout=60)["seq"] == 3
        with pytest.raises(EngineError, match="exited with code 7"):
            engine.call({"config": "d", "die": True}, timeout=60)
    finally:
        engine.stop(grace=5)
    assert engine.proc is None and (tmp_path / "fake.pid").exists()


STAND_IN = """
import json, os, sys
from verify.ab.engines import serve_requests
prefix = sys.argv[sys.argv.index("--prefix") + 1]
def handle(request):
    config = request["config"]
    tokens = config["batch"] * (request.get("warmup_tokens") or config["output_len"])
    elapsed = 50.0 * (2 if config.get("presence_penalty") else 1)  # claimed, not slept
    return {"elapsed_s": elapsed, "output_tokens": tokens, "tok_per_s": tokens / elapsed,
            "token_ids_hash": json.dumps(sorted(config)), "first_tokens": [],
            "sampler": {"steps": 8, "sample_tokens_us": 40.0}, "thread_cpus": {"3": 2},
            "cpu_hops": {"every": 16, "hops": 4, "cpus": "0-3"},
            "gpu": {"power_w": 400.0, "sm_clock": 0.99}}
serve_requests(handle, prefix, {"startup_s": 0.0, "kv_cache_tokens": 10**6, "gpu": None,
                                "cpus": sorted(os.sched_getaffinity(0))})
"""


def stand_in_python(tmp_path: Path) -> Path:
    """An executable the front end takes for the workers' Python: it runs STAND_IN."""
    (tmp_path / "worker.py").write_text(STAND_IN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "worker.py"} "$@"\n')
    python.chmod(0o755)
    return python


def test_front_end_writes_rounds_comparisons_and_what_did_not_fit(tmp_path):
    """`python -m verify.ab engine` end to end on stand-in workers (no vLLM) that report 50 s
    per plain and 100 s per penalized batch: the first shape runs its rounds, the second is
    recorded as not run (its estimated round no longer fits the budget)."""
    from verify.ab.__main__ import main

    python = stand_in_python(tmp_path)
    out = tmp_path / "ab.json"
    plain = {"batch": 4, "output_len": 8}
    rc = main(
        ["engine", "--model", "m", "--variant", "a=", "--variant", "b=",
         "--config", f"plain={json.dumps(plain)}",
         "--config", f"pen={json.dumps({**plain, 'presence_penalty': 1.5})}",
         "--config", f"big={json.dumps({**plain, 'batch': 8})}",
         "--compare", "a/plain:a/pen", "--compare", "a/big:b/big",
         "--rounds", "3", "--budget-s", "150", "--python", str(python),
         "--work", str(tmp_path / "work"), "--out", str(out)]
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert rc == 0 and record["kind"] == "engine-ab"
    first, second = record["stages"]
    assert first["status"] == "ran 3 rounds" and len(first["rounds"]) == 3
    cell = record["rounds"][0]["values"]["a/pen"]
    assert cell["sampler"]["sample_tokens_us"] == 40.0
    assert cell["thread_cpus"] == {"3": 2} and cell["cpu_hops"]["hops"] == 4  # where it ran
    assert cell["gpu"] == {"power_w": 400.0, "sm_clock": 0.99}  # what its GPU did
    assert "first_tokens" not in cell
    assert second["status"].startswith("not run: out of time") and second["rounds"] == []
    cost, big = record["comparisons"]
    assert cost["ratio"] == pytest.approx(0.5) and cost["n"] == 3
    assert big["outcome"] == "not run"
    assert record["tokens"]["plain"]["identical"] and not list(tmp_path.glob("work/*.tmp"))


def test_restart_blocks_start_fresh_engines_and_compare_over_blocks(tmp_path):
    """--restart-every 2 on stand-in workers: every block runs on new worker processes (each
    block's start-up is listed), rounds carry their block, and each comparison counts blocks."""
    from verify.ab.__main__ import main

    python = stand_in_python(tmp_path)
    out = tmp_path / "ab.json"
    rc = main(
        ["engine", "--model", "m", "--variant", "a=", "--variant", "b=",
         "--config", f"plain={json.dumps({'batch': 4, 'output_len': 8})}",
         "--compare", "a/plain:b/plain", "--rounds", "6", "--warmup", "1",
         "--restart-every", "2", "--budget-s", "300", "--python", str(python),
         "--work", str(tmp_path / "work"), "--out", str(out)]
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert rc == 0 and record["restart_every"] == 2
    assert [b["block"] for b in record["blocks"]] == [0, 1, 2]
    blocks = [r["block"] for r in record["rounds"]]
    assert blocks == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # one discarded round per block, then two
    assert [r["warmup"] for r in record["rounds"]].count(True) == 3
    cmp = record["comparisons"][0]
    assert (cmp["n"], cmp["blocks"], cmp["rounds"]) == (3, 3, 6)
    assert record["stages"][0]["status"] == "ran 9 rounds in 3 engine blocks"


def test_engines_started_at_once_get_ports_of_their_own(tmp_path, monkeypatch):
    """Each engine's VLLM_PORT is its own (vLLM scans up from it), from the caller's VLLM_PORT
    or 20000; a variant's own VLLM_PORT wins; a bad or too high base is a named error. Left to
    vLLM's port-0 choice, two engines started at once drew one port (EADDRINUSE)."""
    from verify.ab import stages

    started: dict[str, dict] = {}

    class StandInEngine:
        def __init__(self, cmd, env, prefix, label, cpus):
            started[label.split()[0]] = env

        def start(self):
            return self

    monkeypatch.setattr(stages, "Engine", StandInEngine)
    args = SimpleNamespace(
        cache_root=None,
        pin_cpus=False,
        python="py",
        model="m",
        engine_args="{}",
        target_entropy=None,
    )
    variants = {"a": (["/s"], {}), "b": (["/s"], {}), "c": (["/s"], {"VLLM_PORT": "31000"})}

    def ports() -> list[str]:
        stages.start_engines(variants, args, tmp_path, {})
        return [started[name]["VLLM_PORT"] for name in variants]

    monkeypatch.delenv("VLLM_PORT", raising=False)
    assert ports() == ["20000", "20100", "31000"]
    monkeypatch.setenv("VLLM_PORT", "21000")
    assert ports() == ["21000", "21100", "31000"]
    monkeypatch.setenv("VLLM_PORT", "x")
    with pytest.raises(SystemExit, match="expected a port number"):
        ports()
    monkeypatch.setenv("VLLM_PORT", "65400")
    with pytest.raises(SystemExit, match="3 engines need ports 65400-65699"):
        ports()


def test_the_plan_is_what_the_front_end_accepts():
    from verify.ab.__main__ import build_parser, cells_of, parse_variant

    items = penalty_plan.plan(
        ["pristine", "series", "patched"],
        [(64, 2048)],
        [(64, 2048)],
        ["plain", "pen", "plain-topkp", "pen-topkp"],
    )
    args = build_parser().parse_args(["engine", "--model", "m", *items, "--out", "x"])
    variants = {n: (p, e) for n, p, e in (parse_variant(v, "/site") for v in args.variant)}
    assert variants["series"][1] == {"VLLM_V1_PENALTY_STATE": "0"}
    configs = dict(parse_config(c) for c in args.config)
    cells = cells_of(args, variants, configs)
    assert len(cells) == 12 and len(plan_stages(cells, configs)) == 1
    assert len(comparisons_of(args, cells, configs)) == 6 + 4 + 4


def test_unseeded_tokens_are_not_judged(root):
    run = synthetic_run({}, 0.002, tokens={"patched/pen": "other"}, control=True)
    assert _import(root, run)["outcome"] == "fail"
    for config in run["configs"].values():
        config["seed"] = None
    assert _import(root, run, engine_pairs=True)["outcome"] == "pass"


def test_tokens_are_judged_only_in_rounds_that_ran_every_engine_compared(root):
    # Another call's engines (another start) drew other tokens: not a difference of this run.
    judged = synthetic_run({}, 0.002, control=True)
    other = synthetic_run({}, 0.002, tokens={"patched/pen": "drift", "series/pen": "drift2"})
    other["date"] = "2026-11-25T10:00:00+00:00"
    (root / "0.22.0" / "penalties-ab-other.json").write_text(json.dumps(other))
    record = _import(root, judged, engine_pairs=True)
    assert record["outcome"] == "pass", record["reason"]
    shape = _pooled(record, "B=64 L=2048")
    assert shape["patched penalized/plain (no top-k/top-p)"]["n"] == 16  # costs do pool
    tokens = shape["tokens patched vs series (penalized, no top-k/top-p)"]
    assert "identical in 9 round(s), series agreeing with its second engine" in tokens


def test_a_run_of_another_series_with_the_same_code_pools_as_current(root):
    from verify import registry
    from verify.series import read_series

    same = {p.subject: registry.diff_hash(p) for p in read_series("0.22.0")}
    earlier = synthetic_run({"patched/pen": 0.99}, 0.002, n=4)
    earlier |= {"series_hash": "0ld0ld0ld0", "date": "2026-11-24T09:00:00+00:00"}
    (root / "0.22.0" / "penalties-ab-earlier.json").write_text(
        json.dumps({**earlier, "patch_hashes": same})
    )
    record = _import(root, synthetic_run({"patched/pen": 0.99}, 0.002, n=4))
    assert len(record["numbers"]["runs"]) == 2
    assert _pooled(record, "B=64 L=2048")["patched penalized/plain (no top-k/top-p)"]["n"] == 8
    changed = {**same, next(iter(same)): "0" * 12}  # a code change not in the history
    (root / "0.22.0" / "penalties-ab-earlier.json").write_text(
        json.dumps({**earlier, "patch_hashes": changed})
    )
    record = gpu_engine_ab.penalty_cost("0.22.0")
    assert len(record["numbers"]["runs"]) == 1
    assert record["numbers"]["runs_of_other_series_left_out"] == 1


# --- engine-step intervals (verify.ab.engines.step_stats): a diagnostic beside tok/s ---------


def _stamps(step_s: float, steps: int, batch: int = 64, stall_at: int = -1, stall_s: float = 0):
    """Engine-core output batches: one per step, `batch` outputs each, a stall before one."""
    t, out = 100.0, []
    for i in range(steps + 1):
        t += step_s + (stall_s if i == stall_at else 0)
        out.append((t, batch))
    return out


def test_step_stats_separate_per_step_work_from_a_stall():
    stamps = _stamps(0.005, 200, stall_at=50, stall_s=0.5)
    stamps.insert(10, (stamps[9][0] + 0.001, 0))  # a batch without request outputs: no step
    got = step_stats(stamps)
    assert got["steps"] == 200
    assert got["median_step_ms"] == pytest.approx(5.0)
    assert got["max_step_ms"] == pytest.approx(505.0)
    assert got["slow_share"] == pytest.approx(0.505 / (200 * 0.005 + 0.5))
    assert got["median_tok_per_s"] == pytest.approx(64 / 0.005)
    assert got["mean_step_ms"] > got["median_step_ms"]  # tok/s sees the stall, the median not


def test_step_stats_say_when_there_is_nothing_to_time():
    assert "unavailable" in step_stats([(1.0, 64), (1.1, 64)])
    assert "unavailable" in step_stats([(1.0, 64), (0.9, 64), (0.8, 64)])


class _Core:
    def __init__(self, stamps):
        self.stamps = list(stamps)

    def get_output(self):
        t, n = self.stamps.pop(0)
        return SimpleNamespace(timestamp=t, outputs=[0] * n)


class _LLM:
    """generate() reads engine-core outputs the way vLLM's LLM does (llm_engine.step)."""

    def __init__(self, core):
        self.llm_engine = SimpleNamespace(engine_core=core)

    def generate(self, prompts, sampling, use_tqdm=False):
        core = getattr(self.llm_engine, "engine_core", None)
        while core is not None and core.stamps:
            core.get_output()
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1, 2])]) for _ in prompts]


def test_timed_generate_records_the_engine_steps_and_restores_the_core():
    core = _Core(_stamps(0.004, 30, batch=2))
    result = timed_generate(_LLM(core), [{}, {}], [None, None])
    assert result["steps"]["steps"] == 30
    assert result["steps"]["median_step_ms"] == pytest.approx(4.0)
    assert "get_output" not in vars(core)  # the class's method again


def test_timed_generate_samples_the_cpus_its_thread_ran_on(monkeypatch):
    ran_on = iter([3, 3, 5])
    monkeypatch.setattr(engines, "thread_cpu", lambda: next(ran_on))
    core = _Core(_stamps(0.004, 3 * engines.CPU_SAMPLE_EVERY - 1, batch=2))  # 3 samples
    result = timed_generate(_LLM(core), [{}, {}], [None, None])
    assert result["thread_cpus"] == {"3": 2, "5": 1}


def test_thread_cpu_reads_field_39_of_the_threads_stat():
    name = "(a name) with (parens)"
    fields = ["S", *map(str, range(4, 39)), "11", "0"]  # fields 3..40; field 39 is 11
    assert thread_cpu(f"123 {name} " + " ".join(fields)) == 11
    assert thread_cpu("123 (short) S 1 2") is None
    assert thread_cpu() is not None  # this machine's own, where /proc has it


def test_timed_generate_without_an_engine_core_still_times_the_batch():
    llm = _LLM(None)
    del llm.llm_engine.engine_core
    result = timed_generate(llm, [{}], [None])
    assert result["output_tokens"] == 2 and "unavailable" in result["steps"]


class _Timers:
    """The series' sample_tokens_timing as the engine leaves it: one recorded step per output
    batch, `reset` clearing them."""

    STEP_FIELDS = (
        "step",
        "sample_tokens_s",
        "sample_s",
        "update_async_output_s",
        "ready_wait_s",
        "compute_s",
        "waited",
    )

    def __init__(self):
        self.steps: list[list] = []

    def snapshot(self) -> dict:
        return {"step_fields": list(self.STEP_FIELDS), "steps": list(self.steps), "get_output": []}

    def reset(self) -> None:
        self.steps.clear()


def _timed_core(monkeypatch, sample_tokens_s: float, env: str = "1"):
    """A core whose outputs each record a sample_tokens step in a stand-in timer module."""
    core = _Core(_stamps(0.004, 10, batch=2))
    timers = _Timers()
    original = core.get_output

    def get_output():
        timers.steps.append(
            [
                len(timers.steps),
                sample_tokens_s,
                0.8 * sample_tokens_s,
                0,
                0,
                0.8 * sample_tokens_s,
                0,
            ]
        )
        return original()

    core.get_output = get_output
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.sample_tokens_timing", timers)
    monkeypatch.setenv("VLLM_SAMPLE_TOKENS_TIMING", env)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    timers.steps.append([0, 1.0, 1.0, 0, 0, 1.0, 0])  # the start-up's: not this generate's
    return core, timers


def test_timed_generate_reads_the_series_sampler_timers_of_its_own_steps(monkeypatch):
    core, timers = _timed_core(monkeypatch, 40e-6)
    result = timed_generate(_LLM(core), [{}, {}], [None, None])
    assert result["sampler"]["steps"] == 11  # the start-up's step was cleared first
    assert result["sampler"]["sample_tokens_us"] == pytest.approx(40.0)
    assert result["sampler"]["sample_us"] == pytest.approx(32.0)
    assert timers.steps == []  # taken, so the next generate starts clean


def test_timed_generate_without_timers_or_in_pristine_says_so(monkeypatch):
    core, _ = _timed_core(monkeypatch, 40e-6, env="0")
    assert "sampler" not in timed_generate(_LLM(core), [{}], [None])  # timers off
    core, _ = _timed_core(monkeypatch, 40e-6)
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.sample_tokens_timing", None)  # pristine
    assert (
        "no sample_tokens timers"
        in timed_generate(_LLM(core), [{}], [None])["sampler"]["unavailable"]
    )
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert "another process" in timed_generate(_LLM(core), [{}], [None])["sampler"]["unavailable"]


def test_timer_summary_takes_medians_in_microseconds():
    fields = _Timers.STEP_FIELDS
    steps = [[i, s, s / 2, 0.0, 0.0, s / 2, 0] for i, s in enumerate([1e-4, 3e-4, 2e-4])]
    got = timer_summary({"step_fields": fields, "steps": steps, "get_output": [[5e-6]]})
    assert got == pytest.approx(
        {
            "steps": 3,
            "sample_tokens_us": 200.0,
            "sample_us": 100.0,
            "update_async_output_us": 0.0,
            "ready_wait_us": 0.0,
            "get_output_wait_us": 5.0,
        }
    )
    assert "unavailable" in timer_summary({"step_fields": fields, "steps": []})


def _with_steps(run: dict, per_step: dict[str, float]) -> dict:
    """`run` with each round's cells given engine steps: the median step of every cell is the
    same for all rounds (x `per_step`'s effect); tok/s keeps the run's noise."""
    for rnd in run["rounds"]:
        for cell, values in rnd["values"].items():
            rate = 6000 * per_step.get(cell, 1.0) * (1 + 0.001 * (rnd["index"] % 3))
            values["steps"] = {"median_tok_per_s": rate, "slow_share": 0.1}
            values["cpus"] = {"busy": 0.5, "idle": 0.4, "iowait": 0.0, "steal": 0.1}
    return run


def test_the_per_step_cost_is_shown_beside_noisy_tok_s_and_not_judged(root):
    run = _with_steps(synthetic_run({"patched/pen": 0.99}, noise=0.05, n=4), {"patched/pen": 0.9})
    record = _import(root, run)
    assert record["outcome"] == "no difference resolved"  # judged on tok/s alone
    shape = _pooled(record, "B=64 L=2048")
    step = shape["patched penalized/plain median step (no top-k/top-p, not judged)"]
    assert step["ratio"] == pytest.approx(0.9, rel=0.005) and step["slow_share_plain"] == 0.1
    assert step["cpu_steal_penalized"] == 0.1
    assert not [k for k in step if k.startswith("gpu_")]  # cells without verify.ab.nvml's
    assert "| patched penalty cost per engine step (median step)" in record["tables"][0]


def test_the_gpus_power_clock_and_throttling_are_shown_beside_the_step(root):
    run = _with_steps(synthetic_run({"patched/pen": 0.99}, noise=0.05, n=4), {})
    for rnd in run["rounds"]:
        for cell, values in rnd["values"].items():
            held = 0.3 if cell.endswith("/pen") and rnd["index"] == 2 else 0.0
            watts = 400 + 10 * rnd["index"] + (50 if cell.endswith("/pen") else 0)
            values["gpu"] = {"power_w": watts, "power_throttle": held, "sm_clock": 0.9}
    record = _import(root, run)
    shape = _pooled(record, "B=64 L=2048")
    step = shape["patched penalized/plain median step (no top-k/top-p, not judged)"]
    assert step["gpu_power_w_plain"] == pytest.approx(425.0)  # counted rounds 1-4 (0: warm-up)
    assert step["gpu_power_w_penalized"] == pytest.approx(475.0)
    assert step["gpu_power_throttle_penalized"] == 0.0 and step["gpu_sm_clock_plain"] == 0.9
    title = next(k for k in record["numbers"]["pooled"] if "B=64 L=2048" in k)
    assert "GPU 410-490 W, SM clock 90%-90% of max, throttled up to 30% of a cell" in title


def test_the_sampler_host_time_is_shown_beside_the_step_and_not_judged(root):
    run = _with_steps(synthetic_run({"patched/pen": 0.99}, noise=0.05, n=4), {})
    for rnd in run["rounds"]:
        for cell, values in rnd["values"].items():
            pen = cell.endswith("/pen")
            values["sampler"] = {
                "steps": 2047,
                "sample_tokens_us": 135.0 if pen else 100.0,
                "sample_us": 90.0 if pen else 70.0,
            }
            values["steps"]["median_step_ms"] = (3.1 if pen else 3.0) + 0.01 * rnd["index"]
    record = _import(root, run)
    assert record["outcome"] == "no difference resolved"  # judged on tok/s alone
    host = _pooled(record, "B=64 L=2048")[
        "patched sampler host per step (no top-k/top-p, not judged)"
    ]
    assert host["difference_sample_tokens_us"] == pytest.approx(35.0)
    assert host["difference_sample_us"] == pytest.approx(20.0)
    assert host["difference_step_us"] == pytest.approx(100.0)
    assert host["n"] == 4 and host["plain_sample_tokens_us"] == pytest.approx(100.0)
    assert (
        "sample_tokens plain 100 µs, penalized 135 µs (+35 µs; engine step +100 µs)"
        in (record["tables"][0])
    )


def test_runs_without_engine_steps_show_no_per_step_cost(root):
    record = _import(root, synthetic_run({"patched/pen": 0.99}, noise=0.002))
    assert not any("median step" in k for k in _pooled(record, "B=64 L=2048"))
    assert not any("sampler host" in k for k in _pooled(record, "B=64 L=2048"))


STAT = """cpu  900 0 90 900 9 0 0 90 0 0
cpu0 100 0 10 100 1 0 0 10 0 0
cpu1 200 0 20 200 2 0 0 20 0 0
cpu2 600 0 60 600 6 0 0 60 0 0
intr 12345
"""


def test_cpu_shares_count_only_this_processs_cpus_and_name_steal():
    before = cpu_ticks({0, 1}, STAT)
    assert before["user"] == 300 and before["steal"] == 30  # cpu2 and the total line left out
    after = dict(before, user=before["user"] + 50, idle=before["idle"] + 30)
    after["steal"] += 20
    got = cpu_shares(before, after)
    assert got == pytest.approx({"busy": 0.5, "idle": 0.3, "iowait": 0.0, "steal": 0.2})
    assert "unavailable" in cpu_shares(None, after)
    assert "unavailable" in cpu_shares(before, before)


# each engine on CPUs of its own (PB_PIN_ENGINES=1)


def test_cpus_split_into_disjoint_consecutive_shares():
    assert split_cpus({5, 0, 3, 1, 4, 2}, 2) == [[0, 1, 2], [3, 4, 5]]
    assert split_cpus(set(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split_cpus({7}, 1) == [[7]]
    with pytest.raises(EngineError, match="2 engine"):
        split_cpus({0}, 2)
    assert compact_cpus([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


def _two_cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("pinning is only visible with two or more CPUs")
    return cpus


AFFINITY_WORKER = """
import os, sys
from verify.ab.engines import serve_requests
serve_requests(lambda r: {}, sys.argv[1], {"cpus": sorted(os.sched_getaffinity(0))})
"""


def test_an_engine_given_cpus_runs_on_them_alone(tmp_path):
    mine = _two_cpus()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    prefix = tmp_path / "pinned"
    cmd = [sys.executable, "-c", AFFINITY_WORKER, str(prefix)]
    engine = Engine(cmd, env, prefix, "pinned", cpus=mine[-1:]).start()
    try:
        assert engine.wait_ready(timeout=60)["cpus"] == mine[-1:]
    finally:
        engine.stop(grace=5)
    assert os.sched_getaffinity(0) == set(mine)  # the driver keeps all of its CPUs


def test_pin_cpus_gives_each_engine_its_own_share(tmp_path):
    from verify.ab.__main__ import main

    mine = _two_cpus()
    python = stand_in_python(tmp_path)
    out = tmp_path / "ab.json"
    plain = {"batch": 4, "output_len": 8}
    base = ["engine", "--model", "m", "--variant", "a=", "--variant", "b=",
            "--config", f"plain={json.dumps(plain)}", "--rounds", "1", "--python", str(python),
            "--work", str(tmp_path / "work"), "--out", str(out)]  # fmt: skip
    assert main([*base, "--pin-cpus"]) == 0
    workers = json.loads(out.read_text())["workers"]
    assert [workers["a"]["cpus"], workers["b"]["cpus"]] == split_cpus(set(mine), 2)
    other = tmp_path / "work" / "a-b-ready.json"  # a variant named a-b keeps its files
    other.write_text("{}")
    assert main(base) == 0  # unpinned: both inherit every CPU
    assert other.exists()
    workers = json.loads(out.read_text())["workers"]
    assert workers["a"]["cpus"] == workers["b"]["cpus"] == mine


def test_cpu_hopper_moves_the_thread_every_k_ticks_through_every_cpu_and_restores():
    calls: list[set] = []
    hopper = cpus.CpuHopper([7, 2, 5], every=2, setaffinity=lambda _pid, cpus: calls.append(cpus))
    start = hopper.cpus[hopper._next]
    for _ in range(6):
        hopper.tick()
    assert len(calls) == 3  # ticks 1, 3 and 5
    assert sorted(next(iter(c)) for c in calls) == [2, 5, 7] and calls[0] == {start}
    hopper.restore()
    assert calls[-1] == {2, 5, 7}
    assert hopper.summary() == {"every": 2, "hops": 3, "cpus": "2,5,7"}


def test_hopper_from_env_is_off_by_default_and_names_a_bad_value():
    assert cpus.hopper_from_env({}) is None
    assert cpus.hopper_from_env({cpus.HOP_ENV: "0"}) is None
    with pytest.raises(engines.EngineError, match="PB_HOP_CPUS_EVERY='often'"):
        cpus.hopper_from_env({cpus.HOP_ENV: "often"})


def test_timed_generate_hops_the_cpu_when_asked(monkeypatch):
    moves: list[set] = []
    monkeypatch.setenv(cpus.HOP_ENV, "4")
    monkeypatch.setattr(engines.os, "sched_getaffinity", lambda _pid: {0, 1, 2})
    monkeypatch.setattr(engines.os, "sched_setaffinity", lambda _pid, cpus: moves.append(cpus))
    stamps = _stamps(0.004, 12, batch=2)
    result = timed_generate(_LLM(_Core(stamps)), [{}, {}], [None, None])
    assert result["cpu_hops"]["hops"] == len(range(0, len(stamps), 4))  # batches 1, 5, 9, ...
    assert result["cpu_hops"]["every"] == 4
    assert moves[-1] == {0, 1, 2}  # all CPUs back after the cell


def test_thread_cpu_samples_see_every_cpu_a_hopping_thread_ran_on(monkeypatch):
    current = {"cpu": 0}
    monkeypatch.setenv(cpus.HOP_ENV, "16")
    monkeypatch.setattr(engines.os, "sched_getaffinity", lambda _pid: set(range(16)))
    monkeypatch.setattr(
        engines.os, "sched_setaffinity", lambda _pid, cpus: current.update(cpu=min(cpus))
    )
    monkeypatch.setattr(engines, "thread_cpu", lambda: current["cpu"])
    stamps = _stamps(0.003, 2047, batch=32)  # a B=32 L=2048 cell
    result = timed_generate(_LLM(_Core(stamps)), [{}] * 32, [None] * 32)
    assert result["cpu_hops"]["hops"] > 100
    assert sorted(map(int, result["thread_cpus"])) == list(range(16))


def test_one_runs_shapes_are_one_engine_pair_in_the_plain_aa():
    # A run that measured two shapes (two pools) drew one engine per build: one unit.
    run = synthetic_run({"patched/plain": 0.99}, 0.002)
    stage = run["stages"][0]
    rounds = [r for r in ab_rounds.from_records(run["rounds"]) if r.index in stage["rounds"]]
    pools = []
    for _ in range(2):
        pool = gpu_engine_ab.Pool(run, {**stage, "cells": []}, False)
        pool.add(run, stage, rounds)
        pools.append(pool)
    verdict, numbers = gpu_engine_ab.judge_plain_aa(pools, 0.02)
    assert numbers["n"] == 1 and verdict.outcome == "no difference resolved"
    # A job beside it in the same call starts in the same second: its own engines, its tag.
    beside = {**run, "command": "PB_SHAPES=128x2048 bash scripts/gpu_penalties_ab.sh other"}
    pools[1] = gpu_engine_ab.Pool(beside, {**stage, "cells": []}, False)
    pools[1].add(beside, stage, rounds)
    verdict, numbers = gpu_engine_ab.judge_plain_aa(pools, 0.02)
    assert numbers["n"] == 2
    assert sorted(numbers["per_run"]) == [f"{run['date']} other", f"{run['date']} t"]


def _gpu_per_engine(run: dict) -> dict:
    """`run` as PB_GPU_PER_VARIANT=1 records it: each variant's engine on its own GPU."""
    run["variants"] = {
        "series": {
            "pythonpath": [],
            "env": {"VLLM_V1_PENALTY_STATE": "0", "CUDA_VISIBLE_DEVICES": "0"},
        },
        "patched": {"pythonpath": [], "env": {"CUDA_VISIBLE_DEVICES": "1"}},
    }
    return run


def _taking_turns(run: dict) -> dict:
    """`run` as PB_ENGINES_IN_TURN=1 records it: the engines took turns on one GPU."""
    run["in_turn"] = True
    return run


@pytest.mark.parametrize(
    "apart, note", [(_gpu_per_engine, "one GPU per engine"), (_taking_turns, "engines in turn")]
)
def test_runs_with_engines_apart_stay_out_of_the_plain_aa(root, apart, note):
    # The patched engine runs 5% slower on everything in both runs: its card's or its hour's
    # difference, not the build's (the same with engines side by side on one GPU fails: see
    # the every-engine-pair test).
    for i in (1, 2):
        effects = {"series/pen": 0.9, "patched/plain": 0.95, "patched/pen": 0.95}
        run = apart(synthetic_run(effects, noise=0.002, seed=i))
        run["date"] = f"2026-11-25T1{i}:00:00+00:00"
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    record = gpu_engine_ab.penalty_cost("0.22.0")
    assert record["outcome"] == "pass", record["reason"]
    left_out = record["numbers"]["runs whose engines ran apart, left out of the plain A/A"]
    assert len(left_out) == 2
    assert "patched/series plain, engine pairs as units" not in record["numbers"]
    shape = _pooled(record, "B=64 L=2048")
    assert "patched/series (plain, no top-k/top-p)" not in shape  # no side-by-side rounds
    path = shape["patched/series (penalized over plain, no top-k/top-p)"]
    assert path["n"] == 16 and path["ratio"] == pytest.approx(1 / 0.9, abs=0.005)
    assert note in record["tables"][0]


def test_a_run_with_a_gpu_per_engine_leaves_the_one_gpu_runs_judged(root):
    slow = {"patched/plain": 0.95, "patched/pen": 0.95}
    runs = [synthetic_run(slow, noise=0.002, seed=i) for i in (1, 2)]
    runs.append(_gpu_per_engine(synthetic_run({}, noise=0.002, seed=3)))
    for i, run in enumerate(runs):
        run["date"] = f"2026-11-25T1{i}:00:00+00:00"
        (root / "0.22.0" / f"penalties-ab-{i}.json").write_text(json.dumps(run))
    record = gpu_engine_ab.penalty_cost("0.22.0")
    aa = record["numbers"]["patched/series plain, engine pairs as units"]
    assert record["outcome"] == "fail" and aa["n"] == 2


IN_TURN_STAND_IN = """
import atexit, json, os, sys
from pathlib import Path
from verify.ab.engines import serve_requests
prefix = sys.argv[sys.argv.index("--prefix") + 1]
alive = Path(os.environ["STAND_IN_ALIVE"])
alive.mkdir(exist_ok=True)
me = alive / str(os.getpid())
me.touch()
atexit.register(me.unlink)
slow, calls = float(os.environ.get("SLOW", "1")), [0]
fail_after = int(os.environ.get("FAIL_AFTER", "0"))
def handle(request):
    config = request["config"]
    if not request.get("warmup_tokens"):
        calls[0] += 1
        if fail_after and calls[0] > fail_after:
            raise RuntimeError("stand-in failure")
    tokens = config["batch"] * (request.get("warmup_tokens") or config["output_len"])
    elapsed = slow * 50.0 * (2 if config.get("presence_penalty") else 1)
    return {"elapsed_s": elapsed, "output_tokens": tokens, "tok_per_s": tokens / elapsed,
            "token_ids_hash": "h", "others_alive": len(list(alive.iterdir())) - 1}
serve_requests(handle, prefix, {"startup_s": 1.5, "kv_cache_tokens": 10**6, "gpu": "stand-in"})
"""


def _run_in_turn(tmp_path: Path, b_env: str = "", extra: tuple = ()) -> tuple[int, dict]:
    from verify.ab.__main__ import main

    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "worker.py").write_text(IN_TURN_STAND_IN)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "worker.py"} "$@"\n')
    python.chmod(0o755)
    plain = {"batch": 4, "output_len": 8}
    alive = f"STAND_IN_ALIVE={tmp_path / 'alive'}"
    b = f"b=,{alive},SLOW=1.25{b_env}"
    out = tmp_path / "ab.json"
    rc = main(
        ["engine", "--model", "m", "--variant", f"a=,{alive}", "--variant", b,
         "--config", f"plain={json.dumps(plain)}",
         "--config", f"pen={json.dumps({**plain, 'presence_penalty': 1.5})}",
         "--compare", "a/plain:a/pen", "--compare", "b/plain:b/pen", "--compare", "a/pen:b/pen",
         "--rounds", "3", "--python", str(python), "--work", str(tmp_path / "work"),
         "--out", str(out), *extra]
    )  # fmt: skip
    return rc, json.loads(out.read_text())


def test_engines_in_turn_run_alone_and_their_rounds_join(tmp_path):
    """--in-turn: each variant's engine runs alone (no other stand-in alive while it measures),
    a turn after the other, and round k holds both turns' k-th rounds, so penalized over plain
    stays within one engine and the variants meet in the comparisons. Without --in-turn the
    same stand-ins see each other (the check can fail)."""
    rc, record = _run_in_turn(tmp_path, extra=("--in-turn",))
    assert rc == 0 and record["in_turn"] is True
    assert "stopped" not in record and "checkpoint" not in record  # the last write, not one
    assert [(t["variant"], t["rounds"], t["startup_s"]) for t in record["turns"]] == [
        ("a", 3, 1.5),
        ("b", 3, 1.5),
    ]
    assert record["stages"][0]["status"] == "ran a 3, b 3 rounds in turns"
    assert len(record["rounds"]) == 3
    for rnd in record["rounds"]:
        assert sorted(rnd["values"]) == ["a/pen", "a/plain", "b/pen", "b/plain"]
        assert [c.split("/")[0] for c in rnd["order"]] == ["a", "a", "b", "b"]
        assert all(v["others_alive"] == 0 for v in rnd["values"].values())
    cost_a, cost_b, across = record["comparisons"]
    assert cost_a["ratio"] == pytest.approx(0.5) and cost_b["ratio"] == pytest.approx(0.5)
    assert across["ratio"] == pytest.approx(1 / 1.25) and across["n"] == 3
    rc, side_by_side = _run_in_turn(tmp_path / "x", extra=())
    values = side_by_side["rounds"][0]["values"]
    assert rc == 0 and "in_turn" not in side_by_side
    assert all(v["others_alive"] == 1 for v in values.values())


def test_a_turn_that_fails_keeps_every_round_it_and_the_first_turn_finished(tmp_path):
    rc, record = _run_in_turn(tmp_path, b_env=",FAIL_AFTER=4", extra=("--in-turn",))
    assert rc == 1 and "stand-in failure" in record["stopped"]
    assert [t["rounds"] for t in record["turns"]] == [3, 2]  # b failed in its third round
    assert [len(r["values"]) for r in record["rounds"]] == [4, 4, 2]  # a's third round stays
    cost_a, cost_b, across = record["comparisons"]
    assert (cost_a["n"], cost_b["n"], across["n"]) == (3, 2, 2)
    left = [f.name for f in (tmp_path / "alive").iterdir() if Path(f"/proc/{f.name}").exists()]
    assert not left  # no engine left behind (b's was killed: its file stays, its process not)


def test_merge_turns_joins_round_k_of_every_turn_that_reached_it():
    from verify.ab.__main__ import merge_turns

    def turn(variant: str, n: int) -> list:
        cells = [f"{variant}/plain", f"{variant}/pen"]
        return [
            ab_rounds.Round(k, tuple(cells), {c: {"tok_per_s": k} for c in cells}, k == 0)
            for k in range(n)
        ]

    joined = merge_turns([turn("a", 3), turn("b", 2)])
    assert [r.index for r in joined] == [0, 1, 2]
    assert [r.warmup for r in joined] == [True, False, False]
    assert joined[1].order == ("a/plain", "a/pen", "b/plain", "b/pen")
    assert joined[2].order == ("a/plain", "a/pen") and sorted(joined[2].values) == sorted(
        joined[2].order
    )
    assert merge_turns([]) == [] and len(merge_turns([turn("a", 2), []])) == 2


def test_a_killed_run_keeps_the_rounds_of_its_last_checkpoint(tmp_path):
    """The front-end writes its record after every round: killed (SIGKILL, or its machine
    given back) while b's engine hangs in its second round, the record on disk holds every
    round that ended and says it is a checkpoint, not a finished run."""
    import signal
    import subprocess
    import time

    (tmp_path / "worker.py").write_text(
        IN_TURN_STAND_IN.replace(
            "if fail_after and calls[0] > fail_after:",
            "if fail_after and calls[0] > fail_after:\n            import time; time.sleep(600)",
        )
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "worker.py"} "$@"\n')
    python.chmod(0o755)
    plain = {"batch": 4, "output_len": 8}
    alive, out, work = f"STAND_IN_ALIVE={tmp_path / 'alive'}", tmp_path / "ab.json", tmp_path / "w"
    argv = [sys.executable, "-m", "verify.ab", "engine", "--model", "m",
            "--variant", f"a=,{alive}", "--variant", f"b=,{alive},FAIL_AFTER=2",
            "--config", f"plain={json.dumps(plain)}",
            "--config", f"pen={json.dumps({**plain, 'presence_penalty': 1.5})}",
            "--compare", "a/plain:a/pen", "--rounds", "5", "--python", str(python),
            "--work", str(work), "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and len(json.loads(out.read_text())["rounds"]) == 1:
                time.sleep(1)  # b's second cell now hangs: no round ends any more
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        for pid in work.glob("*.pid"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid.read_text()), signal.SIGKILL)
    record = json.loads(out.read_text())
    assert record["checkpoint"] is True and len(record["rounds"]) == 1
    assert record["stopped"].startswith("no final record: this is the checkpoint after round 1")
    assert record["comparisons"][0]["n"] == 1 and not list(tmp_path.glob("*.tmp"))


def test_in_turn_needs_two_cells_of_each_variant_per_stage(tmp_path):
    from verify.ab.__main__ import main

    with pytest.raises(SystemExit, match="b has one cell at B=4 L=8"):
        main(
            ["engine", "--model", "m", "--variant", "a=", "--variant", "b=",
             "--config", 'plain={"batch": 4, "output_len": 8}',
             "--config", 'pen={"batch": 4, "output_len": 8, "presence_penalty": 1.5}',
             "--cell", "a/plain", "--cell", "a/pen", "--cell", "b/plain", "--in-turn",
             "--out", str(tmp_path / "x.json")]
        )  # fmt: skip


PENALTY_STAND_IN = """
import json, os, random, sys
from verify.ab.engines import serve_requests
prefix = sys.argv[sys.argv.index("--prefix") + 1]
series = os.environ.get("VLLM_V1_PENALTY_STATE") == "0"
noise = random.Random(7 if series else 8)
def handle(request):
    config = request["config"]
    tokens = config["batch"] * (request.get("warmup_tokens") or config["output_len"])
    cost = 1.25 if series and config.get("presence_penalty") else 1.0
    elapsed = 50.0 * cost * (1.1 if series else 1.0) * noise.uniform(0.995, 1.005)
    return {"elapsed_s": elapsed, "output_tokens": tokens, "tok_per_s": tokens / elapsed,
            "token_ids_hash": "h"}
serve_requests(handle, prefix, {"startup_s": 2.0, "kv_cache_tokens": 10**6,
                                "gpu": "NVIDIA H100 80GB HBM3"})
"""


def test_an_in_turn_run_of_the_plan_imports_with_the_penalty_path_judged(root, tmp_path):
    """issue 22's plan run in turns end to end on stand-ins (the series engine 10% slower on
    everything, its penalties 25% dearer), then imported: the costs and patched/series
    penalized over plain come from the joined rounds; the engines' plain difference, an
    engine start apart, is left out of the plain A/A and named."""
    from verify.ab.__main__ import main

    work = tmp_path / "stand-in"
    work.mkdir()
    (work / "worker.py").write_text(PENALTY_STAND_IN)
    python = work / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {work / "worker.py"} "$@"\n')
    python.chmod(0o755)
    plan = penalty_plan.plan(
        ["series", "patched"], [(4, 8)], [], ["plain", "pen"], seeded=False, in_turn=True
    )
    (work / "meta.json").write_text(json.dumps({k: META[k] for k in ("vllm_version",
                                                "series_hash", "command")}))  # fmt: skip
    out = root / "0.22.0" / "penalties-ab-turns.json"
    rc = main(["engine", "--model", "m", *plan, "--rounds", "6", "--python", str(python),
               "--work", str(work / "w"), "--meta", str(work / "meta.json"),
               "--out", str(out)])  # fmt: skip
    assert rc == 0
    record = gpu_engine_ab.penalty_cost("0.22.0")
    shape = _pooled(record, "B=4 L=8")
    assert shape["series penalized/plain (no top-k/top-p)"]["ratio"] == pytest.approx(0.8, 0.01)
    assert shape["patched penalized/plain (no top-k/top-p)"]["ratio"] == pytest.approx(1, 0.01)
    path = shape["patched/series (penalized over plain, no top-k/top-p)"]
    assert path["n"] == 6 and path["ratio"] == pytest.approx(1.25, 0.01)
    assert "patched/series (plain, no top-k/top-p)" not in shape  # an engine start apart
    assert record["numbers"]["runs whose engines ran apart, left out of the plain A/A"]
    assert "engines in turn on one GPU" in record["tables"][0]


def test_a_production_shape_pool_gives_the_record_its_headline(root):
    effects = {"pristine/pen": 0.8, "patched/pen": 0.99}
    small = synthetic_run(effects, 0.002, variants=("pristine", "patched"))
    assert "headline" not in _import(root, small)  # the small random model makes no headline
    run = synthetic_run(effects, 0.002, variants=("pristine", "patched"), seed=2)
    run["model"] = "qwen3-8b"
    (root / "0.22.0" / "penalties-ab-8b.json").write_text(json.dumps(run))
    headline = gpu_engine_ab.penalty_cost("0.22.0")["headline"]
    assert headline.startswith("penalized decode 1.24x [")
    assert "(penalty cost: this PR 0." in headline and "; v0.22.0 19." in headline  # 1%, 20%
    assert "H100, qwen3-8b shape (dummy weights), B=64 L=2048, presence 1.5" in headline


def _turn_rounds(hashes: dict[str, str]) -> list:
    """One round per engine (engines that took turns, or one engine per call)."""
    return [
        ab_rounds.Round(i, (cell,), {cell: {"token_ids_hash": h}}) for i, (cell, h) in
        enumerate(hashes.items())
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("patched", "control", "outcome", "words"),
    [
        ("h", "h", "pass", "identical across separate engine starts"),
        ("other", "h", "fail", "differ from pristine while pristine agrees with itself"),
        ("other", "x", "inconclusive", "control failed"),
    ],
)
def test_tokens_of_engines_that_never_shared_a_round_are_judged_across_starts(
    patched, control, outcome, words
):
    """Seeded tokens of separate engine starts: judged when the baseline and its second
    engine agree across their own starts, pass or fail on the patched engine's output."""
    rounds = _turn_rounds({"pristine/pen": "h", "pristine2/pen": control, "patched/pen": patched})
    verdict = gpu_engine_ab._tokens(rounds, "pristine/pen", "patched/pen", "pristine2/pen", "t")
    assert verdict.outcome == outcome and words in verdict.reason


def test_tokens_across_starts_need_the_control_and_the_compared_engine():
    rounds = _turn_rounds({"pristine/pen": "h", "pristine2/pen": "h"})
    verdict = gpu_engine_ab._tokens(rounds, "pristine/pen", "patched/pen", "pristine2/pen", "t")
    assert verdict.outcome == "not run" and "patched/pen" in verdict.reason
    rounds = _turn_rounds({"pristine/pen": "h", "patched/pen": "h"})
    verdict = gpu_engine_ab._tokens(rounds, "pristine/pen", "patched/pen", None, "t")
    assert verdict.outcome == "not run" and "second engine" in verdict.reason


def test_in_turn_runs_each_engine_alone_and_merges_their_rounds(tmp_path):
    """--in-turn on stand-in workers: each variant's engine gets its turn, its rounds join the
    stage's round k, and the record lists the turns."""
    from verify.ab.__main__ import main

    python = stand_in_python(tmp_path)
    plain = {"batch": 4, "output_len": 8}
    out = tmp_path / "ab.json"
    rc = main(
        ["engine", "--model", "m", "--variant", "a=", "--variant", "b=",
         "--config", f"plain={json.dumps(plain)}",
         "--config", f"pen={json.dumps({**plain, 'presence_penalty': 1.5})}",
         "--rounds", "2", "--in-turn", "--python", str(python),
         "--work", str(tmp_path / "work"), "--out", str(out)]
    )  # fmt: skip
    record = json.loads(out.read_text())
    assert rc == 0 and record["stages"][0]["status"] == "ran a 2, b 2 rounds in turns"
    assert [t["variant"] for t in record["turns"]] == ["a", "b"]
    assert len(record["rounds"]) == 2 and len(record["rounds"][0]["values"]) == 4


@pytest.mark.parametrize(
    ("took", "estimate"),
    [([], 0.0), ([167.0], 167.0), ([167.0, 101.0], 101.0), ([167.0, 101.0, 103.0], 103.0)],
)
def test_block_estimate_leaves_the_first_blocks_compile_out(took, estimate):
    """The next block is estimated from the blocks after the first (whose engines compiled):
    a 167 s first block must not stop a run that has 140 s left for 100 s blocks."""
    from verify.ab.__main__ import block_estimate

    assert block_estimate(took) == estimate


def test_runs_sampling_from_other_output_distributions_pool_apart(root):
    """A run on unscaled logits and one calibrated to 1 nat measure other sampler work and give
    other tokens: each shape and distribution is its own pool."""
    unscaled = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, 0.002, seed=3)
    unscaled |= {"date": "2026-11-25T07:00:00+00:00"}
    (root / "0.22.0" / "penalties-ab-unscaled.json").write_text(json.dumps(unscaled))
    scaled = synthetic_run({"series/pen": 0.85, "patched/pen": 0.998}, 0.002)
    scaled["workers"] = {
        v: {"output_entropy": {"measured_nats": 1.0032}} for v in ("series", "patched")
    }
    record = _import(root, scaled)
    keys = [k for k in record["numbers"]["pooled"] if k.startswith("B=64 L=2048,")]
    assert len(keys) == 2 and sum("1.00 nats" in k for k in keys) == 1


def test_an_mrv2_patch_added_since_a_v1_run_leaves_it_current(root):
    """A patch whose code lies in MRV2's own package, added after a run whose series engines
    ran V1, does not reach them: the run still measures the current code. Not so for a run
    with an MRV2 series engine, nor for a patch that touches V1's files or the part of MRV2's
    package that V1 imports."""
    from verify import registry
    from verify.series import read_series

    series = read_series("0.22.0")
    last = series[-1]
    assert last.files and all(
        f.startswith(("tests/", "vllm/v1/worker/gpu/")) for f in last.files
    ), "the pin's last patch is its MRV2 one"
    recorded = {p.subject: registry.diff_hash(p) for p in series[:-1]}  # before the last patch
    earlier = synthetic_run({"patched/pen": 0.99}, 0.002, n=4)
    earlier |= {"series_hash": "0ld0ld0ld0", "date": "2026-11-24T09:00:00+00:00"}
    earlier |= {"patch_hashes": recorded}
    current = synthetic_run({"patched/pen": 0.99}, 0.002, n=4)
    for runner, pooled in (("V1", 2), ("MRV2", 1)):
        earlier["workers"] = {"patched": {"model_runner": runner}, "pristine": {}}
        (root / "0.22.0" / "penalties-ab-earlier.json").write_text(json.dumps(earlier))
        assert len(_import(root, current)["numbers"]["runs"]) == pooled, runner
    for files in (("vllm/v1/sample/sampler.py",), ("vllm/v1/worker/gpu/pool/pooling_runner.py",)):
        assert engine_runs.reaches_v1(replace(last, files=files))
    assert not engine_runs.reaches_v1(last)
