"""Offline vLLM bundle pieces for the GPU machine: one archive cut into equal pieces, one
folder per device call (scripts/pack_gpu_bundle.py packs them, scripts/split_gpu_bundle.py
re-cuts them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def write_pieces(data: bytes, folders: list[Path]) -> list[str]:
    """`data` cut into len(folders) equal pieces, piece i written as folders[i]/vllm.tar.xz.<i>
    (install.sh joins them in that order); the pieces' names."""
    size = -(-len(data) // len(folders))
    names = []
    for i, folder in enumerate(folders):
        folder.mkdir(parents=True, exist_ok=True)
        names.append(f"vllm.tar.xz.{i:02d}")
        (folder / names[-1]).write_bytes(data[i * size : (i + 1) * size])
    return names


def write_manifests(folders: list[Path], manifest: dict, install_sh: Path) -> None:
    """Each piece folder's manifest.json (`manifest`, which names every piece) and a copy of
    the bundle's install.sh."""
    for folder in folders:
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
        shutil.copy(install_sh, folder / "install.sh")
