"""Build trees on a synthetic release: baseline, apply, export/check round trip, every error."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import commit_change
from verify.buildtree import BASELINE_TAG
from verify.errors import ApplyError, PatchbenchError


def _two_patch_series(tree):
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] First")
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] Keep ids on CPU")
    return tree.export()


def _fresh(make_tree, tree):
    shutil.rmtree(tree.path)
    return make_tree(tree.version)


def test_baseline_is_the_pristine_release_including_ignored_files(make_tree):
    tree = make_tree()
    tree.apply()
    assert tree.head() == tree.baseline()
    tracked = tree.git("ls-files").splitlines()
    assert "vllm/_version.py" in tracked  # the sdist's .gitignore must not hide released files
    assert tree.git("tag", "--list", BASELINE_TAG) == BASELINE_TAG
    assert tree.dirty_files() == []


def test_round_trip_is_byte_identical(make_tree):
    tree = make_tree()
    patches = _two_patch_series(tree)
    assert [p.subject for p in patches] == ["[Perf] First", "[Perf] Keep ids on CPU"]
    before = {p.name: p.path.read_bytes() for p in patches}
    series_before = (tree.series_path / "series").read_text()

    tree = _fresh(make_tree, tree)
    assert len(tree.apply()) == 2
    assert tree.check().ok
    tree.export()
    after = {p.name: p.read_bytes() for p in tree.series_path.glob("*.patch")}
    assert after == before
    assert (tree.series_path / "series").read_text() == series_before


def test_export_keeps_subject_brackets(make_tree):
    tree = make_tree()
    patches = _two_patch_series(tree)
    text = patches[0].path.read_text()
    assert "Subject: [Perf] First\n" in text
    assert text.startswith("From 0000000000000000000000000000000000000000 ")


def test_check_detects_a_hand_edited_patch_file(make_tree):
    tree = make_tree()
    patches = _two_patch_series(tree)
    path = patches[1].path
    path.write_text(path.read_text().replace("Why: because.", "Why: edited by hand."))
    result = tree.check()
    assert not result.ok
    assert any(path.name in line for line in result.differences)


def test_check_detects_a_missing_patch_file(make_tree):
    tree = make_tree()
    patches = _two_patch_series(tree)
    patches[1].path.unlink()
    assert any("missing" in line for line in tree.check().differences)


def test_warm_apply_is_a_no_op(make_tree):
    tree = make_tree()
    _two_patch_series(tree)
    head = tree.head()
    assert len(tree.apply()) == 2
    assert tree.head() == head


def test_conflict_names_patch_file_and_hunk_and_keeps_last_good_commit(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    # The same series against a release whose pooling.py differs: patch 2 conflicts.
    other = make_tree("9.9.1", overrides={"vllm/pooling.py": "TOKENS_ON_DEVICE = None\n"})
    shutil.copytree(tree.series_path, other.series_path)
    with pytest.raises(ApplyError) as info:
        other.apply()
    bad_input("a patch that conflicts with the release", str(info.value))
    error = info.value
    assert error.patch.startswith("0002-")
    assert error.files == ["vllm/pooling.py"]
    assert "0002-" in str(error) and "vllm/pooling.py" in str(error)
    assert "@@ -1 +1 @@" in str(error)  # the failing hunk
    assert other.git("log", "-1", "--format=%s") == "[Perf] First"
    assert other.dirty_files() == []
    assert not other.am_in_progress()


def test_corrupt_patch_without_diff_is_named(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    patches[0].path.write_text(patches[0].path.read_text().split("diff --git")[0])
    with pytest.raises(PatchbenchError, match="0001-.*corrupt patch") as info:
        _fresh(make_tree, tree).apply()
    bad_input("a patch file without a diff", str(info.value))


def test_corrupt_hunk_fails_git_am_cleanly(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    text = patches[1].path.read_text()
    patches[1].path.write_text(text.replace("@@ -1 +1 @@", "@@ -1,7 +1,9 @@"))
    fresh = _fresh(make_tree, tree)
    with pytest.raises(ApplyError) as info:
        fresh.apply()
    bad_input("a patch with a corrupt hunk header", str(info.value))
    assert info.value.patch == patches[1].name
    assert fresh.git("log", "-1", "--format=%s") == "[Perf] First"
    assert fresh.dirty_files() == [] and not fresh.am_in_progress()


def test_dirty_tree_is_refused_and_not_clobbered(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    edited = tree.path / "vllm" / "sampler.py"
    edited.write_text(edited.read_text() + "# my local experiment\n")
    (tree.path / "notes.txt").write_text("untracked work\n")
    for action in (tree.apply, tree.export):
        with pytest.raises(PatchbenchError, match="uncommitted changes") as info:
            action()
        bad_input("`apply` or `export` with uncommitted edits in the build tree", str(info.value))
    assert edited.read_text().endswith("# my local experiment\n")
    assert (tree.path / "notes.txt").exists()


def test_unexported_commits_are_refused_unless_forced(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    commit_change(tree, "vllm/sampler.py", "return x + 2\n", "return x + 200\n", "[Perf] New")
    head = tree.head()
    with pytest.raises(PatchbenchError, match="not in .*Keep them: run the export session") as info:
        tree.apply()
    bad_input("`apply` with unexported commits in the build tree", str(info.value))
    assert tree.head() == head
    assert len(tree.apply(force=True)) == 2
    assert tree.git("log", "-1", "--format=%s") == "[Perf] Keep ids on CPU"


def test_series_naming_a_missing_patch(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    with open(tree.series_path / "series", "a") as handle:
        handle.write("0003-not-there.patch\n")
    with pytest.raises(PatchbenchError, match="0003-not-there.patch, which does not exist") as info:
        tree.apply()
    bad_input("`series` naming a patch file that does not exist", str(info.value))


def test_stray_patch_file_not_in_series(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    shutil.copy(patches[0].path, tree.series_path / "0009-stray.patch")
    with pytest.raises(PatchbenchError, match="0009-stray.patch") as info:
        tree.apply()
    bad_input("a `.patch` file the series does not list", str(info.value))


def test_interrupted_git_am_is_aborted_and_the_series_reapplied(make_tree, tmp_path):
    tree = make_tree()
    patches = _two_patch_series(tree)
    tree.git("reset", "--hard", "-q", "HEAD~1")
    # Leave a `git am` stopped half-way, as a killed run would: a patch that does not apply.
    bogus = patches[1].path.read_text().replace("-TOKENS_ON_DEVICE = True", "-SOMETHING_ELSE")
    (tmp_path / "bogus.patch").write_text(bogus)
    run = subprocess.run(
        ["git", "-C", str(tree.path), "am", str(tmp_path / "bogus.patch")], capture_output=True
    )
    assert run.returncode != 0 and tree.am_in_progress()
    assert len(tree.apply()) == 2
    assert not tree.am_in_progress()
    assert tree.check().ok


def test_partially_applied_series_resumes(make_tree):
    tree = make_tree()
    patches = _two_patch_series(tree)
    tree.git("reset", "--hard", "-q", "HEAD~1")  # as if killed between the two patches
    assert len(tree.apply()) == 2
    assert tree.check().ok
    assert tree.git("log", "-1", "--format=%s") == patches[1].subject


def test_interrupted_baseline_leaves_no_half_tree(make_tree, workspace, monkeypatch):
    tree = make_tree()

    def boom(_tree):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(tree), "_commit_baseline", lambda self, t: boom(t))
    with pytest.raises(KeyboardInterrupt):
        tree.apply()
    assert not tree.path.exists()
    assert [p.name for p in (workspace / "build").iterdir() if p.name != ".locks"] == []
    monkeypatch.undo()
    tree.apply()
    assert tree.head() == tree.baseline()


def test_existing_non_tree_directory_is_refused(make_tree, bad_input):
    tree = make_tree()
    tree.path.mkdir(parents=True)
    (tree.path / "precious.txt").write_text("keep me")
    with pytest.raises(PatchbenchError, match="not a build tree") as info:
        tree.apply()
    bad_input("a folder that is not a build tree where the build tree goes", str(info.value))
    assert (tree.path / "precious.txt").read_text() == "keep me"


def test_repo_without_baseline_tag_is_refused(make_tree, bad_input):
    tree = make_tree()
    tree.apply()
    tree.git("tag", "-d", BASELINE_TAG)
    with pytest.raises(PatchbenchError, match="without the 'pristine' tag") as info:
        tree.apply()
    bad_input("a build tree whose `pristine` tag was deleted", str(info.value))


def test_export_refuses_commit_without_metadata(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    before = {p.name: p.read_bytes() for p in tree.series_path.iterdir()}
    commit_change(tree, "vllm/sampler.py", "x + 3", "x + 300", "[Perf] No trailers", trailers="")
    with pytest.raises(PatchbenchError, match="0003-.*missing metadata trailer") as info:
        tree.export()
    bad_input("`export` of a commit without metadata trailers", str(info.value))
    assert {p.name: p.read_bytes() for p in tree.series_path.iterdir()} == before


def test_changed_files_and_export_tree(make_tree, tmp_path):
    tree = make_tree()
    _two_patch_series(tree)
    assert tree.changed_files() == ["vllm/pooling.py", "vllm/sampler.py"]
    tree.export_tree(BASELINE_TAG, tmp_path / "pristine", ["vllm"])
    pristine = tmp_path / "pristine" / "vllm" / "pooling.py"
    assert pristine.read_text() == "TOKENS_ON_DEVICE = True\n"
