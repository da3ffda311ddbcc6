"""Token-identity comparison, CLI errors, and (slow) the broken-patch check on real vLLM."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verify.e2e.identity import compare_generations

ROOT = Path(__file__).resolve().parents[2]


def _req(ids, lps):
    return {"token_ids": ids, "logprobs": lps}


def test_compare_identical_and_different():
    a = {"greedy-0": _req([1, 2, 3], [-0.1, -0.2, -0.3]), "seeded-0": _req([4], [-1.0])}
    assert compare_generations(a, json.loads(json.dumps(a))) == []
    b = {"greedy-0": _req([1, 2, 9], [-0.1, -0.2, -0.3]), "seeded-0": _req([4], [-1.5])}
    diffs = compare_generations(a, b)
    assert [(d["request"], d["what"]) for d in diffs] == [
        ("greedy-0", "token_ids"),
        ("seeded-0", "logprobs"),
    ]
    assert diffs[0]["first_position"] == 2
    assert compare_generations(a, {"greedy-0": a["greedy-0"]})[0]["what"] == "missing in B"


def test_missing_model_path_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "verify.e2e", "tokens", "--model", str(tmp_path / "no-such-model")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "model path does not exist" in proc.stderr and "no-such-model" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_model_dir_without_config(tmp_path):
    from verify.e2e.common import check_model_path
    from verify.errors import PatchbenchError

    with pytest.raises(PatchbenchError, match="no config.json"):
        check_model_path(tmp_path)


# One line of the penalties op: the repetition penalty passed to the kernel is doubled.
BROKEN_LINE = "        repetition_penalties,\n"
BROKEN_REPLACEMENT = "        repetition_penalties * 2,\n"


@pytest.mark.slow
def test_broken_patch_fails_token_identity(tmp_path, monkeypatch):
    """A patch that doubles the repetition penalty changes sampled tokens: the token-identity
    step must fail (exit 1) and list the differing requests."""
    from verify import runtime

    venv = runtime.ensure_venv("0.22.0")
    site = runtime._site_packages(venv)
    rel = "vllm/v1/sample/ops/penalties.py"
    tree = tmp_path / "tree"
    (tree / rel).parent.mkdir(parents=True)
    shutil.copy(site / rel, tree / rel)
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:1], "init", "-q", str(tree)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "pristine"], check=True)
    subprocess.run([*git, "tag", "pristine"], check=True)
    text = (tree / rel).read_text()
    assert text.count(BROKEN_LINE) == 1
    (tree / rel).write_text(text.replace(BROKEN_LINE, BROKEN_REPLACEMENT))
    subprocess.run([*git, "commit", "-qam", "[Bug] repetition penalty doubled"], check=True)
    results = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verify.e2e",
            "tokens",
            "--tree",
            str(tree),
            "--quick",
            "--prompts",
            "1",
            "--max-tokens",
            "128",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**__import__("os").environ, "PATCHBENCH_RESULTS_DIR": str(results)},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "token identity FAILED" in proc.stdout
    result = json.loads((results / "cpu/0.22.0/e2e-token-identity.json").read_text())
    assert result["outcome"] == "fail"
    differing = {d["request"] for d in result["numbers"]["differing"]}
    # Rows without penalties change too: in a batch with penalties the op runs on every row,
    # and their repetition penalty 1.0 becomes 2.0.
    assert any(name.startswith("penalties") for name in differing), differing
    # The control rerun of pristine matches the first run: the difference is the patch's.
    assert result["numbers"]["pristine_rerun_differing"] == []


def test_changed_inputs_are_reported_as_such():
    a = {"greedy-0": {**_req([1], [-0.1]), "prompt": "p", "params": {"temperature": 0}}}
    b = {"greedy-0": {**_req([2], [-0.1]), "prompt": "q", "params": {"temperature": 0}}}
    assert compare_generations(a, b)[0]["what"].startswith("inputs differ")


def test_worker_batches_give_every_sampled_row_a_generator():
    # vLLM 0.22.0's forward_cpu uses the global RNG for a batch with any row lacking a
    # generator: sampled requests must not share a generate call with greedy ones.
    from verify.e2e import worker

    reqs = worker.requests(max_tokens=8, n_prompts=4)
    sampled, greedy = worker._batches(reqs)
    assert all("seed" in reqs[i][2] and reqs[i][2]["temperature"] > 0 for i in sampled)
    assert all(reqs[i][2]["temperature"] == 0.0 for i in greedy)
    assert sorted(sampled + greedy) == list(range(len(reqs)))
    # Each batch still mixes penalties, thinking budgets and plain requests.
    for batch in (sampled, greedy):
        kinds = {reqs[i][0].rsplit("-", 1)[0] for i in batch}
        assert any(k.startswith("penalties") for k in kinds)
        assert any(not k.startswith("penalties") for k in kinds)
