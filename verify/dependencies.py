"""Which patches of a series stand alone on the pristine release, and which need which earlier
ones first: derived by applying (no hand-kept list).

For each patch: it is applied alone on the pristine tree (a scratch index, `git apply --cached`);
when that fails, the earlier patches it shares a file with are its candidates, and each is left
out in turn (latest first) while the rest and the patch still apply in order. What remains is a
smallest set of earlier patches it needs ("needs 0004, 0007 first"); a patch that needs a
predecessor it shares no file with (a rename, say) falls back to all its predecessors.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from verify.buildtree import BASELINE_TAG, BuildTree
from verify.git_setup import git_env
from verify.series import Patch, read_series


@dataclass(frozen=True)
class Dependency:
    patch: str  # file name
    needs: tuple[str, ...]  # names of the earlier patches it needs first (empty: stands alone)
    applies: bool = True  # False: it does not apply even after all its predecessors

    def text(self) -> str:
        if not self.applies:
            return "does not apply after its predecessors"
        if not self.needs:
            return "stands alone"
        return f"needs {', '.join(n[:4] for n in self.needs)} first"


def _applies_in_order(tree: BuildTree, patches: list[Patch], folder: Path) -> bool:
    """Whether `patches` apply one after the other on the pristine tree."""
    env = git_env()
    env["GIT_INDEX_FILE"] = os.path.join(folder, "index")
    tree.git("read-tree", BASELINE_TAG, env=env)
    for patch in patches:
        try:
            tree.git("apply", "--cached", str(patch.path), env=env)
        except git.GitCommandError:
            return False
    return True


def of_patch(tree: BuildTree, patches: list[Patch], index: int, folder: Path) -> Dependency:
    """The earlier patches `patches[index]` needs on `tree`'s pristine release."""
    patch, earlier = patches[index], patches[:index]
    if _applies_in_order(tree, [patch], folder):
        return Dependency(patch.name, ())
    if not _applies_in_order(tree, [*earlier, patch], folder):
        return Dependency(patch.name, tuple(p.name for p in earlier), applies=False)
    touched = set(patch.files)
    needed = [p for p in earlier if touched & set(p.files)]
    if not _applies_in_order(tree, [*needed, patch], folder):
        needed = list(earlier)
    for candidate in reversed(list(needed)):
        trial = [p for p in needed if p is not candidate]
        if _applies_in_order(tree, [*trial, patch], folder):
            needed = trial
    return Dependency(patch.name, tuple(p.name for p in needed))


def of_series(
    version: str, build_root: Path | None = None, patches_root: Path | None = None
) -> list[Dependency]:
    """Every patch of `version`'s series with what it needs (the pristine tree is made if
    missing; the build tree's HEAD and files are not touched)."""
    patches = read_series(version, patches_root)
    if not patches:
        return []
    tree = BuildTree(version, build_root, patches_root)
    tree.ensure_baseline()
    with tempfile.TemporaryDirectory() as tmp:
        return [of_patch(tree, patches, i, Path(tmp)) for i in range(len(patches))]


def render(by_pin: dict[str, list[Dependency]]) -> list[str]:
    """Status lines: per pin, each patch's dependencies."""
    lines = ["Dependencies (derived by applying on the pristine release):"]
    for pin, deps in by_pin.items():
        if deps:
            lines.append(f"  {pin}: " + "; ".join(f"{d.patch[:4]} {d.text()}" for d in deps))
    return lines
