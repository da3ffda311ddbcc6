"""gsm8k task file and lm_eval output parsing (no lm_eval needed)."""

from __future__ import annotations

import json

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
