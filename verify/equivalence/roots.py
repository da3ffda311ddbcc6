"""Pristine and patched vLLM import roots, loadable side by side in one process.

`materialize(version)` writes the build tree's pristine tag and HEAD into
``build/roots/<version>/<commit>/`` (``vllm/`` and ``tests/``), cached by commit. An
`ImportRoot` swaps the ``vllm`` package in ``sys.modules`` while it is active, so modules of
both roots coexist and lazy imports inside vLLM functions resolve to the right root.

Overrides for development: ``PATCHBENCH_PRISTINE_ROOT`` / ``PATCHBENCH_PATCHED_ROOT``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from verify import paths
from verify.errors import PatchbenchError

if TYPE_CHECKING:
    from verify.buildtree import BuildTree

PACKAGE = "vllm"
# vllm.egg-info: vLLM reads its own version through importlib.metadata (platform and Triton
# detection depend on it), so a root without the sdist's metadata behaves unlike the release.
ROOT_PATHS = ["vllm", "tests", "vllm.egg-info"]
LAYOUT = "2"  # bump when ROOT_PATHS changes, so cached roots are rebuilt


def _is_vllm(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


class ImportRoot:
    """A directory holding a `vllm/` package, importable without clashing with other roots."""

    def __init__(self, path: Path, label: str):
        if not (path / PACKAGE / "__init__.py").exists():
            raise PatchbenchError(f"{label} import root {path} has no {PACKAGE}/__init__.py")
        self.path = path
        self.label = label
        self._modules: dict[str, ModuleType] = {}

    def __repr__(self) -> str:
        return f"ImportRoot({self.label}, {self.path})"

    @contextlib.contextmanager
    def active(self) -> Iterator[ImportRoot]:
        """While active, `import vllm...` resolves to this root (nesting other roots is fine)."""
        saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_vllm(name)}
        sys.modules.update(self._modules)
        sys.path.insert(0, str(self.path))
        importlib.invalidate_caches()
        try:
            yield self
        finally:
            sys.path.remove(str(self.path))
            self._modules = {n: sys.modules.pop(n) for n in list(sys.modules) if _is_vllm(n)}
            sys.modules.update(saved)

    def load(self, dotted: str) -> ModuleType:
        """Import `dotted` (e.g. ``vllm.v1.sample.ops.penalties``) from this root."""
        with self.active():
            return importlib.import_module(dotted)

    def foreign_modules(self) -> list[str]:
        """Loaded ``vllm`` modules of this root whose file lies outside it (should be none)."""
        root = str(self.path.resolve())
        bad = []
        for name, module in self._modules.items():
            file = getattr(module, "__file__", None)
            if file and not str(Path(file).resolve()).startswith(root + os.sep):
                bad.append(f"{name}: {file}")
        return bad


def _materialize_rev(tree: BuildTree, rev: str) -> Path:
    from verify.buildtree import build_root

    commit = tree.git("rev-parse", f"{rev}^{{commit}}")
    target = build_root() / "roots" / tree.version / f"{commit[:12]}-{LAYOUT}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    present = [p for p in ROOT_PATHS if tree.git("ls-tree", "--name-only", commit, "--", p)]
    with paths.staging(target.parent, ".root") as staging:
        tree.export_tree(commit, staging, present)
        try:
            os.replace(staging, target)
        except OSError:  # another run made the same root meanwhile: the same commit, use it
            if not target.is_dir():
                raise
    return target


def materialize(version: str) -> tuple[Path, Path]:
    """(pristine, patched) root directories of `version`'s build tree."""
    # gitpython is imported here, not at module level: the import roots alone (with the
    # PATCHBENCH_*_ROOT overrides) also serve scripts on the GPU machine, which lacks it.
    from verify.buildtree import BASELINE_TAG, BuildTree

    tree = BuildTree(version)
    if not tree.exists():
        raise PatchbenchError(
            f"no build tree for vLLM {version}; run `nox -s apply-{version}` "
            f"(or `python -m verify apply {version}`) first"
        )
    return _materialize_rev(tree, BASELINE_TAG), _materialize_rev(tree, "HEAD")


def roots(version: str) -> tuple[ImportRoot, ImportRoot]:
    """(pristine, patched) import roots of `version`, honouring the environment overrides."""
    pristine_env = os.environ.get("PATCHBENCH_PRISTINE_ROOT")
    patched_env = os.environ.get("PATCHBENCH_PATCHED_ROOT")
    if pristine_env and patched_env:
        pristine, patched = Path(pristine_env), Path(patched_env)
    else:
        pristine, patched = materialize(version)
    return ImportRoot(pristine, f"pristine {version}"), ImportRoot(patched, f"patched {version}")
