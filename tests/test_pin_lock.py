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
import time
from pathlib import Path

import pytest

from tests.conftest import commit_change
from verify import locks
from verify.buildtree import BACKUP_PREFIX, BuildTree
from verify.cli import main

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


def _waited(outcomes: list[tuple[int, str]]) -> str:
    """The line in which one of the two said it waits for the other ('' if neither did)."""
    lines = [line for _, err in outcomes for line in err.splitlines()]
    return next((line for line in lines if "waiting for the lock of vLLM 0.22.0" in line), "")


def test_two_applies_at_once_on_a_fresh_build_folder_both_succeed(
    pinned_release, tmp_path, bad_input
):
    _three_patch_series()
    waits = []
    for run in range(RUNS):
        build = tmp_path / f"build-{run}"
        outcomes = _race({"PATCHBENCH_BUILD_DIR": str(build)})
        _assert_whole(BuildTree("0.22.0", root=build), outcomes, run)
        assert sorted(p.name for p in build.iterdir() if p.name != ".locks") == ["0.22.0"]
        waits += [line for line in [_waited(outcomes)] if line]
    assert waits, "the two applies never overlapped: the test did not race them"
    assert "held by pid " in waits[0] and "(python -m verify apply 0.22.0)" in waits[0]
    bad_input("two `apply 0.22.0` at once (the second waits, then finds the series applied)",
              waits[0].removeprefix("[patchbench] "))  # fmt: skip


def test_two_applies_at_once_after_a_patch_file_changed_both_succeed(pinned_release):
    tree = BuildTree("0.22.0")
    tree.apply()
    versions = {value: _commit_series(tree, value) for value in (100, 101)}
    waits = []
    for run in range(RUNS):
        value = 100 + run % 2  # each run's first patch differs from the tree's
        for name, data in versions[value].items():
            (tree.series_path / name).write_bytes(data)
        outcomes = _race()
        _assert_whole(tree, outcomes, run)
        assert f"return x + {value}\n" in (tree.path / "vllm/sampler.py").read_text()
        waits += [line for line in [_waited(outcomes)] if line]
    assert waits, "the two applies never overlapped: the test did not race them"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("[patchbench] waiting")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")


HOLDER = """import sys
from verify import locks
sys.argv = [sys.argv[1], "export", "0.22.0"]
with locks.pin_lock("0.22.0"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_lock_held_past_the_timeout_is_a_named_error(pinned_release, monkeypatch, capsys,
                                                       bad_input):  # fmt: skip
    command = [sys.executable, "-c", HOLDER, str(REPO / "verify" / "__main__.py")]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    holder = subprocess.Popen(command, cwd=REPO, text=True, **pipes)
    try:
        assert holder.stdout.readline() == "held\n"
        monkeypatch.setenv("PATCHBENCH_LOCK_TIMEOUT", "0.3")
        started = time.monotonic()
        assert main(["apply", "0.22.0"]) == 2
        assert time.monotonic() - started >= 0.3
    finally:
        holder.communicate("", timeout=30)
    message = _one_line_error(capsys)
    assert f"locked by pid {holder.pid} (python -m verify export 0.22.0)" in message
    bad_input("`apply 0.22.0` while `export 0.22.0` holds the pin's lock, with "
              "PATCHBENCH_LOCK_TIMEOUT=0.3", message)  # fmt: skip
    assert not BuildTree("0.22.0").exists()  # nothing was done
    assert main(["apply", "0.22.0"]) == 0  # released: the next one runs


def test_the_lock_is_reentrant_and_released_after_the_block(pinned_release):
    """check applies inside its own lock; a nested block must not wait for itself."""
    with locks.pin_lock("0.22.0"), locks.pin_lock("0.22.0", timeout=0):
        assert main(["apply", "0.22.0"]) == main(["export", "0.22.0"]) == 0
        assert main(["check", "0.22.0"]) == 0
    other = [sys.executable, "-c", "from verify import locks\n"
             "with locks.pin_lock('0.22.0', timeout=0): print('took it')"]  # fmt: skip
    run = subprocess.run(other, cwd=REPO, capture_output=True, text=True)
    assert run.stdout == "took it\n", run.stderr


def test_another_process_cannot_take_a_held_lock(pinned_release):
    other = [sys.executable, "-m", "verify", "export", "0.22.0"]
    with locks.pin_lock("0.22.0"):
        run = subprocess.run(other, cwd=REPO, capture_output=True, text=True,
                             env={**os.environ, "PATCHBENCH_LOCK_TIMEOUT": "0"})  # fmt: skip
    assert run.returncode == 2 and "is locked by pid" in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PATCHBENCH_INDEX_URL", "not-a-url", "is not an http(s) URL"),
        ("PATCHBENCH_INDEX_URL", "ftp://example.org/simple", "is not an http(s) URL"),
        ("PATCHBENCH_LOCK_TIMEOUT", "soon", "is not a number of seconds"),
        ("PATCHBENCH_LOCK_TIMEOUT", "-1", "is not a number of seconds"),
        ("PATCHBENCH_BUILD_DIR", "{file}", "is not a folder"),
        ("PATCHBENCH_CACHE_DIR", "{file}", "is not a folder"),
    ],
)
def test_a_bad_environment_variable_is_a_one_line_named_error(
    pinned_release, tmp_path, monkeypatch, capsys, bad_input, variable, value, says
):
    (tmp_path / "a-file").write_text("")
    value = value.replace("{file}", str(tmp_path / "a-file"))
    monkeypatch.setenv(variable, value)
    assert main(["apply", "0.22.0"]) == 2
    message = _one_line_error(capsys)
    assert message.startswith(f"{variable}={value!r} {says}"), message
    shown = value.replace(str(tmp_path), "<tmp>")
    bad_input(f"`{variable}={shown} python -m verify apply 0.22.0`", message)
    assert not (tmp_path / "build").exists()  # nothing was written


def _backup_at(tree: BuildTree, days_ago: float, suffix: str = "") -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() - days_ago * 86400))
    name = f"{BACKUP_PREFIX}/{stamp}{suffix}"
    tree.git("branch", name, "HEAD")
    return name


def test_prune_backups_deletes_old_ones_and_keeps_the_newest(pinned_release, capsys):
    tree = BuildTree("0.22.0")
    tree.apply()
    old = [_backup_at(tree, 90), _backup_at(tree, 90, "-1"), _backup_at(tree, 40)]
    recent = _backup_at(tree, 2)
    tree.git("branch", f"{BACKUP_PREFIX}/by-hand", "HEAD")  # no time in its name: never pruned

    def present() -> list[str]:
        return tree.git("branch", "--list", f"{BACKUP_PREFIX}/*", "--format=%(refname:short)")

    assert [name for name, _ in tree.backups()] == [*old, recent]
    before = present()
    assert main(["prune-backups", "0.22.0", "--dry-run"]) == 0
    assert present() == before
    assert all(f"would delete {name}" in capsys.readouterr().err for name in old[:1])
    assert main(["prune-backups", "0.22.0", "--older-than", "30"]) == 0
    assert present().split() == [recent, f"{BACKUP_PREFIX}/by-hand"]
    assert main(["prune-backups", "0.22.0", "--older-than", "0"]) == 0
    assert present().split() == [recent, f"{BACKUP_PREFIX}/by-hand"]  # the newest is kept
    assert tree.prune_backups(0, keep=1) == ([], [recent])


def test_prune_backups_keeps_the_newest_n_even_when_old(pinned_release, capsys, bad_input):
    tree = BuildTree("0.22.0")
    tree.apply()
    names = [_backup_at(tree, days) for days in (50, 40, 35)]
    assert tree.prune_backups(30, keep=2, dry_run=True) == (names[:1], names[1:])
    capsys.readouterr()
    assert main(["prune-backups", "0.22.0", "--keep", "0"]) == 2
    message = _one_line_error(capsys)
    assert "the newest backup is always kept" in message
    bad_input("`prune-backups 0.22.0 --keep 0`", message)
    assert [name for name, _ in tree.backups()] == names
