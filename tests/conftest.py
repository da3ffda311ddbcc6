"""Shared fixtures: a tiny synthetic vLLM "release" and helpers to commit patches to it."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from verify.buildtree import BuildTree

RELEASE_FILES = {
    "vllm/__init__.py": "__version__ = '{version}'\n",
    "vllm/sampler.py": "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12)),
    "vllm/pooling.py": "TOKENS_ON_DEVICE = True\n",
    "vllm/_version.py": "version = '{version}'\n",  # ignored by the release's .gitignore
    ".gitignore": "vllm/_version.py\n*.so\n",
    "tests/test_sampler.py": "def test_ok():\n    assert True\n",
}

TRAILERS = """Upstream: none
Status: local
Verify: tests/test_sampler.py
Drop-when: never"""


def make_sdist(directory: Path, version: str, overrides: dict[str, str] | None = None) -> Path:
    """Write `vllm-<version>.tar.gz` (one top-level folder, like a real sdist)."""
    files = {k: v.replace("{version}", version) for k, v in RELEASE_FILES.items()}
    files.update(overrides or {})
    path = directory / f"vllm-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size, info.mtime = len(data), 0
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("sdists", "build", "patches"):
        (tmp_path / name).mkdir()
    return tmp_path


@pytest.fixture
def make_tree(workspace: Path) -> Callable[..., BuildTree]:
    """make_tree(version, overrides=None) -> BuildTree over a synthetic release."""

    def factory(version: str = "9.9.0", overrides: dict[str, str] | None = None) -> BuildTree:
        tarball = workspace / "sdists" / f"vllm-{version}.tar.gz"
        if not tarball.exists():
            make_sdist(workspace / "sdists", version, overrides)
        return BuildTree(
            version,
            root=workspace / "build",
            patches_root=workspace / "patches",
            fetch_sdist=lambda v: workspace / "sdists" / f"vllm-{v}.tar.gz",
        )

    return factory


def commit_change(
    tree: BuildTree, path: str, old: str, new: str, subject: str, trailers: str = TRAILERS
) -> None:
    """Edit one file of the build tree and commit it with a patch message."""
    target = tree.path / path
    text = target.read_text()
    assert old in text, f"{old!r} not in {path}"
    target.write_text(text.replace(old, new, 1))
    tree.git("add", path)
    tree.git("commit", "-q", "-m", f"{subject}\n\nWhy: because.\n\n{trailers}")
