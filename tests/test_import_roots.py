"""verify.equivalence.roots.ImportRoot: two fake `vllm` packages side by side, and the check
that every loaded module of a root comes from that root."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from verify.equivalence.roots import ImportRoot
from verify.errors import PatchbenchError


def _fake_root(path: Path, tag: str) -> Path:
    (path / "vllm").mkdir(parents=True)
    (path / "vllm" / "__init__.py").write_text(f"TAG = {tag!r}\n")
    (path / "vllm" / "part.py").write_text(f"TAG = {tag!r}\n")
    return path


def test_two_roots_load_their_own_modules_and_none_is_foreign(tmp_path):
    a = ImportRoot(_fake_root(tmp_path / "a", "a"), "a")
    b = ImportRoot(_fake_root(tmp_path / "b", "b"), "b")
    assert (a.load("vllm.part").TAG, b.load("vllm.part").TAG) == ("a", "b")
    assert a.foreign_modules() == [] and b.foreign_modules() == []
    assert "vllm.part" not in sys.modules


def test_a_module_from_outside_the_root_is_reported(tmp_path):
    a = ImportRoot(_fake_root(tmp_path / "a", "a"), "a")
    b = ImportRoot(_fake_root(tmp_path / "b", "b"), "b")
    a.load("vllm.part")
    a._modules["vllm.part"] = b.load("vllm.part")  # a root that resolved a module elsewhere
    assert a.foreign_modules() == [f"vllm.part: {tmp_path / 'b' / 'vllm' / 'part.py'}"]


def test_a_folder_without_vllm_is_refused(tmp_path):
    with pytest.raises(PatchbenchError, match="no vllm/__init__.py"):
        ImportRoot(tmp_path, "empty")
