"""One lock per pin: two commands that change a pin's build tree, patches or records run one
after the other, and neither leaves the tree half-applied.

The race tests start two real `python -m verify apply 0.22.0` processes at once, many times,
on a synthetic release (the `pinned_release` fixture). Before the lock, a fresh build folder
failed the second one with `.../tree: Directory not empty`, and a changed patch file left a
half-done `git am` in the tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import commit_change
from verify.buildtree import BuildTree

REPO = Path(__file__).resolve().parent.parent
RUNS = 20
SUBJECTS = ["[Perf] First", "[Perf] Keep ids on CPU", "[Perf] Second"]


def _commit_series(tree: BuildTree, value: int) -> dict[str, bytes]:
    """Replace the tree's commits by three patches (the first adds `value`), export them;
    the series' files."""
    tree.git("reset", "--hard", "-q", "pristine")
    commit_change(tree, "vllm/sampler.py", "x + 1\n", f"x + {value}\n", SUBJECTS[0])
    commit_change(tree, "vllm/pooling.py", "True", "False", SUBJECTS[1])
    commit_change(tree, "vllm/sampler.py", "return x + 9\n", "return x * 9\n", SUBJECTS[2])
    tree.export()
    return {p.name: p.read_bytes() for p in tree.series_path.iterdir()}


def _three_patch_series() -> BuildTree:
    tree = BuildTree("0.22.0")
    tree.apply()
    _commit_series(tree, 100)
    return tree


def _race(env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """Two `apply 0.22.0` started at once; their (exit status, stderr)."""
    command = [sys.executable, "-m", "verify", "apply", "0.22.0"]
    procs = [
        subprocess.Popen(command, cwd=REPO, env={**os.environ, **(env or {})},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    return [(proc.wait(timeout=120), proc.stderr.read()) for proc in procs]


def _assert_whole(tree: BuildTree, outcomes: list[tuple[int, str]], run: int) -> None:
    """Both exited 0 and the tree holds the series, clean, with no `git am` in progress."""
    assert [code for code, _ in outcomes] == [0, 0], f"run {run}: {outcomes}"
    assert tree.git("status", "--porcelain", "--untracked-files=all") == "", f"run {run}"
    assert not (tree.path / ".git" / "rebase-apply").exists(), f"run {run}"
    subjects = tree.git("log", "--reverse", "--format=%s", "pristine..HEAD").splitlines()
    assert subjects == SUBJECTS, f"run {run}"
    assert tree.check().ok, f"run {run}: {tree.check().differences}"


def _waited(outcomes: list[tuple[int, str]]) -> bool:
    return any("waiting for the lock of vLLM 0.22.0" in err for _, err in outcomes)


def test_two_applies_at_once_on_a_fresh_build_folder_both_succeed(pinned_release, tmp_path):
    _three_patch_series()
    waits = 0
    for run in range(RUNS):
        build = tmp_path / f"build-{run}"
        outcomes = _race({"PATCHBENCH_BUILD_DIR": str(build)})
        _assert_whole(BuildTree("0.22.0", root=build), outcomes, run)
        assert sorted(p.name for p in build.iterdir() if p.name != ".locks") == ["0.22.0"]
        waits += _waited(outcomes)
    assert waits, "the two applies never overlapped: the test did not race them"


def test_two_applies_at_once_after_a_patch_file_changed_both_succeed(pinned_release):
    tree = BuildTree("0.22.0")
    tree.apply()
    versions = {value: _commit_series(tree, value) for value in (100, 101)}
    waits = 0
    for run in range(RUNS):
        value = 100 + run % 2  # each run's first patch differs from the tree's
        for name, data in versions[value].items():
            (tree.series_path / name).write_bytes(data)
        outcomes = _race()
        _assert_whole(tree, outcomes, run)
        assert f"return x + {value}\n" in (tree.path / "vllm/sampler.py").read_text()
        waits += _waited(outcomes)
    assert waits, "the two applies never overlapped: the test did not race them"
