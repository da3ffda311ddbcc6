#!/usr/bin/env python3
"""Cut an offline vLLM bundle (../shared/gpu/make-bundle.py's .gpu/a and .gpu/b) into more,
smaller pieces, once the project's own files no longer leave room for a 58 MiB piece in a
device call (64 MiB at most, every tracked file included).

    python scripts/split_gpu_bundle.py                        # .gpu/a, .gpu/b -> .gpu/p1 .. pN
    python scripts/split_gpu_bundle.py --beside .gpu/overlay  # room for it beside the last piece

N is the fewest pieces of which each fits beside the tracked files, with 1 MiB to spare, and
the last also beside the --beside paths (its call can then start the work). The pieces join
into the same archive (its sha256 is checked against the manifest), and each piece folder has
the bundle's install.sh and a manifest that lists the new pieces: install with one call per
piece, in order (`bash .gpu/p1/install.sh`, ...); the last one unpacks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from verify.gpu import bundle_pieces  # noqa: E402

CARRY_LIMIT = 64 * 2**20  # what one device call takes along
SPARE = 2**20


def tree_bytes(paths: list[Path]) -> int:
    """Bytes of the files under `paths` (files or folders)."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    return sum(f.stat().st_size for f in files)


def tracked_bytes(repo: Path) -> int:
    """Bytes of the files git tracks or would add (untracked, not ignored) in `repo`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    files = [repo / name.decode() for name in listed if name]
    return tree_bytes([f for f in files if f.exists()])  # deleted, not yet staged: not carried


def piece_count(total: int, tracked: int, beside: int, limit: int = CARRY_LIMIT) -> int:
    """The fewest equal pieces of `total` bytes that each fit a call beside `tracked` bytes and
    `beside` bytes (carried with the last), with SPARE to spare; a named error where none can."""
    room = limit - tracked - beside - SPARE
    if room <= 0:
        raise SystemExit(
            f"no room for a piece: {tracked} tracked bytes and {beside} beside leave {room} of "
            f"{limit}; ignore or carry less"
        )
    return max(math.ceil(total / room), 1)


def bundle_parts(src: list[Path], manifest: dict) -> list[Path]:
    """The manifest's pieces, in order, each from the `src` folder that has it."""
    return [next(d / p for d in src if (d / p).exists()) for p in manifest["pieces"]]


def split(src: list[Path], out: Path, count: int) -> list[Path]:
    """`src` folders' pieces joined (checked against their manifest) and cut into `count`
    folders out/p1 .. pN, each with install.sh and a manifest naming the new pieces."""
    manifest = json.loads((src[0] / "manifest.json").read_text())
    whole = b"".join(p.read_bytes() for p in bundle_parts(src, manifest))
    if hashlib.sha256(whole).hexdigest() != manifest["sha256"]:
        raise SystemExit(f"{', '.join(map(str, src))}: the pieces do not match their manifest")
    folders = [out / f"p{i + 1}" for i in range(count)]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    names = bundle_pieces.write_pieces(whole, folders)
    bundle_pieces.write_manifests(folders, {**manifest, "pieces": names}, src[0] / "install.sh")
    return folders


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--src", type=Path, nargs="+", default=[Path(".gpu/a"), Path(".gpu/b")])
    ap.add_argument("--out", type=Path, default=Path(".gpu"))
    ap.add_argument(
        "--beside", type=Path, nargs="*", default=[], help="carried with the last piece"
    )
    ap.add_argument("--repo", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    missing = [str(d) for d in args.src if not (d / "manifest.json").exists()]
    if missing:
        raise SystemExit(
            f"no bundle piece at {', '.join(missing)}: run ../shared/gpu/make-bundle.py"
        )
    manifest = json.loads((args.src[0] / "manifest.json").read_text())
    total = tree_bytes(bundle_parts(args.src, manifest))
    tracked, beside = tracked_bytes(args.repo), tree_bytes(args.beside)
    count = piece_count(total, tracked, beside)
    for folder in split(args.src, args.out, count):
        size = tree_bytes([folder])
        print(f"{folder}: {size / 2**20:.1f} MiB (+ {tracked / 2**20:.1f} MiB tracked)")
    print(f"{count} calls: bash {args.out}/p1/install.sh ... bash {args.out}/p{count}/install.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
