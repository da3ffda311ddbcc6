"""The real vLLM 0.22.0 sdist (downloaded once, cached): baseline + series + check."""

from __future__ import annotations

import pytest

from verify.buildtree import BuildTree
from verify.series import read_series
from verify.versions import MAIN

pytestmark = [pytest.mark.slow, pytest.mark.network]


def test_real_release_applies_and_round_trips():
    tree = BuildTree(MAIN)  # the suite's temporary build folder (shared with test_wheel_real)
    patches = tree.apply()
    assert patches == read_series(MAIN)
    assert (tree.path / "vllm" / "v1" / "sample" / "rejection_sampler.py").exists()
    assert (tree.path / "csrc").is_dir() and (tree.path / "tests").is_dir()
    assert tree.dirty_files() == []
    result = tree.check()
    assert result.ok, result.differences
    touched = {name for patch in patches for name in patch.files}
    assert set(tree.changed_files()) == touched
