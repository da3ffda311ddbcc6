"""Pack the series' changed package files for the GPU machine (which has no git and no sdist).

`python -m verify.gpu_overlay <version> [--out .gpu/overlay]` writes
``<out>/<version>/{pristine,patched}/vllm/...`` and ``SERIES_HASH``; carry that folder with the
device run and point ``scripts/gpu_verify.py --overlay`` at it.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from verify.buildtree import BASELINE_TAG, BuildTree
from verify.series import series_hash
from verify.versions import require_pinned


def pack(version: str, out: Path) -> Path:
    tree = BuildTree(require_pinned(version))
    tree.apply()
    target = out / version
    if target.exists():
        shutil.rmtree(target)
    for name in tree.changed_files():
        if not name.startswith("vllm/"):
            continue
        for label, rev in (("pristine", BASELINE_TAG), ("patched", "HEAD")):
            data = tree.read_bytes(rev, name)
            if data is not None:
                path = target / label / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    (target / "SERIES_HASH").write_text(series_hash(version) + "\n")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version")
    parser.add_argument("--out", type=Path, default=Path(".gpu/overlay"))
    args = parser.parse_args()
    print(pack(args.version, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
