"""verify.forward_tests: the adapter must match exactly, and per-test verdicts."""

from __future__ import annotations

import pytest

from verify import forward_tests as ft
from verify.errors import PatchbenchError

SPEC = ft.ForwardSpec(
    seed="002",
    subject="[Perf] X",
    release="9.9.1",
    test_file="tests/test_x.py",
    select="pooling",
    adapter=(("DEVICE = platform()", 'DEVICE = "cpu"'),),
    not_applicable={"test_other_change": "9.9.1's other change"},
)


def test_adapter_applies_and_refuses_a_missing_or_ambiguous_match():
    assert ft.adapt("DEVICE = platform()\nx = 1\n", SPEC) == 'DEVICE = "cpu"\nx = 1\n'
    with pytest.raises(PatchbenchError, match="found it 0 time"):
        ft.adapt("DEVICE = other()\n", SPEC)
    with pytest.raises(PatchbenchError, match="found it 2 time"):
        ft.adapt("DEVICE = platform()\nDEVICE = platform()\n", SPEC)


def test_classify():
    outcomes = {
        "tests/test_x.py::test_a[p0]": "passed",
        "tests/test_x.py::test_b": "failed",
        "tests/test_x.py::test_other_change[cpu]": "failed",
        "tests/test_x.py::test_c": "skipped",
    }
    rows = ft.classify(outcomes, SPEC, {"tests/test_x.py::test_c": "needs CUDA"})
    verdicts = {r["test"].split("::")[1]: (r["verdict"], r["reason"]) for r in rows}
    assert verdicts == {
        "test_a[p0]": ("pass", ""),
        "test_b": ("fail", ""),
        "test_other_change[cpu]": ("not applicable", "covers 9.9.1's other change"),
        "test_c": ("not run", "needs CUDA"),
    }


def test_specs_and_explanations_name_patches_of_their_pins():
    from verify import upstream_tests
    from verify.series import read_series
    from verify.versions import PINNED

    checked = 0
    for version in PINNED:
        subjects = {p.subject for p in read_series(version)}
        named = [s.subject for s in ft.specs(version)]
        named += [patch for patch, _ in upstream_tests.explained(version).values()]
        for subject in named:
            assert subject in subjects, (version, subject)
            checked += 1
    assert checked >= 6  # the forward specs and explanations of 0.16.0, 0.18.1 and 0.22.0


def test_an_interpreter_without_pytest_is_named_with_its_error(tmp_path):
    root = tmp_path / "root"
    (root / "tests").mkdir(parents=True)
    (root / "vllm").mkdir()
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'No module named pytest' >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(PatchbenchError, match="have pytest, torch and triton.*No module named"):
        ft._run_side(root, SPEC, "def test_x(): pass\n", str(python), "patched")


def test_a_relative_interpreter_path_is_made_absolute(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(ft, "specs", lambda version: [SPEC])
    monkeypatch.setattr(ft, "run_spec", lambda v, s, python, f: seen.append(python) or 1 / 0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ZeroDivisionError):
        ft.main(["0.22.0", "--python", "venv/bin/python"])
    assert seen == [str(tmp_path / "venv/bin/python")]
