"""Token/vector identity with a pristine-vs-pristine control (verdicts on hand-built worker
outputs, run order), CLI errors, and (slow) the broken-patch check on real vLLM."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.e2e import identity
from verify.e2e.__main__ import parse_env
from verify.e2e.identity import compare_generations
from verify.errors import PatchbenchError

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
    # The control (pristine run twice, before patched) agrees: the difference is the patch's.
    assert result["numbers"]["control_differing"] == []


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


# Identity with a control: verdicts on hand-built worker outputs ------------------------------
def _gen(ids: list[int], top: list[list[int]] | None = None) -> dict:
    """One request of a worker's output; `top[i]`: the top-k token ids at position i."""
    top = top or [[t, t + 100] for t in ids]
    return {
        "prompt": "p",
        "params": {"temperature": 0.0},
        "token_ids": ids,
        "logprobs": [-0.5] * len(ids),
        "top_logprobs": [[[t, -0.5 - j] for j, t in enumerate(pos)] for pos in top],
    }


SAME = {"greedy-0": _gen([1, 2, 3, 4]), "seeded-0": _gen([5, 6, 7, 8])}
OTHER = {"greedy-0": _gen([1, 2, 3, 4]), "seeded-0": _gen([5, 6, 9, 8])}


@pytest.mark.parametrize(
    ("control", "patched", "outcome", "share", "control_share"),
    [
        (SAME, SAME, "pass", 1.0, 1.0),
        (SAME, OTHER, "fail", 0.5, 1.0),
        (OTHER, SAME, "inconclusive", 1.0, 0.5),
        (OTHER, OTHER, "inconclusive", 0.5, 0.5),
    ],
    ids=["identical", "patch-differs", "control-differs", "control-and-patch-differ"],
)
def test_token_identity_verdict_needs_the_control(control, patched, outcome, share, control_share):
    runs = {"pristine": SAME, "pristine-control": control, "patched": patched}
    verdict = identity.token_identity_verdict(json.loads(json.dumps(runs)))
    assert verdict.outcome == outcome
    n = verdict.numbers
    assert (n["share_identical"], n["control_share_identical"]) == (share, control_share)
    for prefix, second in (("", patched), ("control_", control)):
        differing = n[f"{prefix}differing"]
        assert [d["request"] for d in differing] == ([] if second is SAME else ["seeded-0"])
        assert [d["first_position"] for d in differing] == [2] * len(differing)
    if outcome != "pass":  # the reason says how far both pairs diverged
        assert "pristine vs pristine-control:" in verdict.reason
        assert "pristine vs patched:" in verdict.reason and "from token 2" in verdict.reason


@pytest.mark.parametrize(
    ("top_a", "top_b", "close"),
    [
        ([[1, 9]], [[9, 1]], True),  # each choice is in the other's top-k: close
        ([[1, 7]], [[9, 1]], False),  # patched's 9 is not in pristine's top-k
        ([[1, 9]], [[9, 7]], False),  # pristine's 1 is not in patched's top-k
    ],
    ids=["close", "not-close-a", "not-close-b"],
)
def test_logprob_closeness_at_the_first_divergence(top_a, top_b, close):
    # Position 0 differs (1 vs 9); later positions are never compared (after the divergence
    # the sequences are allowed to drift apart): their top-k share nothing.
    a = {"r": _gen([1, 2, 3], top_a + [[2], [3]])}
    b = {"r": _gen([9, 4, 5], top_b + [[4], [5]])}
    div = identity.generation_divergence(a, b, ("pristine", "patched"))
    assert div["differing"][0]["first_position"] == 0
    assert div["differing"][0]["logprobs_close"] is close
    assert div["token_divergent_requests"] == 1
    assert div["logprobs_close_requests"] == int(close)
    assert div["logprobs_not_close"] == ([] if close else ["r"])


def test_closeness_is_unknown_without_recorded_top_logprobs():
    a = {"r": {k: v for k, v in _gen([1, 2]).items() if k != "top_logprobs"}}
    b = {"r": {k: v for k, v in _gen([1, 3]).items() if k != "top_logprobs"}}
    assert compare_generations(a, b)[0]["logprobs_close"] is None


V = [[1.0, 0.0], [0.0, 2.0]]
V_NEAR = [[1.0, 0.0], [0.0, 2.0 + 1e-6]]


@pytest.mark.parametrize(
    ("control", "patched", "outcome"),
    [(V, V, "pass"), (V, V_NEAR, "fail"), (V_NEAR, V, "inconclusive")],
    ids=["identical", "patch-differs", "control-differs"],
)
def test_embeddings_verdict_needs_the_control(control, patched, outcome):
    verdict = identity.embeddings_verdict(
        {"pristine": V, "pristine-control": control, "patched": patched}
    )
    assert verdict.outcome == outcome
    n = verdict.numbers
    for prefix, second in (("", patched), ("control_", control)):
        assert n[f"{prefix}differing_vectors"] == ([] if second is V else [1])
        assert n[f"{prefix}max_abs_diff"] == pytest.approx(0.0 if second is V else 1e-6)
        assert n[f"{prefix}cosine_min"] == pytest.approx(1.0)


def test_cosine_min_sees_a_direction_change():
    div = identity.vector_divergence([[1.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [1.0, -1.0]])
    assert div["cosine_min"] == pytest.approx(0.0) and div["max_abs_diff"] == 2.0
    assert div["share_identical"] == 0.5


@pytest.fixture
def identity_ctx(tmp_path, monkeypatch):
    from verify.e2e.common import Context

    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(tmp_path / "results"))
    rt = SimpleNamespace(python="python", venv="v", series=None, overlay=None, env=lambda r: {})
    return Context(version="0.22.0", runtime=rt, model=tmp_path / "m")


def _fake_worker(outputs: dict[str, dict]):
    """run_worker stand-in: returns `outputs[run name]` and records (root, run name) calls."""
    calls: list[tuple[str, str]] = []

    def run_worker(ctx, root, mode, out, *extra, model=None):
        calls.append((root, out.stem))
        return {"wall_s": 1.0, **outputs[out.stem]}

    return run_worker, calls


RUN_ORDER = [("pristine", "pristine"), ("pristine", "pristine-control"), ("patched", "patched")]


@pytest.mark.parametrize(
    ("control", "patched", "outcome"),
    [(SAME, SAME, "pass"), (SAME, OTHER, "fail"), (OTHER, OTHER, "inconclusive")],
    ids=["identical", "patch-differs", "control-differs"],
)
def test_token_identity_runs_the_pristine_control_before_the_ab(
    identity_ctx, tmp_path, monkeypatch, control, patched, outcome
):
    def gen(reqs):
        return {"requests": reqs, "tokens": 8, "generate_s": 1.0, "tok_per_s": 8.0}

    outputs = {"pristine": gen(SAME), "pristine-control": gen(control), "patched": gen(patched)}
    run, calls = _fake_worker(outputs)
    monkeypatch.setattr(identity, "run_worker", run)
    assert identity.token_identity(identity_ctx, max_tokens=4, prompts=1) is (outcome == "pass")
    assert calls == RUN_ORDER  # pristine twice, then patched, whatever the outcome
    rec = json.loads((tmp_path / "results/cpu/0.22.0/e2e-token-identity.json").read_text())
    assert rec["outcome"] == outcome
    assert rec["numbers"]["control_identical_requests"] == (2 if control is SAME else 1)
    assert rec["numbers"]["identical_requests"] == (2 if patched is SAME else 1)
    assert set(rec["numbers"]["timing"]) == {"pristine", "pristine-control", "patched"}


def test_embeddings_run_the_pristine_control_before_the_ab(identity_ctx, tmp_path, monkeypatch):
    outputs = {name: {"vectors": V, "embed_s": 0.1} for name in ("pristine", "pristine-control")}
    run, calls = _fake_worker({**outputs, "patched": {"vectors": V_NEAR, "embed_s": 0.1}})
    monkeypatch.setattr(identity, "run_worker", run)
    assert identity.embeddings(identity_ctx, tmp_path / "embed-model") is False
    assert calls == RUN_ORDER
    rec = json.loads((tmp_path / "results/cpu/0.22.0/e2e-embeddings.json").read_text())
    assert rec["outcome"] == "fail"
    assert rec["numbers"]["differing_vectors"] == [1]
    assert rec["numbers"]["control_differing_vectors"] == []


def test_worker_records_the_top_k_candidates_best_first():
    from verify.e2e import worker

    def lp(logprob, rank):
        return SimpleNamespace(logprob=logprob, rank=rank)

    # vLLM adds the sampled token (here 9, rank 7) to the top-k: it is not a top-k candidate.
    position = {9: lp(-4.0, 7), 2: lp(-1.0, 2), 5: lp(-0.1, 1)}
    position |= {t: lp(-2.0 - r, r) for t, r in ((11, 3), (12, 4), (13, 5), (14, 6))}
    top = worker._top(position)
    assert [tid for tid, _ in top] == [5, 2, 11, 12, 13]
    assert top[0][1] == -0.1


def test_patched_env_reaches_only_the_patched_root_and_the_record(
    identity_ctx, tmp_path, monkeypatch
):
    identity_ctx.runtime.env = lambda root: {"PATCHBENCH_ROOT": root}
    identity_ctx.patched_env = {"VLLM_V1_PENALTY_STATE": "1"}
    assert identity_ctx.env("pristine") == {"PATCHBENCH_ROOT": "pristine"}
    forced = {"PATCHBENCH_ROOT": "patched", "VLLM_V1_PENALTY_STATE": "1"}
    assert identity_ctx.env("patched") == forced
    gen = {"requests": SAME, "tokens": 8, "generate_s": 1.0, "tok_per_s": 8.0}
    run, _ = _fake_worker(dict.fromkeys(("pristine", "pristine-control", "patched"), gen))
    monkeypatch.setattr(identity, "run_worker", run)
    record = "e2e-token-identity-penalty-state"
    assert identity.token_identity(identity_ctx, max_tokens=4, prompts=1, record=record)
    rec = json.loads((tmp_path / f"results/cpu/0.22.0/{record}.json").read_text())
    assert rec["step"] == record and rec["numbers"]["patched_env"] == identity_ctx.patched_env
    assert not (tmp_path / "results/cpu/0.22.0/e2e-token-identity.json").exists()


@pytest.mark.parametrize("item", ["VLLM_V1_PENALTY_STATE", "=1", "NOT A NAME=1"])
def test_a_malformed_patched_env_is_a_named_error(item, bad_input):
    from verify.e2e.__main__ import main

    with pytest.raises(PatchbenchError, match="expected NAME=VALUE") as err:
        parse_env([item])
    bad_input(f"python -m verify.e2e tokens --patched-env {item!r}", str(err.value))
    assert main(["tokens", "--patched-env", item]) == 2  # before any setup
