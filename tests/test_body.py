"""PR bodies: the runner a change reaches and who still runs it, the runner of the headline's
record, related upstream work (verify.body)."""

from __future__ import annotations

from tests.test_report import ENTRY, _build

GPU = {"gpu": "NVIDIA H200", "cpu": "x", "python": "3.12"}
#: The fixture entry with its GPU generation step given a record (an engine run).
ENGINE_ENTRY = ENTRY.replace(
    'records = []\ncommand = "-"\nnot_applicable = "CUDA logits keep the dense path"\n',
    'records = ["e2e-x"]\ncommand = "python scripts/gpu_verify.py --steps x"\nheadline = true\n',
)


def _engine(env: dict | None, reason="throughput 1.10 [1.05, 1.15], n=8") -> tuple:
    machine = GPU | ({"env": env} if env is not None else {})
    return ("e2e-x", "pass", {"machine": machine, "reason": reason})


def _claims(text: str) -> str:
    return text.split("## Test Plan")[0]


def test_a_v1_only_change_says_the_pin_defaults_to_mrv2_and_who_still_runs_v1(make_tree, workspace):
    records = {"e2e.json": _engine({"VLLM_USE_V2_MODEL_RUNNER": "0"})}
    _, text = _build(make_tree, workspace, records, ENGINE_ENTRY)
    assert (
        "- **Runner:** V1 only (V1 decode steps with a penalty). v9.9.0 defaults to Model Runner "
        "V2 for Qwen3ForCausalLM (except MoE models), the benchmark model's architecture "
        "(Qwen3ForCausalLM): 1 of its 1 GPU engine records name the V1 runner; V1 still runs "
        "for every other architecture; MoE models; configurations MRV2 does not support (ngram "
        "speculative decoding; speculative method other than eagle / mtp); "
        "VLLM_USE_V2_MODEL_RUNNER=0 (`vllm/config/vllm.py` of v9.9.0)."
    ) in _claims(text)
    assert "throughput 1.10 [1.05, 1.15], n=8 vs v9.9.0 (H200, V1 runner)" in _claims(text)


def test_a_gpu_headline_whose_record_lacks_the_runner_says_so(make_tree, workspace):
    _, text = _build(make_tree, workspace, {"e2e.json": _engine(None)}, ENGINE_ENTRY)
    assert "n=8 vs v9.9.0 (H200, runner not recorded)" in _claims(text)
    assert "0 of its 1 GPU engine records name the V1 runner, the others do not record it" in text


def test_a_kernel_headline_names_no_runner(make_tree, workspace):
    entry = ENGINE_ENTRY.replace('kind = "e2e"', 'kind = "kernel"')
    _, text = _build(make_tree, workspace, {"e2e.json": _engine(None)}, entry)
    assert "n=8 vs v9.9.0 (H200, kernel alone, no model runner)" in _claims(text)


def test_an_mrv2_change_says_where_mrv2_is_the_default(make_tree, workspace):
    entry = ENTRY.replace('runners = ["V1"]', 'runners = ["MRV2"]')
    _, text = _build(make_tree, workspace, entry=entry)
    assert (
        "- **Runner:** MRV2 only (V1 decode steps with a penalty). v9.9.0 runs MRV2 by default "
        "for Qwen3ForCausalLM (except MoE models)."
    ) in _claims(text)


RELATED = """
[[related]]
url = "https://github.com/vllm-project/vllm/pull/47540"
state = "open"
checked = "2026-12-01"
differs = "keeps statistics on the host; this patch keeps them on the device"
"""


def test_related_upstream_work_is_listed_with_its_state(make_tree, workspace):
    entry = ENTRY.replace("\n[pins]", RELATED + "\n[pins]")
    _, text = _build(make_tree, workspace, entry=entry)
    assert (
        "**Related upstream work** (state as of 2026-12-01):\n- #47540 (open): keeps statistics "
        "on the host; this patch keeps them on the device"
    ) in _claims(text)


def test_a_backport_says_so_and_is_not_offered_as_a_proposal(make_tree, workspace):
    backport = RELATED.replace('"open"', '"merged"') + 'relation = "backport"\n'
    _, text = _build(make_tree, workspace, entry=ENTRY.replace("\n[pins]", backport + "\n[pins]"))
    assert "Faster penalties. Backport of #47540 (merged); not a new proposal." in text
    assert "Related upstream work" not in text  # the PR it is, is not listed as related work


def test_a_patch_that_is_an_open_upstream_pr_names_it(make_tree, workspace):
    same = RELATED + 'relation = "same"\n'
    _, text = _build(make_tree, workspace, entry=ENTRY.replace("\n[pins]", same + "\n[pins]"))
    assert "Faster penalties. This is upstream #47540 (open), as it applies to v9.9.0." in text
