"""verify.importer.loop.frozen: a registry step whose raw format is retired keeps its committed
record as it is, marked legacy; it still goes stale per patch; a frozen step names no reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verify import registry, results
from verify.errors import PatchbenchError
from verify.importer import loop

FROZEN = "e2e-gpu-mrv2"  # a record of scripts/gpu_verify.py's retired mrv2 step


def _frozen_step() -> registry.Step:
    entries = registry.load().values()
    return next(s for e in entries for s in e.steps if FROZEN in s.records and s.frozen)


def test_a_frozen_step_keeps_the_committed_record_and_marks_it_legacy(gpu_results_root: Path):
    committed = {"step": FROZEN, "vllm_version": "0.22.0", "outcome": "pass", "numbers": {"x": 1}}
    (gpu_results_root / "0.22.0" / f"{FROZEN}.json").write_text(json.dumps(committed))
    made = dict((r["step"], (tier, r)) for tier, r in loop.frozen("0.22.0"))
    tier, record = made[FROZEN]
    assert tier == "gpu" and record == {**committed, "legacy": _frozen_step().frozen}


def test_a_frozen_step_without_its_record_makes_none(gpu_results_root: Path):
    assert FROZEN not in {r["step"] for _, r in loop.frozen("0.22.0")}


def test_a_frozen_record_still_goes_stale_when_its_patch_changes():
    slug = next(e.slug for e in registry.load().values() if _frozen_step() in e.steps)
    record = {"step": FROZEN, "vllm_version": "0.22.0", "patches": {slug: "0" * 12}}
    assert results.staleness(record, slug, "0.22.0").startswith("patch changed")


def test_a_frozen_step_that_names_a_reader_is_a_named_error():
    raw = {"kind": "e2e", "title": "t", "device": "cuda", "rule": "identity",
           "records": [FROZEN], "command": "-", "frozen": "why", "reader": "serve-ab",
           "source": "x*.json"}  # fmt: skip
    with pytest.raises(PatchbenchError, match="is frozen"):
        registry._step("slug", raw)


def test_a_record_a_loop_reader_makes_is_not_rejudged_by_the_cpu_tier(monkeypatch, tmp_path):
    """The CPU tier re-judges its own records; one a registry reader makes is the loop's alone
    (else it would be judged, and written, twice)."""
    import verify.importer as importer

    own = {"step": "equivalence-x", "vllm_version": "0.22.0", "outcome": "pass"}
    loops = {"step": "memory-mrv2-penalty-rows", "vllm_version": "0.22.0", "outcome": "pass"}
    monkeypatch.setattr(importer.cpu, "tier_records", lambda v: ([own, loops], []))
    monkeypatch.setattr(importer.cpu, "bench_records", lambda v: [])
    for name in ("gpu_engine_ab", "gpu_engine_resolution"):
        monkeypatch.setattr(getattr(importer, name), "records", lambda v: [])
    monkeypatch.setattr(importer.gpu_penalty_check, "history_records", lambda v: [])
    monkeypatch.setattr(importer.gpu, "records", lambda v: [])
    monkeypatch.setattr(importer.loop, "tiered", lambda v: [])
    monkeypatch.setattr(importer.loop, "frozen", lambda v: [])
    written = []
    monkeypatch.setattr(importer.results, "write", lambda r, t, n: written.append(n) or tmp_path)
    importer.import_version("0.22.0")
    assert written == ["equivalence-x"]
