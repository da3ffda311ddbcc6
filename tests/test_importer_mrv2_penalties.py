"""verify.importer.gpu_mrv2_penalties: an MRV2 penalized-sampling A/B judged for identity (with
pristine's second engine as the control) and for throughput (not slower, the A/A beside it)."""

from __future__ import annotations

import random

from verify.importer import gpu_mrv2_penalties as reader
from verify.verdicts import FAIL, INCONCLUSIVE, PASS

CONFIGS = ["plain-b128-l512", "pen-b128-l512"]
VARIANTS = ("pristine", "pristine2", "patched")


def _run(speed: dict[str, float] | None = None, tokens: dict[str, str] | None = None) -> dict:
    """A run of 8 rounds: each variant's tok/s scaled by `speed`, each keeping `tokens`' hash."""
    speed, tokens = speed or {}, tokens or {}
    rng = random.Random(0)
    rounds = []
    for i in range(8):
        values = {
            f"{v}/{c}": {"tok_per_s": 1000 * speed.get(v, 1.0) * (1 + rng.gauss(0, 0.001))}
            for v in VARIANTS
            for c in CONFIGS
        }
        rounds.append({"index": i, "order": list(values), "values": values, "warmup": False})
    return {
        "configs": {c: {} for c in CONFIGS},
        "cells": [f"{v}/{c}" for v in VARIANTS for c in CONFIGS],
        "rounds": rounds,
        "tokens": {c: {v: [tokens.get(v, "same")] for v in VARIANTS} for c in CONFIGS},
    }


def _done(run: dict) -> list:
    return reader.ab_rounds.from_records(run["rounds"])


def test_identical_tokens_with_an_agreeing_control_pass():
    assert reader.identity_verdict(_run())[0].outcome == PASS


def test_patched_tokens_that_differ_while_the_control_agrees_fail():
    verdict, rows = reader.identity_verdict(_run(tokens={"patched": "other"}))
    assert verdict.outcome == FAIL
    assert "| pen | identical | differ |" in rows


def test_a_control_that_disagrees_makes_identity_inconclusive():
    assert reader.identity_verdict(_run(tokens={"pristine2": "other"}))[0].outcome == INCONCLUSIVE


def test_throughput_not_slower_passes_and_a_resolved_loss_fails():
    run = _run()
    assert reader.performance_verdict(run, _done(run), 0.01)[0].outcome == PASS
    slow = _run(speed={"patched": 0.97})
    assert reader.performance_verdict(slow, _done(slow), 0.01)[0].outcome == FAIL


def test_an_aa_beyond_the_threshold_makes_throughput_inconclusive():
    run = _run(speed={"pristine2": 1.03})
    verdict, _ = reader.performance_verdict(run, _done(run), 0.01)
    assert verdict.outcome == INCONCLUSIVE
    assert "A/A beyond the threshold" in verdict.reason


def test_each_build_s_penalty_cost_is_tabled():
    run = _run()
    rows = reader.cost_rows(run, _done(run))
    assert any(r.startswith("| pristine | plain -> pen |") for r in rows)
    assert any(r.startswith("| patched | plain -> pen |") for r in rows)


def _shaped(batch: int, date: str, form: str = "a", control: bool = True, seeded=True) -> dict:
    """A run at B=`batch` L=512 of patch form `form`, with or without pristine's second engine,
    seeded per request (the harness's default) or with `seed: None` (PB_SEEDED=0)."""
    run = _run()
    run["configs"] = {c: {"batch": batch, "output_len": 512} for c in CONFIGS}
    if not seeded:
        for config in run["configs"].values():
            config["seed"] = None
    run.update(date=date, patch_hashes={"x": form})
    if not control:
        run["cells"] = [c for c in run["cells"] if not c.startswith("pristine2/")]
        for seen in run["tokens"].values():
            seen.pop("pristine2")
    return run


def test_the_grid_keeps_the_newest_run_per_shape_of_the_newest_form():
    old = _shaped(128, "1", form="old")
    b128, b128_new, b64 = _shaped(128, "2"), _shaped(128, "3"), _shaped(64, "4")
    assert reader.grid([old, b128, b128_new, b64]) == [b128_new, b64]
    assert reader.grid([b128, _shaped(64, "5", form="new")]) == [_shaped(64, "5", form="new")]


def test_a_seeded_and_an_unseeded_run_of_one_shape_both_stay_in_the_grid():
    unseeded, seeded = _shaped(128, "1", seeded=False), _shaped(128, "2")
    assert reader.grid([unseeded, seeded]) == [unseeded, seeded]
    keys = reader.key_rows(seeded, _done(seeded)) + reader.key_rows(unseeded, _done(unseeded))
    assert [row.split(" | ")[2].rsplit(", ", 1)[1] for row in keys] == ["seeded", "unseeded"]


def test_a_run_of_other_samplings_at_one_shape_stays_in_the_grid():
    first, other = _shaped(128, "1"), _shaped(128, "2")
    k20p95 = {"plain": "plain-k20p95", "pen": "presence-k20p95"}
    other["configs"] = {k20p95[c.split("-")[0]] + "-b128-l512": v
                        for c, v in other["configs"].items()}  # fmt: skip
    assert reader.grid([first, other]) == [first, other]
    assert reader.grid([first, _shaped(128, "3")]) == [_shaped(128, "3")]


def test_a_run_without_the_second_pristine_engine_is_judged_without_an_aa():
    run = _shaped(64, "1", control=False)
    verdict, rows = reader.performance_verdict(run, _done(run), 0.01)
    assert verdict.outcome == PASS
    assert any("not in the run" in r for r in rows)
    slow = _shaped(64, "1", control=False)
    for r in slow["rounds"]:
        for cell, v in r["values"].items():
            v["tok_per_s"] *= 0.97 if cell.startswith("patched/") else 1.0
    assert reader.performance_verdict(slow, _done(slow), 0.01)[0].outcome == FAIL


def test_the_key_table_has_both_builds_costs_and_their_speed_ratio():
    run = _shaped(64, "1")
    rows = reader.key_rows(run, _done(run))
    assert rows and rows[0].startswith(
        "| 64 | 512 | presence 1.5, frequency 0.5, repetition 1.1 vs none (temperature 1), seeded |"
    )
    assert len(rows[0].strip("|").split("|")) == len(
        reader.key_head("0.22.0")[0].strip("|").split("|")
    )
