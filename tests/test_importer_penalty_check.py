"""The GPU penalty-state check's importer (verify/importer/gpu_penalty_check.py): the shim's
findings decide, tokens are shown beside."""

import json

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


def test_records_read_the_findings_beside_the_run(tmp_path, monkeypatch):
    """The newest run is judged with raw/<stem>-findings.json; without it: not run."""
    from verify import paths

    monkeypatch.setattr(paths, "results_root", lambda: tmp_path)
    folder = tmp_path / "gpu" / "0.22.0"
    (folder / "raw").mkdir(parents=True)
    run = {"vllm_version": "0.22.0", "date": "2026-01-02T00:00:00+00:00", "command": "c"}
    run.update(machine={"gpu": "H200"}, model="qwen3-8b", runner="V1", tokens={})
    (folder / "penalty-state-check-a.json").write_text(json.dumps(run))
    (record,) = check.records("0.22.0")
    assert record["outcome"] == NOT_RUN
    findings = {**CLEAN, "logit_findings": [{"step": 1}]}
    (folder / "raw" / "penalty-state-check-a-findings.json").write_text(json.dumps(findings))
    (record,) = check.records("0.22.0")
    assert record["outcome"] == FAIL and record["numbers"]["steps"] == 2816
