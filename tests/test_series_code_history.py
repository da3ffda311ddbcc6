"""results.same_code_series: a series hash from an earlier commit still describes today's code
when only messages changed (records imported from raws keep their per-patch hashes)."""

from __future__ import annotations

import git

from tests.conftest import commit_change
from verify import results
from verify.series import series_hash


def _committed_series(make_tree, workspace):
    tree = make_tree()
    tree.ensure_baseline()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] First")
    tree.export()
    repo = git.Repo.init(workspace)
    repo.git.add("patches")
    repo.git.commit("-q", "-m", "series", "--author", "t <t@example.com>")
    return repo, workspace / "patches" / "9.9.0"


def _edit(folder, old: str, new: str) -> None:
    patch = next(folder.glob("0001-*.patch"))
    assert old in patch.read_text()
    patch.write_text(patch.read_text().replace(old, new, 1))


def test_a_reworded_message_keeps_the_old_series_hash_current(make_tree, workspace):
    repo, folder = _committed_series(make_tree, workspace)
    before = series_hash("9.9.0", workspace / "patches")
    _edit(folder, "Why: because.", "Why: because it is faster.")
    assert series_hash("9.9.0", workspace / "patches") != before
    assert results.same_code_series("9.9.0", before, workspace / "patches")


def test_a_changed_diff_makes_the_old_series_hash_another_code(make_tree, workspace):
    repo, folder = _committed_series(make_tree, workspace)
    before = series_hash("9.9.0", workspace / "patches")
    _edit(folder, "+    return x + 100", "+    return x + 101")
    assert not results.same_code_series("9.9.0", before, workspace / "patches")
    assert not results.same_code_series("9.9.0", "0123456789", workspace / "patches")
