"""The GPU penalty-state check's importer (verify/importer/gpu_penalty_check.py): the shim's
findings decide, tokens are shown beside."""

import json
from dataclasses import replace

import pytest

from verify.importer import gpu_penalty_check as check
from verify.verdicts import FAIL, NOT_RUN, PASS

CLEAN = {"steps": 2816, "rows_compared": 360448, "state_checks": 11,
         "logit_findings": [], "state_findings": []}  # fmt: skip


def test_clean_findings_pass():
    verdict = check.judge_findings(CLEAN)
    assert verdict.outcome == PASS and "2816 steps" in verdict.reason


@pytest.mark.parametrize("kind", ["logit_findings", "state_findings"])
def test_any_finding_fails(kind):
    finding = {"step": 530, "row": 110, "logits_differing": 1, "column": 31171}
    verdict = check.judge_findings({**CLEAN, kind: [finding]})
    assert verdict.outcome == FAIL and "31171" in verdict.reason


@pytest.mark.parametrize(
    "findings", [None, {**CLEAN, "steps": 0}, {**CLEAN, "state_checks": 0}], ids=str
)
def test_nothing_compared_is_not_run(findings):
    assert check.judge_findings(findings).outcome == NOT_RUN


def test_tokens_are_shown_not_judged():
    run = {"tokens": {"pen": {"patched": ["ab" * 8], "series": ["ab" * 8]},
                      "other": {"patched": ["a"], "series": ["b"]},
                      "alone": {"patched": ["a"]}}}  # fmt: skip
    seen = check.tokens_beside(run)
    assert seen["pen"].startswith("identical (abababab)") and "not judged" in seen["pen"]
    assert seen["other"].startswith("differ") and "alone" not in seen


def _checks(version: str) -> list[dict]:
    """The importer loop's records of the penalty-state check (the registry names the step)."""
    from verify.importer import loop

    return [r for r in loop.records(version) if r["step"] == "gpu-penalty-state-check"]


def test_records_read_the_findings_beside_the_run(tmp_path, monkeypatch):
    """The newest run is judged with raw/<stem>-findings.json; without it: not run."""
    from verify import paths

    monkeypatch.setattr(paths, "results_root", lambda: tmp_path)
    folder = tmp_path / "gpu" / "0.22.0"
    (folder / "raw").mkdir(parents=True)
    run = {"vllm_version": "0.22.0", "date": "2026-01-02T00:00:00+00:00", "command": "c"}
    run.update(machine={"gpu": "H200"}, model="qwen3-8b", runner="V1", tokens={})
    (folder / "penalty-state-check-a.json").write_text(json.dumps(run))
    (record,) = _checks("0.22.0")
    assert record["outcome"] == NOT_RUN and record["step"] == "gpu-penalty-state-check"
    findings = {**CLEAN, "logit_findings": [{"step": 1}]}
    (folder / "raw" / "penalty-state-check-a-findings.json").write_text(json.dumps(findings))
    (record,) = _checks("0.22.0")
    assert record["outcome"] == FAIL and record["numbers"]["steps"] == 2816


def test_a_step_naming_an_unknown_reader_is_a_named_error(monkeypatch):
    from verify import registry
    from verify.importer import loop

    entry = next(e for e in registry.load().values() if any(s.reader for s in e.steps))
    step = next(s for s in entry.steps if s.reader)
    bad = registry.Entry(**{**entry.__dict__, "steps": (replace(step, reader="nope"),)})
    monkeypatch.setattr(registry, "load", lambda: {entry.slug: bad})
    with pytest.raises(loop.UnknownReader, match="names reader 'nope'"):
        loop.planned("0.22.0")


def test_a_reader_step_needs_a_source_and_one_record():
    from verify import registry
    from verify.errors import PatchbenchError

    raw = {"kind": "e2e", "title": "t", "device": "cuda", "rule": "tests", "command": "c",
           "records": ["a", "b"], "reader": "penalty-state-check", "source": "x*.json"}  # fmt: skip
    with pytest.raises(PatchbenchError, match="exactly one record"):
        registry._step("slug", raw)
    with pytest.raises(PatchbenchError, match="source"):
        registry._step("slug", {**raw, "records": ["a"], "source": ""})


def test_history_findings_decide_the_history_proof():
    clean = {"steps": 1792, "rows_compared": 99328, "findings": []}
    assert check.judge_history(clean).outcome == PASS
    bad = {**clean, "findings": [{"step": 3, "row": 1, "first_differing": 2}]}
    assert check.judge_history(bad).outcome == FAIL
    assert check.judge_history(None).outcome == NOT_RUN
    assert check.judge_history({**clean, "rows_compared": 0}).outcome == NOT_RUN
