"""Pack the series' changed files for the GPU machine (which has no git and no sdist).

`python -m verify.gpu_overlay <version> [--out .gpu/overlay] [--only-patch N] [--at-patch N]
[--tests DIR]` writes ``<out>/<version>/{pristine,patched}/vllm/...`` (every ``vllm/`` file the
series changes, at the build tree's ``pristine`` tag and at HEAD), ``SERIES_HASH`` and
``PATCH_HASHES.json``. ``--only-patch 0005`` adds ``only-0005/vllm/...`` (pristine + that one
patch, e.g. the 004 timers without the fixes they measure); ``--at-patch 0008`` adds
``at-0008/vllm/...`` (the series applied through 0008, read from that patch's commit: the
baseline of an A/B of the patch after it). ``--tests DIR`` exports the pristine test files of
the touched areas (``TEST_PATHS``) into ``DIR/pristine`` and the series' changed test files
into ``DIR/patched`` (the upstream test step). Carry those folders with the device run and
point ``scripts/gpu_verify.py --overlay / --tests`` at them; ``scripts/gpu_kernel_bench.py``
lifts its kernels from the packed ``vllm/v1/sample/rejection_sampler.py`` files
(docs/gpu-runbook.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from verify.buildtree import BASELINE_TAG, BuildTree
from verify.series import read_series, series_hash
from verify.versions import require_pinned


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _applied_tree(version: str) -> BuildTree:
    tree = BuildTree(require_pinned(version))
    tree.apply()
    return tree


def pack(
    tree: BuildTree, out: Path, only_patches: list[str] = (), at_patches: list[str] = ()
) -> Path:
    """Changed `vllm/` files at pristine and HEAD of an applied build tree (and per patch)."""
    version = tree.version
    target = out / version
    if target.exists():
        shutil.rmtree(target)
    for name in tree.changed_files():
        if not name.startswith("vllm/"):
            continue
        for label, rev in (("pristine", BASELINE_TAG), ("patched", "HEAD")):
            data = tree.read_bytes(rev, name)
            if data is not None:
                _write(target / label / name, data)
    for number in only_patches:
        _pack_single(tree, number, target / f"only-{number}")
    for number in at_patches:
        _pack_at(tree, number, target / f"at-{number}")
    (target / "SERIES_HASH").write_text(series_hash(version, tree.patches_root) + "\n")
    hashes = patch_hashes(version, tree.patches_root)
    (target / "PATCH_HASHES.json").write_text(json.dumps(hashes, indent=1) + "\n")
    return target


def patch_hashes(version: str, root: Path | None = None) -> dict[str, str]:
    """{patch subject: diff hash} of the series the overlay packs: the GPU step files carry it,
    so a record stays current evidence for a patch until that patch's diff changes."""
    from verify.registry import diff_hash

    return {patch.subject: diff_hash(patch) for patch in read_series(version, root)}


def patch_commit(tree: BuildTree, number: str) -> str:
    """The build tree's commit of series patch `number` (``0008``): the series' k-th patch is
    the k-th commit after the pristine tag; its subject must match the patch's."""
    series = read_series(tree.version, tree.patches_root)
    position = next((i for i, p in enumerate(series) if p.name.startswith(f"{number}-")), None)
    if position is None:
        raise SystemExit(f"--at-patch {number}: no such patch in the {tree.version} series")
    commits = tree.git("rev-list", "--reverse", "--first-parent", f"{BASELINE_TAG}..HEAD").split()
    if len(commits) != len(series):
        raise SystemExit(
            f"--at-patch {number}: build/{tree.version} has {len(commits)} commits after "
            f"{BASELINE_TAG}, the series {len(series)} patches (apply it first)"
        )
    commit = commits[position]
    subject = tree.git("log", "-1", "--format=%s", commit)
    if subject != series[position].subject:
        raise SystemExit(
            f"--at-patch {number}: commit {commit[:10]} is {subject!r}, the patch "
            f"{series[position].subject!r} (build tree and series disagree; apply again)"
        )
    return commit


def _pack_at(tree: BuildTree, number: str, dest: Path) -> None:
    """The series' changed `vllm/` files as of patch `number`'s commit."""
    commit = patch_commit(tree, number)
    for name in tree.changed_files():
        data = tree.read_bytes(commit, name) if name.startswith("vllm/") else None
        if data is not None:
            _write(dest / name, data)


def _pack_single(tree: BuildTree, number: str, dest: Path) -> None:
    """Pristine files + one patch of the series (`git apply` in a scratch copy)."""
    matches = sorted(tree.series_path.glob(f"{number}-*.patch"))
    if len(matches) != 1:
        raise SystemExit(f"--only-patch {number}: expected one patch file, found {matches}")
    patch = matches[0]
    names = subprocess.run(
        ["git", "apply", "--numstat", str(patch)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    files = [line.split("\t")[2] for line in names if line.count("\t") == 2]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name in files:
            data = tree.read_bytes(BASELINE_TAG, name)
            if data is not None:
                _write(work / name, data)
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        result = subprocess.run(
            ["git", "-C", str(work), "apply", str(patch.resolve())], capture_output=True, text=True
        )
        if result.returncode:
            raise SystemExit(f"{patch.name} does not apply to pristine alone:\n{result.stderr}")
        for name in files:
            if name.startswith("vllm/") and (work / name).exists():
                _write(dest / name, (work / name).read_bytes())


# The touched areas' test folders and what their imports and tests/conftest.py need (the whole
# tests/ tree is 16 MiB: too much beside a bundle piece in one device run).
TEST_PATHS = [
    "tests/__init__.py",
    "tests/conftest.py",
    "tests/utils.py",
    "tests/models/__init__.py",
    "tests/models/utils.py",
    "tests/v1/__init__.py",
    "tests/v1/sample",
    "tests/v1/worker",
]


def pack_tests(tree: BuildTree, out: Path) -> Path:
    """Pristine test files of the touched areas + the series' changed/added test files."""
    if out.exists():
        shutil.rmtree(out)
    tree.export_tree(BASELINE_TAG, out / "pristine", TEST_PATHS)
    for name in tree.changed_files():
        if name.startswith("tests/"):
            data = tree.read_bytes("HEAD", name)
            if data is not None:
                _write(out / "patched" / name, data)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version")
    parser.add_argument("--out", type=Path, default=Path(".gpu/overlay"))
    parser.add_argument("--only-patch", action="append", default=[], metavar="NNNN")
    parser.add_argument("--at-patch", action="append", default=[], metavar="NNNN")
    parser.add_argument("--tests", type=Path, help="also export the tests/ trees here")
    args = parser.parse_args()
    tree = _applied_tree(args.version)
    print(pack(tree, args.out, args.only_patch, args.at_patch))
    if args.tests:
        print(pack_tests(tree, args.tests))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
