"""`python -m verify range-diff <pin>/<NNNN> [--pins A B] [--rev REV]`: how a patch changed, as
`git range-diff` shows it.

- ``--pins A B``: the patch's ports on two pins (the patches with its subject in each series);
- ``--rev REV``: its version committed at REV against the current file;
- neither: its previous committed version (before the last commit that changed its file)
  against the current file.

Each side is the commit of its series up to that patch, made on the pin's pristine tree without
touching the build tree's HEAD or files (`gitverbs.commit_series`); commit ids are replaced by
labels such as ``0.22.0/0011`` or ``0.22.0/0011@abc1234``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verify import gitverbs
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.errors import PatchbenchError
from verify.port_report import range_diff_text
from verify.series import Patch, parse_patch, read_series, series_dir

_ID = re.compile(r"^(\d+\.\d+\.\d+)/(\d{4})$")
_REF = "refs/patchbench/range-diff/{pin}"


@dataclass(frozen=True)
class Side:
    """One version of a patch: its series' files up to it, on a pin, with a label."""

    pin: str
    files: list[Path]
    label: str


def parse_id(ident: str) -> tuple[str, str]:
    match = _ID.match(ident)
    if not match:
        raise PatchbenchError(
            f"{ident!r} is not a patch id; expected <pin>/<NNNN>, e.g. 0.22.0/0011"
        )
    return match[1], match[2]


def find(patches: list[Patch], number: str, pin: str) -> int:
    for i, patch in enumerate(patches):
        if patch.name.startswith(f"{number}-"):
            return i
    raise PatchbenchError(f"patches/{pin}/ has no patch {number} (it has "
                          f"{', '.join(p.name[:4] for p in patches) or 'none'})")  # fmt: skip


def _by_subject(patches: list[Patch], subject: str, pin: str) -> int:
    for i, patch in enumerate(patches):
        if patch.subject == subject:
            return i
    raise PatchbenchError(f"patches/{pin}/ has no patch with the subject {subject!r}")


def pin_side(pin: str, subject: str, patches_root: Path | None) -> Side:
    patches = read_series(pin, patches_root)
    i = _by_subject(patches, subject, pin)
    return Side(pin, [p.path for p in patches[: i + 1]], f"{pin}/{patches[i].name[:4]}")


def _repo_git(folder: Path, *args: str) -> str:
    run = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)
    if run.returncode != 0:
        raise PatchbenchError(f"git {args[0]} in {folder}: {run.stderr.strip()[-300:]}")
    return run.stdout


def history(patch: Patch) -> list[str]:
    """Commits of the repository holding `patch` that changed its file, newest first."""
    folder = patch.path.parent
    return _repo_git(folder, "log", "--format=%H", "--", patch.path.name).split()


def rev_side(pin: str, patch: Patch, rev: str, tmp: Path) -> Side:
    """The series of `pin` as committed at `rev`, up to the version of `patch` there (the same
    file name, else the same subject)."""
    folder = patch.path.parent
    top = Path(_repo_git(folder, "rev-parse", "--show-toplevel").strip())
    where = folder.resolve().relative_to(top.resolve()).as_posix()
    short = _repo_git(folder, "rev-parse", "--short", f"{rev}^{{commit}}").strip()
    listed = _repo_git(top, "show", f"{rev}:{where}/series").split()
    files = []
    for name in listed:
        path = tmp / short / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_repo_git(top, "show", f"{rev}:{where}/{name}"))
        files.append(path)
    old = [parse_patch(f) for f in files]
    names = [p.name for p in old]
    i = names.index(patch.name) if patch.name in names else _by_subject(old, patch.subject, pin)
    return Side(pin, files[: i + 1], f"{pin}/{old[i].name[:4]}@{short}")


def _commit(tree: BuildTree, side: Side) -> str:
    tree.ensure_baseline()
    return gitverbs.commit_series(tree, BASELINE_TAG, side.files)[-1]


def show(old: Side, new: Side, build_root: Path | None = None) -> str:
    """The range-diff of the last patch of `old` against the last of `new`."""
    tree = BuildTree(old.pin, build_root)
    old_commit = _commit(tree, old)
    if new.pin == old.pin:
        new_commit = _commit(tree, new)
    else:
        other = BuildTree(new.pin, build_root)
        ref = _REF.format(pin=new.pin)
        gitverbs.update_ref(other, ref, _commit(other, new))
        new_commit = gitverbs.fetch(tree, other.path, ref)
    return range_diff_text(tree, old_commit, new_commit, (old.label, new.label))


def range_diff(
    ident: str,
    pins: list[str] | None = None,
    rev: str | None = None,
    patches_root: Path | None = None,
    build_root: Path | None = None,
) -> str:
    """The text `python -m verify range-diff` prints."""
    pin, number = parse_id(ident)
    patches = read_series(pin, patches_root)
    if not patches and not series_dir(pin, patches_root).is_dir():
        raise PatchbenchError(f"there is no series patches/{pin}/")
    patch = patches[find(patches, number, pin)]
    if pins:
        if rev:
            raise PatchbenchError("give --pins or --rev, not both")
        a, b = pins
        return show(pin_side(a, patch.subject, patches_root),
                    pin_side(b, patch.subject, patches_root), build_root)  # fmt: skip
    current = Side(pin, [p.path for p in patches[: find(patches, number, pin) + 1]],
                   f"{pin}/{number}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        if rev is None:
            changed = history(patch)
            folder = patch.path.parent
            edited = subprocess.run(["git", "-C", str(folder), "diff", "--quiet", "HEAD", "--",
                                     patch.path.name]).returncode != 0  # fmt: skip
            if edited and changed:  # an uncommitted edit: against the last committed version
                changed.insert(0, "working copy")
            if len(changed) < 2:
                raise PatchbenchError(
                    f"{patch.name} has {len(changed)} committed version(s); there is no earlier "
                    "one to compare (give --rev)"
                )
            rev = f"{changed[1]}"
        return show(rev_side(pin, patch, rev, Path(tmp)), current, build_root)
