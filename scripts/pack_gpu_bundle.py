#!/usr/bin/env python3
"""Pack an offline vLLM bundle for the GPU machine from a wheel built for another torch / CUDA
than the image's (vLLM 0.18.1: torch 2.10 + CUDA 12.9, 433 MB; the image: torch 2.11 + CUDA 13),
in pieces of at most 58 MiB (one device call each), installed by the same install.sh.

    python scripts/pack_gpu_bundle.py 0.18.1 --out .gpu/b0181   # -> .gpu/b0181/a, b (28 MiB each)

What ../shared/gpu/make-bundle.py does (its functions are used: the official wheel, the same
dropped files, vLLM's requirements that the image lacks, install.sh), and three more things:

- device code of one architecture (--arch, 90 = H100): verify.gpu.fatbin zeroes what an sm_90
  GPU never loads in every extension (0.18.1's `_C` carries eight architectures: 431 MiB of
  device code, 87 of them for the H100);
- the CUDA 12 runtime (`nvidia-cuda-runtime-cu12`'s libcudart.so.12) when an extension needs it;
- verify/gpu/bundle_site.py as the bundle's sitecustomize.py (loads that runtime; lazy symbol
  binding for the one torch 2.10 symbol that torch 2.11 lacks; see its docstring).

The manifest lists each of these. Install with BUNDLE_ROOT (a root of its own, so a warm machine's
0.22.0 bundle at /tmp/vllm-bundle is neither used nor replaced): one call per piece, in order,
`BUNDLE_ROOT=/tmp/vllm-0181 bash .gpu/b0181/<piece>/install.sh`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify.gpu import bundle_pieces, fatbin  # noqa: E402

CUDA12_RUNTIME = "nvidia-cuda-runtime-cu12==12.9.79"  # the CUDA 0.18.1's wheel was built with
CUDART = "nvidia/cuda_runtime/lib/libcudart.so.12"


def load_make_bundle(path: Path):
    spec = importlib.util.spec_from_file_location("make_bundle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel_members(mb, wheel: Path, arch: int, report: dict):
    """(name, bytes) of the wheel's files that the bundle keeps, device code reduced to `arch`."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or name in mb.DROP or name.startswith(mb.DROP_PREFIX):
                continue
            data = z.read(info)
            if name.endswith(".so") and b".nv_fatbin" in data:
                data = bytearray(data)
                report["device_code"][name] = fatbin.keep_arch(data, arch)
                if b"libcudart.so.12\0" in data:
                    report["needs_cuda12"].append(name)
            yield name, info.external_attr >> 16, bytes(data)


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode or 0o644
    tar.addfile(info, io.BytesIO(data))


def pack(args, mb, tar_path: Path, report: dict) -> None:
    args.cache.mkdir(parents=True, exist_ok=True)
    wheel = next(args.cache.glob(f"vllm-{args.version}-*.whl"), None)
    wheel = wheel or mb.pip_download(f"vllm=={args.version}", args.cache)
    report["wheel"] = wheel.name
    print(f"wheel: {wheel.name} ({wheel.stat().st_size / 1e6:.0f} MB)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        report["notes"] = mb.collect_deps(wheel, args.cache / "deps", site)
        with tarfile.open(tar_path, "w:xz", preset=9) as tar:
            tar.add(site, arcname=".")
            for name, mode, data in wheel_members(mb, wheel, args.arch, report):
                add_bytes(tar, name, data, mode)
            if report["needs_cuda12"]:
                runtime = mb.pip_download(CUDA12_RUNTIME, args.cache / "deps")
                with zipfile.ZipFile(runtime) as z:
                    add_bytes(tar, "_pb_cuda12/libcudart.so.12", z.read(CUDART), 0o755)
                report["added"].append(f"_pb_cuda12/libcudart.so.12 from {runtime.name}")
            add_bytes(tar, "sitecustomize.py", (REPO / "verify/gpu/bundle_site.py").read_bytes())
            report["added"].append("sitecustomize.py (verify/gpu/bundle_site.py)")


def split(tar_path: Path, out: Path, limit: int, pieces: int = 1) -> list[str]:
    """The archive in equal pieces (at least `pieces`) of at most `limit` bytes:
    out/a/vllm.tar.xz.00, out/b/vllm.tar.xz.01, ..."""
    data = tar_path.read_bytes()
    count = max(pieces, -(-len(data) // limit))
    return bundle_pieces.write_pieces(data, [out / "abcdefgh"[i] for i in range(count)])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("version")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", type=int, default=90, help="the GPU's SM architecture (90: H100)")
    ap.add_argument(
        "--pieces",
        type=int,
        default=2,
        help="at least this many pieces (small carries; 0.18.1 "
        "fits one piece of 56 MiB, which leaves little room for the project's files in a call)",
    )
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "vllm-gpu-bundle")
    ap.add_argument("--make-bundle", type=Path, default=REPO.parent / "shared/gpu/make-bundle.py")
    args = ap.parse_args()
    mb = load_make_bundle(args.make_bundle)
    report: dict = {"vllm": args.version, "arch": f"sm_{args.arch}", "device_code": {}}
    report |= {"needs_cuda12": [], "added": []}
    if args.out.exists():
        shutil.rmtree(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "vllm.tar.xz"
        pack(args, mb, tar_path, report)
        report["sha256"] = hashlib.sha256(tar_path.read_bytes()).hexdigest()
        report["pieces"] = split(tar_path, args.out, mb.PIECE_LIMIT, args.pieces)
        print(f"packed: {tar_path.stat().st_size / 2**20:.1f} MiB", flush=True)
    report["dropped"], report["skipped_requirements"] = list(mb.DROP), sorted(mb.SKIP_REQS)
    folders = sorted(p for p in args.out.iterdir() if p.is_dir())
    bundle_pieces.write_manifests(folders, report, mb.HERE / "install.sh")
    for folder in folders:
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{folder}: {size / 2**20:.1f} MiB")
    for note in report["notes"]:
        print("note:", note)


if __name__ == "__main__":
    main()
