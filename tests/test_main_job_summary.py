"""The main job's summary (`nox -s verify-<v>`) shows each CPU-tier step's real verdict: the
outcome its records state, with a one-line reason from them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from verify import results, verdicts
from verify.progress import Steps

SERVE_REASON = (
    "output_throughput patched/pristine 0.926 [0.856, 1.001], n=12; the run could resolve only "
    "changes above 11.5%\nsecond line"
)


def _record(root: Path, step: str, outcome: str, reason: str = "", date: str = "") -> None:
    """A synthetic CPU-tier record of vLLM 9.9.0."""
    path = root / "cpu" / "9.9.0" / f"{step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = dict.fromkeys(results.REQUIRED[2], "")  # a whole record: readers refuse less
    record |= {"schema": 2, "step": step, "vllm_version": "9.9.0", "outcome": outcome,
               "reason": reason, "date": date or results.now()}  # fmt: skip
    record |= {"numbers": {}, "tables": []}
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    "serve, gsm8k, outcome, reason",
    [
        (("no difference resolved", SERVE_REASON), ("pass", ""), verdicts.UNRESOLVED,
         "e2e-serve-bench: output_throughput patched/pristine 0.926 [0.856, 1.001], n=12; "
         "the run could resolve only changes above 11.5%"),
        (("pass", ""), ("fail", "3 of 10 responses differ"), verdicts.FAIL,
         "e2e-gsm8k: 3 of 10 responses differ"),
        (("pass", ""), ("pass", ""), verdicts.PASS, "e2e-serve-bench: pass; e2e-gsm8k: pass"),
        (("inconclusive", "the A/A control moved 9%"), ("pass", ""), verdicts.INCONCLUSIVE,
         "e2e-serve-bench: the A/A control moved 9%"),
        (("n/a", "no such path on CPU"), ("n/a", "no such path on CPU"), verdicts.NOT_APPLICABLE,
         "e2e-serve-bench: no such path on CPU; e2e-gsm8k: no such path on CPU"),
    ],
)  # fmt: skip
def test_step_verdict_is_its_records_verdict(tmp_path, serve, gsm8k, outcome, reason):
    since = results.now()
    _record(tmp_path, "e2e-serve-bench", *serve)
    _record(tmp_path, "e2e-gsm8k", *gsm8k)
    verdict = results.step_verdict("9.9.0", ("e2e-serve-bench", "e2e-gsm8k"), since, tmp_path)
    assert (verdict.outcome, verdict.reason) == (outcome, reason)


def test_a_record_from_an_earlier_run_is_not_run(tmp_path):
    _record(tmp_path, "e2e-serve-bench", "pass", date="2000-01-01T00:00:00+00:00")
    verdict = results.step_verdict("9.9.0", ("e2e-serve-bench",), results.now(), tmp_path)
    assert verdict.outcome == verdicts.NOT_RUN
    assert verdict.reason == "e2e-serve-bench: no record from this run"


class RecordingSession:
    """A nox session whose `run` (the CPU-tier command) writes the given records."""

    def __init__(self, root: Path, records: dict[str, tuple[str, str]]):
        self.root, self.records, self.codes = root, records, []

    def run(self, *args: str, success_codes=(0,), **kwargs) -> None:
        self.codes.append(tuple(success_codes))
        for step, (outcome, reason) in self.records.items():
            _record(self.root, step, outcome, reason)


def test_main_job_table_shows_the_serve_verdict(loaded_noxfile, tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(tmp_path))
    serve = RecordingSession(tmp_path, {"e2e-serve-bench": ("no difference resolved",
                                        SERVE_REASON), "e2e-gsm8k": ("pass", "")})  # fmt: skip
    tokens = RecordingSession(tmp_path, {"e2e-token-identity": ("pass", "")})
    steps = Steps("verify-9.9.0", ["cpu tier: tokens", "cpu tier: embed", "cpu tier: serve"])
    steps.run("cpu tier: tokens", lambda: loaded_noxfile._e2e_step(tokens, "tokens", "9.9.0", []))
    steps.run("cpu tier: embed", lambda: loaded_noxfile._e2e_step(tokens, "embed", "9.9.0", []))
    steps.run("cpu tier: serve", lambda: loaded_noxfile._e2e_step(serve, "serve", "9.9.0", []))
    table = steps.table()
    assert re.search(r"^cpu tier: tokens\s+pass\s+\d+s\s+e2e-token-identity: pass$", table, re.M)
    assert re.search(r"^cpu tier: embed\s+not run\s+\d+s\s+e2e-embeddings: no record from this "
                     r"run$", table, re.M)  # fmt: skip
    assert re.search(r"^cpu tier: serve\s+no difference resolved\s+\d+s\s+e2e-serve-bench: "
                     r"output_throughput patched/pristine 0\.926", table, re.M)  # fmt: skip
    assert re.search(r"^total\s+fail\s", table, re.M)
    assert steps.failed == ["cpu tier: embed"]
    assert serve.codes == [(0, 1)]  # exit 1 (an A/B difference) is judged by the records


def test_total_is_the_worst_outcome_when_none_failed():
    steps = Steps("verify-9.9.0", ["a", "b", "c"])
    steps.run("a", lambda: None)
    steps.run("b", lambda: verdicts.Verdict(verdicts.UNRESOLVED, "x: the run could not tell"))
    steps.not_applicable("c", "no recipe")
    assert steps.failed == []
    assert re.search(r"^total\s+no difference resolved\s", steps.table(), re.M)
