"""gsm8k task file and lm_eval output parsing (no lm_eval needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from verify.e2e import accuracy
from verify.errors import PatchbenchError


def test_task_yaml_points_at_local_data(tmp_path, monkeypatch):
    data = tmp_path / "gsm8k"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    monkeypatch.setenv("PATCHBENCH_GSM8K_DIR", str(data))
    text = (accuracy.write_task(tmp_path / "tasks", 64) / "gsm8k_local.yaml").read_text()
    assert f"train: {data}/train.jsonl" in text and f"test: {data}/test.jsonl" in text
    assert 'doc_to_text: "Question: {{question}}\\nAnswer:"' in text
    assert "num_fewshot: 5" in text and "max_gen_toks: 64" in text
    assert '"(-?[$0-9.,]{2,})|(-?[0-9]+)"' in text


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_GSM8K_DIR", str(tmp_path / "none"))
    with pytest.raises(PatchbenchError, match="gsm8k train split not found"):
        accuracy.write_task(tmp_path / "tasks", 64)


def test_load_pairs_samples_by_doc_and_filter(tmp_path):
    out = tmp_path / "out" / "tiny"
    out.mkdir(parents=True)
    res = {"results": {"gsm8k_local": {"exact_match,strict-match": 0.0}}}
    (out / "results_1.json").write_text(json.dumps(res))
    rows = [
        {"doc_id": 1, "filter": "strict-match", "resps": [["a"]], "filtered_resps": ["x"]},
        {"doc_id": 0, "filter": "strict-match", "resps": [["b"]], "filtered_resps": ["y"]},
        {"doc_id": 0, "filter": "flexible-extract", "resps": [["b"]], "filtered_resps": ["2"]},
    ]
    (out / "samples_gsm8k_local_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores, samples = accuracy._load(tmp_path / "out")
    assert scores["exact_match,strict-match"] == 0.0
    assert [(s["doc_id"], s["filter"]) for s in samples] == [
        (0, "flexible-extract"),
        (0, "strict-match"),
        (1, "strict-match"),
    ]


def _fake_lm_eval(answers: dict[str, list[str]]):
    """subprocess.run stand-in for lm_eval: writes results and samples for the server named in
    the command's base_url; `answers[url]` holds one response list per call, in call order."""
    calls: list[str] = []
    real_run = accuracy.subprocess.run

    def run(cmd, **kwargs):
        if not any(str(a).startswith("base_url=") for a in cmd):
            return real_run(cmd, **kwargs)  # not lm_eval (e.g. git reading trailers)
        url = next(a for a in cmd if a.startswith("base_url=")).split(",")[0][9:]
        url = url.removesuffix("/v1/completions")
        resps = answers[url][sum(1 for c in calls if c == url)]
        calls.append(url)
        out = accuracy.Path(cmd[cmd.index("--output_path") + 1]) / "tiny"
        out.mkdir(parents=True, exist_ok=True)
        res = {"results": {"gsm8k_local": {"exact_match,strict-match": 0.0}}}
        (out / "results_1.json").write_text(json.dumps(res))
        rows = [
            {"doc_id": i, "filter": "strict-match", "resps": [[r]], "filtered_resps": [r]}
            for i, r in enumerate(resps)
        ]
        (out / "samples_gsm8k_local_1.jsonl").write_text("\n".join(map(json.dumps, rows)))
        return accuracy.subprocess.CompletedProcess(cmd, 0)

    return run, calls


@pytest.fixture
def gsm8k_ctx(tmp_path, monkeypatch):
    """A Context with a stand-in runtime, local gsm8k data and temp cache/results dirs."""
    from verify.e2e.common import Context

    data = tmp_path / "gsm8k"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    monkeypatch.setenv("PATCHBENCH_GSM8K_DIR", str(data))
    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(tmp_path / "results"))
    rt = SimpleNamespace(python="python", venv="v", series=None, overlay=None, env=lambda r: {})
    return Context(version="0.22.0", runtime=rt, model=tmp_path / "m")


SERVERS = {"pristine": SimpleNamespace(url="http://p"), "patched": SimpleNamespace(url="http://q")}


@pytest.mark.parametrize(
    ("control", "patched", "outcome", "differing", "control_differing"),
    [
        (["a", "b", "c"], ["a", "b", "c"], "pass", [], []),
        (["a", "b", "c"], ["a", "b", "z"], "fail", [2], []),
        (["a", "x", "c"], ["a", "b", "z"], "inconclusive", [2], [1]),
        (["a", "x", "c"], ["a", "b", "c"], "inconclusive", [], [1]),
    ],
    ids=["identical", "patch-differs", "control-and-patch-differ", "control-differs"],
)
def test_gsm8k_runs_the_pristine_control_before_the_ab(
    gsm8k_ctx, tmp_path, monkeypatch, control, patched, outcome, differing, control_differing
):
    answers = {"http://p": [["a", "b", "c"], control], "http://q": [patched]}
    run, calls = _fake_lm_eval(answers)
    monkeypatch.setattr(accuracy.subprocess, "run", run)
    assert accuracy.gsm8k(gsm8k_ctx, limit=3, servers=SERVERS) is (outcome == "pass")
    assert calls == ["http://p", "http://p", "http://q"]  # pristine twice, then patched
    rec = json.loads((tmp_path / "results/cpu/0.22.0/e2e-gsm8k.json").read_text())
    assert rec["outcome"] == outcome
    assert rec["numbers"]["differing_doc_ids"] == differing
    assert rec["numbers"]["control_differing_doc_ids"] == control_differing
    assert rec["numbers"]["num_concurrent"] == 1


def test_gsm8k_requests_go_one_at_a_time(gsm8k_ctx, tmp_path):
    cmd = accuracy.lm_eval_cmd(gsm8k_ctx, "http://x", tmp_path, tmp_path / "o", 3)
    assert "num_concurrent=1," in cmd[cmd.index("--model_args") + 1]
