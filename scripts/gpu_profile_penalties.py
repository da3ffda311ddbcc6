"""Where a penalized decode step's time goes: one engine of the current import root (PYTHONPATH:
the bundle or a built site such as /tmp/pb-sites/patched), in-process, running a penalty-cost
pair of verify/gpu/penalty_plan.py (plain, then penalized) as the A/B runs it
(verify.ab.engines.run_config: the same prompts, per-request seeds unless --unseeded), each
profiled after one warm-up call:
    VLLM_USE_V2_MODEL_RUNNER=0 VLLM_USE_FLASHINFER_SAMPLER=0 python3 \\
      scripts/gpu_profile_penalties.py --model-shape qwen3-8b --entropy 1.0 \\
      --batch 32 --output-len 256 --out $OUT/profile
Default: cProfile of the host (top functions by own and by cumulative time); --cuda:
torch.profiler (ops and kernels by device time and by host time; short outputs, e.g.
--output-len 64), so that the penalized config's extra time per step can be told apart as kernel
time or launch/host time. Writes <out>/<config>.txt and <out>/summary.json (the machine: GPU,
torch, vLLM; tok/s, the sampler timers where the series' VLLM_SAMPLE_TOKENS_TIMING is on, and
the engine's measured entropy).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verify.ab import __main__ as ab_main  # noqa: E402  (provenance read on this machine)
from verify.ab import engines  # noqa: E402
from verify.gpu import device, penalty_plan, shapes  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=256)
    pairs = [f"{a}:{b}" for a, b in penalty_plan.COST_PAIRS]
    ap.add_argument("--pair", default="plain-k20p95:presence-k20p95", choices=pairs,
                    help="plain:penalized samplings of verify/gpu/penalty_plan.py")  # fmt: skip
    ap.add_argument("--model-shape", help="a verify/gpu/shapes.py shape on dummy weights")
    ap.add_argument("--model", type=Path, help="a model folder instead (default: /tmp/pb-model)")
    ap.add_argument("--entropy", type=float, help="nats: scale the dummy logits to this first")
    ap.add_argument("--cuda", action="store_true", help="torch.profiler, CPU and CUDA")
    ap.add_argument("--unseeded", action="store_true", help="no seed per request (vLLM's default)")
    return ap.parse_args(argv)


def configs(args: argparse.Namespace) -> dict[str, dict]:
    """The pair's two configs at --batch x --output-len, as the penalty A/B names them."""
    out = {}
    for sampling in args.pair.split(":"):
        shape = {"batch": args.batch, "output_len": args.output_len}
        config = {**shape, "input_len": penalty_plan.INPUT_LEN, **penalty_plan.SAMPLINGS[sampling]}
        if args.unseeded:
            config["seed"] = None
        out[penalty_plan.config_name(sampling, args.batch, args.output_len)] = config
    return out


def start_engine(args: argparse.Namespace) -> tuple[object, dict]:
    """(LLM sized as the penalty A/B sizes one engine of this shape, its calibration or {})."""
    from vllm import LLM

    shape = [(args.batch, args.output_len)]
    llm_args = penalty_plan.engine_args(1, shape, model_shape=args.model_shape)
    if args.model_shape:
        model = shapes.write(args.model_shape, shapes.model_dir(args.model_shape))
    else:
        model = args.model or device.build_model()
    llm = LLM(model=str(model), seed=0, **llm_args)
    if args.entropy is None:
        return llm, {}
    from verify.ab.output_entropy import calibrate

    return llm, calibrate(llm, args.entropy)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_SAMPLE_TOKENS_TIMING", "1")
    if args.entropy is not None:  # the calibration's function reaches the engine core
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    llm, entropy = start_engine(args)
    summary: dict = {"argv": sys.argv, "machine": ab_main.provenance(),
                     "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                     "model_shape": args.model_shape, "output_entropy": entropy,
                     "model_runner": engines.model_runner(llm), "configs": {}}  # fmt: skip
    profile = cuda_profile if args.cuda else host_profile
    for name, config in configs(args).items():
        engines.run_config(llm, config)  # warm-up: the same call, not profiled
        t0 = time.perf_counter()
        result, text = profile(lambda config=config: engines.run_config(llm, config))
        wall = time.perf_counter() - t0
        (args.out / f"{name}.txt").write_text(text)
        keep = ("tok_per_s", "steps", "sampler")
        summary["configs"][name] = {"config": config, "profiled_wall_s": wall,
                                    **{k: result[k] for k in keep if k in result}}  # fmt: skip
        print(f"{name}: {result['tok_per_s']:.0f} tok/s (profiled) in {wall:.1f} s", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    os._exit(0)  # skip interpreter teardown, where the engine's threads can abort the process


def host_profile(run: Callable[[], dict]) -> tuple[dict, str]:
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


def cuda_profile(run: Callable[[], dict]) -> tuple[dict, str]:
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
