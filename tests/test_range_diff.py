"""`range-diff`: a patch's committed versions (its file's git history) and its ports on two pins,
on synthetic releases."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import commit_change
from tests.test_port import NEWER, _releases
from verify import port
from verify.errors import PatchbenchError
from verify.range_diff import range_diff


def _git(folder, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def _committed_once(make_tree, workspace):
    """patches/9.9.0/0001 ("[Perf] One") committed once in a git repository of patches/."""
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] One")
    tree.export()
    _git(workspace / "patches", "init", "-q")
    _git(workspace / "patches", "add", "-A")
    _git(workspace / "patches", "commit", "-qm", "first")
    return tree


def _two_versions(make_tree, workspace):
    """patches/9.9.0/0001 committed twice in a git repository: the second changes its diff."""
    tree = _committed_once(make_tree, workspace)
    first = _git(workspace / "patches", "rev-parse", "--short", "HEAD").strip()
    (tree.path / "vllm/sampler.py").write_text(
        (tree.path / "vllm/sampler.py").read_text().replace("x + 100", "x + 101")
    )
    tree.git("commit", "--amend", "-qa", "--no-edit")
    tree.export(force=True)
    _git(workspace / "patches", "commit", "-qam", "second")
    return tree, first


def test_range_diff_of_the_previous_committed_version(make_tree, workspace):
    _, first = _two_versions(make_tree, workspace)
    out = range_diff("9.9.0/0001", patches_root=workspace / "patches",
                     build_root=workspace / "build")  # fmt: skip
    assert f"1: 9.9.0/0001@{first} ! 1: 9.9.0/0001 [Perf] One" in out
    assert "-+    return x + 100" in out and "++    return x + 101" in out


def test_range_diff_at_a_revision_and_of_an_unchanged_patch(make_tree, workspace):
    _two_versions(make_tree, workspace)
    out = range_diff("9.9.0/0001", rev="HEAD", patches_root=workspace / "patches",
                     build_root=workspace / "build")  # fmt: skip
    assert " = 1: 9.9.0/0001 [Perf] One" in out


def test_range_diff_between_the_ports_on_two_pins(make_tree, workspace):
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 6\n", "return x + 60\n", "[Perf] Six")
    tree.export()
    target = make_tree("9.9.1", NEWER)
    assert port.run(tree, target, port.start(tree, target), _releases) == 0
    out = range_diff("9.9.0/0001", pins=["9.9.0", "9.9.1"], patches_root=workspace / "patches",
                     build_root=workspace / "build")  # fmt: skip
    assert "1: 9.9.0/0001 ! 1: 9.9.1/0001 [Perf] Six" in out
    assert "+ def f7(x):  # seven" in out


@pytest.mark.parametrize(
    ("ident", "kwargs", "message"),
    [
        ("0011", {}, "not a patch id"),
        ("9.9.0/0042", {}, "has no patch 0042"),
        ("9.9.0/0001", {}, "1 committed version"),
        ("9.9.0/0001", {"pins": ["9.9.0", "9.9.1"], "rev": "HEAD"}, "not both"),
    ],
)
def test_bad_range_diff_requests_are_named(make_tree, workspace, bad_input, ident, kwargs,
                                           message):  # fmt: skip
    _committed_once(make_tree, workspace)
    with pytest.raises(PatchbenchError, match=message) as info:
        range_diff(ident, patches_root=workspace / "patches", build_root=workspace / "build",
                   **kwargs)  # fmt: skip
    bad_input(f"`range-diff {ident}` ({message})", str(info.value))
