"""Host profile (cProfile) of V1 decode with and without penalties, on the GPU machine.

Shows where the per-step host time of the penalty path goes (one engine of `--batch` rows,
plain and penalized as the penalty-cost A/B samples them: no top-p, seeded). Runs in the
current import root (PYTHONPATH: the bundle or a patched copy of it), in-process engine
(`--unseeded`: no seed per request, vLLM's default, a shorter step):
    VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0 \\
    python3 scripts/gpu_profile_penalties.py --out $OUT/profile --output-len 1024
Writes <out>/<config>.txt (top functions by own and cumulative time) and summary.json.
`--cuda`: torch.profiler instead (CPU and CUDA activity; short outputs, e.g. --output-len 256):
<out>/<config>.txt lists ops and kernels by device time and by host time, so that the
penalized config's extra time per step can be told apart as kernel time or launch/host time.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
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
    ap.add_argument("--cuda", action="store_true", help="torch.profiler, CPU and CUDA")
    ap.add_argument("--unseeded", action="store_true", help="no seed per request (vLLM's default)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_SAMPLE_TOKENS_TIMING", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    from vllm import LLM

    gpu_verify.build_model()
    spec = gpu_verify._penalties_step(args.batch, args.output_len, args.output_len + 48)
    llm = LLM(model=str(gpu_verify.MODEL), seed=0, **spec["engine"])
    summary: dict = {"batch": args.batch, "output_len": args.output_len, "configs": {}}
    summary["seeded"] = not args.unseeded
    for name, config in spec["configs"].items():
        # As the penalty-cost A/B samples: temperature 1, no top-p.
        params = {k: v for k, v in config["params"].items() if k != "top_p"}
        params |= {"seed": None} if args.unseeded else {}
        config = {**config, "params": params}
        gpu_verify._run_config(llm, spec, config, warmup=True)
        profile = cuda_profile if args.cuda else host_profile
        t0 = time.perf_counter()
        result, text = profile(functools.partial(gpu_verify._run_config, llm, spec, config, False))
        wall = time.perf_counter() - t0
        (args.out / f"{name}.txt").write_text(text)
        summary["configs"][name] = {
            "profiled_wall_s": wall,
            "tok_per_s": result["tok_per_s"],
            "attribution": result["attribution"],
        }
        print(f"{name}: {result['tok_per_s']:.0f} tok/s (profiled) in {wall:.1f} s", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    os._exit(0)


def host_profile(run):
    """(run(), top functions by own and by cumulative time) under cProfile."""
    prof = cProfile.Profile()
    prof.enable()
    result = run()
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(70)
    return result, text.getvalue()


def cuda_profile(run):
    """(run(), ops and kernels by device time, then by host time) under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = run()
    table = prof.key_averages()
    parts = [
        table.table(sort_by=key, row_limit=40) for key in ("cuda_time_total", "self_cpu_time_total")
    ]
    return result, "\n\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
