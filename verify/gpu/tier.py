"""The GPU tier on any CUDA machine with network: the pin's runtime venv with the official CUDA
wheel from the index (`verify.runtime`, flavor cuda), the series' changed files packed for the
variants (`verify.gpu_overlay`), then a workload script run with that venv's Python and site.

    python -m verify.gpu.tier 0.22.0 --install-only          # the runtime alone (no GPU needed)
    python -m verify.gpu.tier 0.22.0 engine-aa aa-qwen3-8b PB_MODEL_SHAPE=qwen3-8b PB_ENTROPY=1
    python -m verify.gpu.tier 0.22.0 penalties-ab pen-8b PB_MODEL_SHAPE=qwen3-8b PB_RUNNER=V1

`nox -s gpu-<v> -- ARGS` runs it. Each workload writes its record into
`<results>/gpu-runs/<v>/gpu/<tag>.json` (import it with `python -m verify.importer`). A machine
without network runs the same scripts over the offline bundle instead (docs/gpu-runbook.md)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from verify import paths, runtime
from verify.errors import PatchbenchError

REPO = Path(__file__).resolve().parents[2]
#: Workloads by name: their script (knobs are KEY=VALUE environment, documented in each).
WORKLOADS = {
    "engine-aa": "scripts/gpu_engine_aa.sh",
    "penalties-ab": "scripts/gpu_penalties_ab.sh",
}


def workload_env(rt: runtime.Runtime, overlay: Path, out: Path, knobs: list[str]) -> dict:
    """The workload's environment: the runtime's Python and site, the packed series, the
    record folder, and the caller's KEY=VALUE knobs."""
    bad = [k for k in knobs if "=" not in k or not k.split("=", 1)[0].startswith("PB_")]
    if bad:
        raise PatchbenchError(f"knobs {bad}: expected PB_KEY=VALUE (see the workload's script)")
    env = rt.env("pristine")
    env.pop("PYTHONPATH", None)
    return {
        **env,
        "PB_SITE": str(rt.site),
        "PB_PYTHON": rt.python,
        "PB_OVERLAY": str(overlay),
        "PB_PIN": rt.version,
        "OUT": str(out),
        **dict(k.split("=", 1) for k in knobs),
    }


def pack_overlay(version: str) -> Path:
    """The series' files for the variants (`python -m verify.gpu_overlay`), under build/."""
    overlay = paths.build_root() / "gpu-overlay"
    cmd = [sys.executable, "-m", "verify.gpu_overlay", version, "--out", str(overlay)]
    subprocess.run(cmd, check=True, cwd=REPO)
    return overlay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.gpu.tier", description=__doc__)
    parser.add_argument("version")
    parser.add_argument("workload", nargs="?", choices=sorted(WORKLOADS))
    parser.add_argument("tag", nargs="?", help="the record's name")
    parser.add_argument("knobs", nargs="*", help="PB_KEY=VALUE for the workload's script")
    parser.add_argument("--install-only", action="store_true", help="build the runtime, stop")
    args = parser.parse_args(argv)
    if not args.install_only and not (args.workload and args.tag):
        parser.error("give WORKLOAD TAG (or --install-only)")
    try:
        rt = runtime.get_runtime(args.version, patched=False, flavor="cuda")
        print(json.dumps({"venv": str(rt.venv), "site": str(rt.site)}))
        if args.install_only:
            return 0
        out = paths.results_root() / "gpu-runs" / args.version
        env = workload_env(rt, pack_overlay(args.version), out, args.knobs)
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cmd = ["bash", WORKLOADS[args.workload], args.tag]
    return subprocess.run(cmd, env=env, cwd=REPO).returncode


if __name__ == "__main__":
    sys.exit(main())
