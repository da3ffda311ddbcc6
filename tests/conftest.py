"""Shared fixtures: a tiny synthetic vLLM "release" and helpers to commit patches to it.

The whole suite runs in temporary build, results and reports folders (`verify/paths.py`) and
with a contributor's git identity of its own, so it never reads or writes the checkout's
`build/`, `results/` or `reports/` (the sdist cache stays shared: it is only added to, after a
hash check). A run of `tests/equivalence` alone keeps the real folders: it tests the build
tree its nox session applied.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
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

CONTRIBUTOR = ("Pat Contributor", "pat@contributor.example")

#: A test that passes without an assert, pytest.raises or pytest.warns fails; the summary counts
#: the skips by reason (each module says more).
pytest_plugins = ["tests.assert_count", "tests.skip_summary"]


@pytest.fixture(scope="session", autouse=True)
def _temporary_folders(request, tmp_path_factory):
    """Point every write of the tool at a per-session temporary folder."""
    if all("equivalence" in Path(arg).parts for arg in request.config.args):
        yield None
        return
    base = tmp_path_factory.mktemp("patchbench")
    gitconfig = base / "gitconfig"
    gitconfig.write_text(f"[user]\n\tname = {CONTRIBUTOR[0]}\n\temail = {CONTRIBUTOR[1]}\n")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("BUILD", "RESULTS", "REPORTS"):
            patch.setenv(f"PATCHBENCH_{name}_DIR", str(base / name.lower()))
        patch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
        for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "EMAIL"):
            patch.delenv(name, raising=False)
        patch.delenv("GIT_COMMITTER_EMAIL", raising=False)
        yield base


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "bad_input" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bad_input)


@pytest.fixture
def bad_input(request, tmp_path, tmp_path_factory):
    """bad_input(what the user did, what the tool said): one row of docs/bad-input.md.

    Rows are written only when PATCHBENCH_BAD_INPUT_LOG names a file (`python -m verify
    bad-input-docs` runs the tests that use this fixture with it set); paths are normalized.
    """

    def record(what: str, message: str) -> None:
        log = os.environ.get("PATCHBENCH_BAD_INPUT_LOG")
        if not log:
            return
        text = message.replace(str(tmp_path), "<tmp>")
        text = text.replace(str(tmp_path_factory.getbasetemp()), "<tmp>")
        text = text.replace(str(Path(__file__).resolve().parent.parent), "<repo>")
        row = {"test": request.node.nodeid, "input": what, "message": text}
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    return record


@pytest.fixture(scope="session")
def main_tree(_temporary_folders) -> BuildTree:
    """The real vLLM 0.22.0 build tree with the series applied, in the suite's temporary build
    folder (the sdist comes from the shared cache or the package index); applied once per
    session, so no test depends on another having built it."""
    tree = BuildTree("0.22.0")
    tree.apply()
    return tree


@pytest.fixture(scope="session")
def loaded_noxfile():
    """The noxfile as a module, loaded once (a second load registers every session again)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "noxfile.py"
    spec = importlib.util.spec_from_file_location("patchbench_noxfile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pinned_release(tmp_path, monkeypatch) -> dict[str, str]:
    """A synthetic release under a pinned version number (0.22.0), served from a private cache
    with the package index unreachable, and private build/patches/results/reports folders:
    the real CLI (`python -m verify ...`) runs on it without touching the checkout."""
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    tarball = make_sdist(cache / "sdists", "0.22.0")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    tarball.with_name(tarball.name + ".sha256").write_text(digest + "\n")
    (tmp_path / "patches" / "0.22.0").mkdir(parents=True)
    env = {
        "PATCHBENCH_CACHE_DIR": str(cache),
        "PATCHBENCH_INDEX_URL": "http://127.0.0.1:9/simple",
        "PATCHBENCH_BUILD_DIR": str(tmp_path / "build"),
        "PATCHBENCH_PATCHES_DIR": str(tmp_path / "patches"),
        "PATCHBENCH_RESULTS_DIR": str(tmp_path / "results"),
        "PATCHBENCH_REPORTS_DIR": str(tmp_path / "reports"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


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


@pytest.fixture
def gpu_results_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A GPU results root (`verify.importer.gpu.gpu_root`, which every GPU importer reads)
    with an empty 0.22.0 folder; the records go to a results folder beside it.

    The importer is imported here, not at the top: the equivalence sessions load this conftest
    in a venv without the importer's dependencies (scipy)."""
    from verify.importer import gpu as gpu_importer

    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(tmp_path.parent / "results"))
    (tmp_path / "0.22.0").mkdir()
    monkeypatch.setattr(gpu_importer, "gpu_root", lambda: tmp_path)
    return tmp_path
