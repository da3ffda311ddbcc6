"""`port`: a synthetic series carried between two local releases made here (no network), through
every outcome: clean, 3-way, absorbed, conflict + continue, conflict + abort, rerere replay, and
Ctrl-C (SIGINT) during a real `python -m verify port` losing nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RELEASE_FILES, commit_change, make_sdist
from verify import port, port_report
from verify.buildtree import BuildTree
from verify.errors import PatchbenchError
from verify.series import read_series

REPO = Path(__file__).resolve().parent.parent
SAMPLER = RELEASE_FILES["vllm/sampler.py"]
PROPOSED = """Upstream: https://github.com/vllm-project/vllm/pull/1
Status: proposed
Verify: tests/test_sampler.py
Drop-when: merged upstream"""

#: The newer release: two lines above everything (hunks move), f3 changed where the series
#: changes it (conflict), f7's def line changed two lines from a changed line (3-way), and
#: f9 already as the series has it (absorbed).
NEWER = {
    "vllm/sampler.py": "# newer\n# release\n"
    + SAMPLER.replace("return x + 3\n", "return x + 33\n")
    .replace("def f7(x):\n", "def f7(x):  # seven\n")
    .replace("return x + 9\n", "return x + 90\n")
}


def _releases() -> list[str]:
    return ["9.9.0", "9.9.1"]


def _series(make_tree) -> BuildTree:
    """Five patches on 9.9.0: clean, 3-way, absorbed, conflict, clean."""
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] One")
    commit_change(tree, "vllm/sampler.py", "return x + 6\n", "return x + 60\n", "[Perf] Six")
    commit_change(tree, "vllm/sampler.py", "return x + 9\n", "return x + 90\n", "[Perf] Nine",
                  PROPOSED)  # fmt: skip
    commit_change(tree, "vllm/sampler.py", "return x + 3\n", "return x + 30\n", "[Perf] Three")
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] Pool")
    tree.export()
    return tree


def _start(make_tree, source: BuildTree, replace: bool = False) -> tuple[BuildTree, int]:
    target = make_tree("9.9.1", NEWER)
    state = port.start(source, target, replace=replace)
    return target, port.run(source, target, state, _releases)


def _resolve(target: BuildTree) -> None:
    """Resolve the conflict of "[Perf] Three": keep the newer release's line, times ten."""
    text = target.read_bytes("HEAD", "vllm/sampler.py").decode()
    (target.path / "vllm/sampler.py").write_text(text.replace("x + 33\n", "x + 330\n"))
    target.git("add", "vllm/sampler.py")


def _outcomes(target: BuildTree) -> dict[str, port.Outcome]:
    state = port.load(target)
    return {o["subject"]: port.Outcome(**o) for o in state.outcomes}


def test_each_outcome_then_conflict_stops_in_git_am(make_tree, capsys):
    source = _series(make_tree)
    target, code = _start(make_tree, source)
    assert code == 1
    found = _outcomes(target)
    assert found["[Perf] One"].outcome == "clean"
    assert found["[Perf] One"].hunks == ["vllm/sampler.py hunk 1 at line 5 (offset +2)"]
    assert found["[Perf] Six"].outcome == "3-way"
    assert any("moved from line" in h for h in found["[Perf] Six"].hunks)
    nine = found["[Perf] Nine"]
    assert nine.outcome == "absorbed" and "reverse-applies" in nine.detail
    assert nine.absorbed_in == "9.9.1" and nine.trailer == "Status: merged-in 9.9.1"
    assert "[Perf] Pool" not in found  # not reached
    assert target.am_in_progress()
    assert target.git("diff", "--name-only", "--diff-filter=U") == "vllm/sampler.py"
    out = capsys.readouterr().out
    assert "0004-" in out and "port --continue 9.9.1" in out and "port --abort 9.9.1" in out


def test_continue_takes_the_resolution_then_exports_checks_and_reports(make_tree):
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    with pytest.raises(PatchbenchError, match="still conflicted in .*vllm/sampler.py"):
        port.resume(source, target, _releases)
    _resolve(target)
    assert port.resume(source, target, _releases) == 0
    assert port.load(target) is None and not target.am_in_progress()
    patches = read_series("9.9.1", target.patches_root)
    assert [p.subject for p in patches] == ["[Perf] One", "[Perf] Six", "[Perf] Three",
                                            "[Perf] Pool"]  # fmt: skip
    assert target.check().ok
    for new in patches:  # trailers carried
        old = next(p for p in read_series("9.9.0", source.patches_root) if p.subject == new.subject)
        assert new.trailers == old.trailers
    assert list((target.series_path / "rr-cache").glob("*/postimage"))
    report = port_report.report_path(target, "9.9.0").read_text()
    for expected in ("| clean |", "| 3-way |", "| absorbed |", "| resolved |", "Range-diff",
                     "0003 stands alone; 0004 stands alone", "`Status: merged-in 9.9.1`",
                     "9.9.0/0004 -> 9.9.1/0003"):  # fmt: skip
        assert expected in report, expected
    assert "+    return x + 330" in report  # the resolution, as range-diff shows it


def test_a_second_port_of_the_same_pair_replays_the_resolution(make_tree):
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    _resolve(target)
    assert port.resume(source, target, _releases) == 0
    first = {p.name: p.read_bytes() for p in target.series_path.glob("*.patch")}
    shutil.rmtree(target.path)  # a fresh clone: only patches/9.9.1/ (with rr-cache) is kept
    with pytest.raises(PatchbenchError, match="already holds 4 patch"):
        _start(make_tree, source)
    target, code = _start(make_tree, source, replace=True)
    assert code == 0
    text = port_report.report_path(target, "9.9.0").read_text()
    assert "| [Perf] Three | replayed |" in text.replace("0004 ", "")
    assert "differs from the previous" not in text
    assert {p.name: p.read_bytes() for p in target.series_path.glob("*.patch")} == first


def test_a_second_port_says_which_patch_differs_from_the_previous_port(make_tree):
    """An edit made after the first port (outside any conflict) is not replayed: it is named."""
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    _resolve(target)
    port.resume(source, target, _releases)
    text = (target.path / "vllm/pooling.py").read_text()
    (target.path / "vllm/pooling.py").write_text(text + "EXTRA = 1\n")
    target.git("commit", "-qa", "--amend", "--no-edit")
    target.export()
    shutil.rmtree(target.path)
    target, code = _start(make_tree, source, replace=True)
    assert code == 0
    text = port_report.report_path(target, "9.9.0").read_text()
    assert "differs from the previous 0004-Perf-Pool.patch" in text


def test_abort_restores_the_tree_and_the_series_before_the_port(make_tree):
    source = _series(make_tree)
    target = make_tree("9.9.1", NEWER)
    target.apply()  # an existing pin with work of its own: one commit and a series
    commit_change(target, "vllm/pooling.py", "True", "None", "[Misc] Own work")
    target.export()
    before = {p.name: p.read_bytes() for p in target.series_path.iterdir()}
    head = target.head()
    state = port.start(source, target, replace=True)
    assert port.run(source, target, state, _releases) == 1
    (target.path / "vllm/sampler.py").write_text("half a resolution\n")
    port.abort(target)
    assert target.head() == head and target.dirty_files() == []
    assert not target.am_in_progress() and port.load(target) is None
    assert {p.name: p.read_bytes() for p in target.series_path.iterdir()} == before
    with pytest.raises(PatchbenchError, match="no port into vLLM 9.9.1 is in progress"):
        port.abort(target)


def test_a_patch_absorbed_in_other_words_is_found_by_its_lines(make_tree):
    """Upstream made the same change and also edited the line above it: no reverse-apply, no
    clean 3-way merge, but in the touched function every added line is there, the removed gone."""
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 4\n", "y = x * 2\n    return y + 4\n",
                  "[Perf] Four")  # fmt: skip
    tree.export()
    moved = SAMPLER.replace(
        "def f4(x):\n    return x + 4\n", "def f4(x):  # four\n    y = x * 2\n    return y + 4\n"
    )
    target = make_tree("9.9.1", {"vllm/sampler.py": moved})
    state = port.start(tree, target)
    assert port.run(tree, target, state, _releases) == 0
    (outcome,) = [port.Outcome(**o) for o in port_report_outcomes(target)]
    assert outcome.outcome == "absorbed" and "lines" in outcome.detail


def port_report_outcomes(target: BuildTree) -> list[dict]:
    """The outcomes the report lists, read back from its table."""
    text = port_report.report_path(target, "9.9.0").read_text()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| 0")]
    return [{"patch": r[0][2:], "subject": r[0][7:], "outcome": r[1], "detail": r[3]}
            for r in rows]  # fmt: skip


def test_a_port_in_progress_is_not_started_twice(make_tree, bad_input):
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    with pytest.raises(PatchbenchError, match="is in progress") as info:
        port.start(source, target)
    bad_input("`port` while a port into that version is stopped at a conflict", str(info.value))


# -- Ctrl-C during a real `python -m verify port` ------------------------------------------------
def _cli_release(env: dict[str, str], version: str, overrides: dict | None = None) -> None:
    sdists = Path(env["PATCHBENCH_CACHE_DIR"]) / "sdists"
    tarball = make_sdist(sdists, version, overrides)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    tarball.with_name(tarball.name + ".sha256").write_text(digest + "\n")


def _interrupted_port(pinned_release) -> tuple[BuildTree, BuildTree]:
    """`port 0.22.0 0.99.0` (two clean patches) stopped by SIGINT to its process group (as
    Ctrl-C sends it) while `git am` of the second patch runs its applypatch-msg hook."""
    _cli_release(pinned_release, "0.99.0", NEWER)
    source = BuildTree("0.22.0")
    source.apply()
    commit_change(source, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] One")
    commit_change(source, "vllm/pooling.py", "True", "False", "[Perf] Second")
    source.export()
    target = BuildTree("0.99.0")
    target.ensure_baseline()
    mark = target.path.parent / "hook-started"
    hook = target.path / ".git" / "hooks" / "applypatch-msg"
    hook.write_text(f'#!/bin/sh\nif grep -q Second "$1"; then touch {mark}; sleep 60; fi\n')
    hook.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-m", "verify", "port", "0.22.0", "0.99.0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted at patch 2 of 2; nothing is lost" in err
    hook.unlink()
    return source, target, err


def test_ctrl_c_during_a_port_loses_nothing_and_continue_finishes(pinned_release, bad_input):
    source, target, err = _interrupted_port(pinned_release)
    said = next(line for line in err.splitlines() if "nothing is lost" in line)
    bad_input("Ctrl-C during `port`", said.removeprefix("[patchbench] "))
    state = port.load(target)
    assert state.phase == "carry" and [o["outcome"] for o in state.outcomes] == ["clean"]
    assert not target.am_in_progress() and target.dirty_files() == []
    assert target.head() == state.outcomes[0]["commit"]
    run = subprocess.run([sys.executable, "-m", "verify", "port", "--continue"], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [p.subject for p in read_series("0.99.0")] == ["[Perf] One", "[Perf] Second"]
    assert target.check().ok


def test_ctrl_c_then_abort_restores_the_state_before_the_port(pinned_release):
    source, target, _ = _interrupted_port(pinned_release)
    run = subprocess.run([sys.executable, "-m", "verify", "port", "--abort", "0.99.0"], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert target.head() == target.baseline() and target.dirty_files() == []
    assert port.load(target) is None and not target.series_path.exists()


def _pool_fix(target: BuildTree, new: str) -> Path:
    """A port fix for "[Perf] Pool" (0005): its line True -> False, then False -> `new`."""
    fixes = target.series_path / port.PORT_FIXES
    fixes.mkdir(parents=True, exist_ok=True)
    old = RELEASE_FILES["vllm/pooling.py"].replace("True", "False")
    lines = old.splitlines()
    at = next(i for i, line in enumerate(lines) if "False" in line)
    hunk = [f" {line}" for line in lines]
    hunk[at] = f"-{lines[at]}\n+{lines[at].replace('False', new)}"
    diff = (
        "diff --git a/vllm/pooling.py b/vllm/pooling.py\n--- a/vllm/pooling.py\n"
        f"+++ b/vllm/pooling.py\n@@ -1,{len(lines)} +1,{len(lines)} @@\n" + "\n".join(hunk) + "\n"
    )
    path = fixes / "Perf-Pool.diff"
    path.write_text(diff)
    return path


def test_a_port_fix_amends_the_patch_it_names_and_stays_with_the_series(make_tree):
    """An edit no recorded resolution holds (a clean hunk needing a new name) is kept as
    patches/<to>/port-fixes/<name>.diff and applied on top of that patch at every port."""
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    _resolve(target)
    fix = _pool_fix(target, "None")
    assert port.resume(source, target, _releases) == 0
    from verify import paths

    pool = next(p for p in read_series("9.9.1", target.patches_root) if "Pool" in p.subject)
    added = [ln for ln in pool.path.read_text().splitlines() if ln[:1] == "+" and ln[:3] != "+++"]
    assert any("None" in line for line in added)  # the patch carries the fix's line
    assert fix.exists()  # kept beside the series for the next port
    report = paths.reports_root() / "9.9.1" / "port" / "from-9.9.0.md"
    assert "port fix Perf-Pool.diff" in report.read_text()


def test_a_port_fix_that_no_longer_applies_stops_with_its_name(make_tree):
    source = _series(make_tree)
    target, _ = _start(make_tree, source)
    _resolve(target)
    fix = _pool_fix(target, "None")
    fix.write_text(fix.read_text().replace("False", "Maybe"))  # matches nothing carried
    with pytest.raises(PatchbenchError, match="Perf-Pool.diff: this port fix no longer applies"):
        port.resume(source, target, _releases)
    port.abort(target)
    assert target.head() == target.baseline()
