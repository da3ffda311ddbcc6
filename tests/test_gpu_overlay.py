"""verify.gpu_overlay on a synthetic release: what travels to the GPU machine, per variant."""

from __future__ import annotations

import pytest

from tests.conftest import RELEASE_FILES, commit_change
from verify.gpu_overlay import pack
from verify.series import series_hash

SAMPLER = "vllm/sampler.py"
POOLING = "vllm/pooling.py"


@pytest.fixture
def tree(make_tree):
    """A build tree with a three-patch series: 0001 and 0003 edit the sampler, 0002 pooling."""
    tree = make_tree()
    tree.apply()
    commit_change(tree, SAMPLER, "return x + 1\n", "return x + 100\n", "[Perf] First")
    commit_change(tree, POOLING, "True", "False", "[Perf] Keep ids on CPU")
    commit_change(tree, SAMPLER, "return x + 2\n", "return x + 200\n", "[Perf] Third")
    tree.export()
    return tree


def _text(folder, name: str) -> str:
    return (folder / name).read_text()


def test_pristine_patched_and_per_patch_folders(tree, tmp_path):
    target = pack(tree, tmp_path / "overlay", only_patches=["0002"], at_patches=["0001"])
    release = RELEASE_FILES[SAMPLER]
    assert _text(target / "pristine", SAMPLER) == release
    patched = _text(target / "patched", SAMPLER)
    assert "x + 100" in patched and "x + 200" in patched
    # at-0001: the series through its first patch (not the third's change, pooling pristine)
    at_first = _text(target / "at-0001", SAMPLER)
    assert "x + 100" in at_first and "x + 200" not in at_first
    assert _text(target / "at-0001", POOLING) == RELEASE_FILES[POOLING]
    # only-0002: pristine + that patch alone, only the files it touches
    assert _text(target / "only-0002", POOLING) == "TOKENS_ON_DEVICE = False\n"
    assert not (target / "only-0002" / SAMPLER).exists()
    assert _text(target, "SERIES_HASH").strip() == series_hash(tree.version, tree.patches_root)


def test_at_patch_names_a_missing_patch(tree, tmp_path):
    with pytest.raises(SystemExit, match="--at-patch 0009: no such patch"):
        pack(tree, tmp_path / "overlay", at_patches=["0009"])


def test_at_patch_refuses_a_tree_that_is_not_the_series(tree, tmp_path):
    tree.git("reset", "-q", "--hard", "HEAD~1")  # the third patch is not applied
    with pytest.raises(SystemExit, match="2 commits after pristine, the series 3 patches"):
        pack(tree, tmp_path / "overlay", at_patches=["0001"])
    tree.git("commit", "-q", "--allow-empty", "-m", "[Perf] Something else")
    with pytest.raises(SystemExit, match="build tree and series disagree"):
        pack(tree, tmp_path / "overlay", at_patches=["0003"])
