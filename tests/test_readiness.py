"""`python -m verify propose`: the body on stdout, the readiness checklist on stderr, exit 0
only when every check holds (verify.readiness)."""

from __future__ import annotations

import io

import pytest

from tests.test_body import ENGINE_ENTRY, RELATED
from tests.test_report import _build
from verify import readiness, registry, versions
from verify.errors import PatchbenchError

GPU_V1 = {
    "gpu": "NVIDIA H200",
    "cpu": "x",
    "python": "3.12",
    "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"},
}
IDENTITY = {"requests": 4, "identical_requests": 4, "control_identical_requests": 4}
#: Records of a ready patch: its upstream tests and token identity current and passing.
READY = {
    "up.json": ("upstream-x", "pass", {}),
    "e2e.json": ("e2e-x", "pass", {"machine": GPU_V1, "numbers": IDENTITY}),
}
READY_ENTRY = ENGINE_ENTRY.replace("\n[pins]", RELATED + "\n[pins]")
STALE = {"faster-penalties": "0ld0ld0ld0ld"}
#: One change to the ready patch per check, and the check it makes fail.
BREAKS = {
    "equivalence": ({"eq.json": ("equivalence-x", "fail", {"reason": "3 failed"})}, READY_ENTRY),
    "upstream tests": ({"up.json": ("upstream-x", "pass", {"patches": STALE})}, READY_ENTRY),
    "headline": (
        {"bench.json": ("microbench-x", "no difference resolved", {"reason": "1.0 [0.9, 1.1]"})},
        READY_ENTRY,
    ),
    "identity": (
        {
            "e2e.json": READY["e2e.json"][:2]
            + (
                {
                    "machine": GPU_V1,
                    "reason": "tokens identical (no pristine-vs-pristine control recorded)",
                },
            )
        },
        READY_ENTRY,
    ),  # fmt: skip
    "related work": ({}, ENGINE_ENTRY),
    "runner": ({"e2e.json": ("e2e-x", "pass", {"machine": GPU_V1 | {"env": {}}})}, READY_ENTRY),
}


def _propose(make_tree, workspace, monkeypatch, extra: dict, entry: str, wanted="1"):
    _build(make_tree, workspace, READY | extra, entry)
    monkeypatch.setattr(versions, "PINNED", (*versions.PINNED, "9.9.0"))
    for name in ("build", "patches", "results"):
        monkeypatch.setenv(f"PATCHBENCH_{name.upper()}_DIR", str(workspace / name))
    return _run(wanted)


def _run(wanted: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = readiness.propose("9.9.0", wanted, out, err)
    return code, out.getvalue(), err.getvalue()


def test_a_ready_patch_prints_its_body_and_exits_0(make_tree, workspace, monkeypatch):
    code, body, checklist = _propose(make_tree, workspace, monkeypatch, {}, READY_ENTRY)
    assert code == 0, checklist
    assert body.startswith("<!-- markdownlint-disable -->") and "## Purpose" in body
    assert checklist.count("  [x] ") == len(readiness.CHECKS) and "[ ]" not in checklist
    assert checklist.rstrip().endswith("\nready")


@pytest.mark.parametrize("check", list(BREAKS))
def test_each_check_fails_on_its_own_and_is_named(make_tree, workspace, monkeypatch, check):
    extra, entry = BREAKS[check]
    code, body, checklist = _propose(make_tree, workspace, monkeypatch, extra, entry)
    assert code == 1 and "## Purpose" in body
    assert f"  [ ] {readiness.CHECKS[check]}: " in checklist
    assert checklist.rstrip().endswith(f"not ready: {check}")


def test_a_patch_is_found_by_number_or_registry_id(make_tree, workspace, monkeypatch):
    code, _, checklist = _propose(make_tree, workspace, monkeypatch, {}, READY_ENTRY, "0001")
    assert code == 0 and "readiness of 9.9.0/0001 (faster-penalties)" in checklist
    assert _run("faster-penalties")[2] == checklist


def test_an_unknown_patch_or_pin_is_a_named_error(make_tree, workspace, monkeypatch):
    with pytest.raises(PatchbenchError, match=r"no patch '7'; give its number or registry id"):
        _propose(make_tree, workspace, monkeypatch, {}, READY_ENTRY, "7")
    with pytest.raises(PatchbenchError, match="vLLM 9.8.0 is not a pinned version"):
        readiness.propose("9.8.0", "1")


def test_the_cli_exits_2_on_an_unknown_patch(capsys, bad_input):
    from verify import cli

    assert cli.main(["propose", "0.22.0", "no-such-patch"]) == 2
    captured = capsys.readouterr()
    line = captured.err.strip().splitlines()[-1]
    assert captured.out == "" and line.startswith(
        "error: vLLM 0.22.0 has no patch 'no-such-patch'; give its number or registry id: "
        "0001 (mrv2-skip-fp32-logits-copy), "
    )
    bad_input("`python -m verify propose 0.22.0 no-such-patch` (an unknown patch)", line)


@pytest.mark.parametrize(
    "extra, cell", [({}, "ready"), (BREAKS["headline"][0], "not ready: headline")]
)
def test_the_matrix_shows_readiness_per_patch(make_tree, workspace, extra, cell):
    index, _ = _build(make_tree, workspace, READY | extra, READY_ENTRY)
    rows = [r for r in index.read_text().splitlines() if r.startswith("| [0001]")]
    assert rows and rows[0].endswith(f"| {cell} |")


def test_headline_of_a_correctness_only_patch_needs_no_measurement() -> None:
    step = registry.Step("equivalence", "Equivalence", "cpu", "tests", ("eq",), "pytest x")

    class Evidence:
        version, rows = "9.9.0", [(step, "pass", "", [{"step": "eq"}])]

    assert readiness._headline(Evidence()) == (True, "correctness only (no performance claim)")
