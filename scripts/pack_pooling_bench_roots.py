#!/usr/bin/env python3
"""Pack the vLLM 0.18.1 import roots that ``scripts/gpu_pooling_prompt_ids_bench.py`` needs on
the GPU machine.

The GPU machine has no git, no gitpython and no 0.18.1 sdist, so this runs here, from the repo
root, and writes (default ``.gpu/roots-0.18.1/``, ignored by git):

- ``pristine.tar.xz``: ``vllm/`` and ``vllm.egg-info/`` of the build tree's ``pristine`` tag
  (vLLM reads its own version through ``importlib.metadata``, hence the egg-info);
- ``overlay/vllm/...``: the series' version (build tree HEAD) of every ``vllm/`` file the
  series changes; ``patched`` = pristine + overlay, minus the files listed as deleted;
- ``SERIES_HASH`` (``verify.series.series_hash``, as ``verify/gpu_overlay.py`` writes it) and
  ``MANIFEST.json`` (commits, overlay and deleted files, sha256 of the tarball).

    python scripts/pack_pooling_bench_roots.py            # applies the series first (no-op if done)

Carry the folder with the device run (``carry: [".gpu/roots-0.18.1"]``); about 3 MiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.buildtree import BASELINE_TAG, BuildTree  # noqa: E402
from verify.series import series_hash  # noqa: E402

VERSION = "0.18.1"
DEFAULT_OUT = REPO / ".gpu" / f"roots-{VERSION}"
ROOT_PATHS = ("vllm", "vllm.egg-info")


def _present(tree: BuildTree, rev: str, paths: tuple[str, ...]) -> list[str]:
    """The entries of `paths` that exist at `rev`."""
    return [p for p in paths if tree.git("ls-tree", "--name-only", rev, "--", p)]


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def pack(tree: BuildTree, out: Path) -> dict[str, object]:
    """Write the tarball, overlay, SERIES_HASH and MANIFEST.json into `out` (replaced)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    paths = _present(tree, BASELINE_TAG, ROOT_PATHS)
    if "vllm" not in paths:
        raise SystemExit(f"build tree {tree.path} has no vllm/ at tag {BASELINE_TAG!r}")
    archive = subprocess.run(
        ["git", "-C", str(tree.path), "archive", "--format=tar", BASELINE_TAG, *paths],
        check=True,
        capture_output=True,
    ).stdout
    tarball = out / "pristine.tar.xz"
    tarball.write_bytes(lzma.compress(archive, preset=9))

    overlay: list[str] = []
    deleted: list[str] = []
    for name in tree.changed_files():
        if not name.startswith("vllm/"):
            continue
        data = tree.read_bytes("HEAD", name)
        if data is None:
            deleted.append(name)
            continue
        target = out / "overlay" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        overlay.append(name)

    shash = series_hash(VERSION)
    (out / "SERIES_HASH").write_text(shash + "\n")
    manifest: dict[str, object] = {
        "version": VERSION,
        "series_hash": shash,
        "pristine_commit": tree.baseline(),
        "patched_commit": tree.head(),
        "root_paths": paths,
        "overlay": sorted(overlay),
        "deleted": sorted(deleted),
        "tarball_sha256": hashlib.sha256(tarball.read_bytes()).hexdigest(),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--no-apply",
        action="store_true",
        help="use the build tree as it is (default: `apply` the series first, a no-op if done)",
    )
    args = parser.parse_args(argv)
    tree = BuildTree(VERSION)
    if args.no_apply:
        if not tree.exists():
            raise SystemExit(f"no build tree for {VERSION}: run `python -m verify apply {VERSION}`")
    else:
        tree.apply()
    manifest = pack(tree, args.out)
    size = _dir_size(args.out)
    print(
        f"{args.out}: {size / 2**20:.2f} MiB; series {manifest['series_hash']}; "
        f"overlay {len(manifest['overlay'])} file(s), deleted {len(manifest['deleted'])}"
    )
    for name in manifest["overlay"]:
        print(f"  overlay {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
