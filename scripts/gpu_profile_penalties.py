"""Host profile (cProfile) of V1 decode with and without penalties, on the GPU machine.

Shows where the per-step host time of the penalty path goes (issue 8, step 2). Runs in the
current import root (PYTHONPATH: the bundle or a patched copy of it), in-process engine:
    VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0 \\
    python3 scripts/gpu_profile_penalties.py --out $OUT/profile --output-len 1024
Writes <out>/<config>.txt (top functions by own and cumulative time) and summary.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_verify  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=1024)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_SAMPLE_TOKENS_TIMING", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    from vllm import LLM

    gpu_verify.build_model()
    spec = gpu_verify.STEPS["penalties-v1"]
    llm = LLM(model=str(gpu_verify.MODEL), seed=0, **spec["engine"])
    summary: dict = {"batch": args.batch, "output_len": args.output_len, "configs": {}}
    for name, config in spec["configs"].items():
        config = {**config, "batch": args.batch, "output_len": args.output_len}
        gpu_verify._run_config(llm, spec, config, warmup=True)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        result = gpu_verify._run_config(llm, spec, config, warmup=False)
        prof.disable()
        wall = time.perf_counter() - t0
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(45)
        stats.sort_stats("cumulative").print_stats(70)
        (args.out / f"{name}.txt").write_text(text.getvalue())
        summary["configs"][name] = {
            "profiled_wall_s": wall,
            "tok_per_s": result["tok_per_s"],
            "attribution": result["attribution"],
        }
        print(f"{name}: {result['tok_per_s']:.0f} tok/s (profiled) in {wall:.1f} s", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
