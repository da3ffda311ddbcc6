"""The plan of 0011's penalty-cost A/B on the GPU (scripts/gpu_penalties_ab.sh): from the
variants, shapes and samplings asked for, the `python -m verify.ab engine` arguments (configs,
cells, comparisons, engine arguments with a KV cache that holds the largest shape without
preemption), refusing a plan whose engines do not fit the GPU together (or, one GPU per variant,
each GPU alone).

    python3 -m verify.gpu.penalty_plan --variants "series patched" --shapes "64x2048" \\
      --pristine-shapes "64x2048" --sampling "plain pen" --out-args ARGS_FILE

Standard library only (runs on the device with nothing but the bundle)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verify.gpu import shapes as model_shapes
from verify.gpu.device import SITES

PENALTIES = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}
TOP_K_P = {"top_k": 50, "top_p": 0.9}
SAMPLINGS = {
    "plain": {"temperature": 1.0},
    "pen": {"temperature": 1.0, **PENALTIES},
    "plain-topkp": {"temperature": 1.0, **TOP_K_P},
    "pen-topkp": {"temperature": 1.0, **PENALTIES, **TOP_K_P},
    # the sampling Qwen3.5's model card recommends (seed 003's users): top-k 20, top-p 0.95,
    # presence penalty 1.5
    "plain-k20p95": {"temperature": 1.0, "top_k": 20, "top_p": 0.95},
    "presence-k20p95": {"temperature": 1.0, "top_k": 20, "top_p": 0.95, "presence_penalty": 1.5},
}
#: (plain, penalized) sampling pairs: the penalty cost is pen / plain of one variant.
COST_PAIRS = (("plain", "pen"), ("plain-topkp", "pen-topkp"), ("plain-k20p95", "presence-k20p95"))


def describe(plain: str, pen: str) -> str:
    """`presence 1.5, frequency 0.5, repetition 1.1 vs none (temperature 1)` of a cost pair."""
    words = {"presence_penalty": "presence", "frequency_penalty": "frequency",
             "repetition_penalty": "repetition", "top_k": "top-k", "top_p": "top-p"}  # fmt: skip
    base, penalized = SAMPLINGS[plain], SAMPLINGS[pen]
    added = [f"{words[k]} {v:g}" for k, v in penalized.items() if k not in base]
    kept = [f"{words[k]} {v:g}" for k, v in base.items() if k in words]
    return f"{', '.join(added)} vs none ({', '.join([*kept, 'temperature 1'])})"


#: Variants' builds: `mrv2` is the pin's own code on Model Runner V2 (the others run the runner
#: the caller's environment chooses).
BUILDS = ("pristine", "mrv2", "series", "patched")
PRISTINE = ("pristine", "mrv2")
MRV2_ENV = "VLLM_USE_V2_MODEL_RUNNER=1"
SERIES_SITES = {"switch": f"{SITES}/patched,VLLM_V1_PENALTY_STATE=0", "at-0010": f"{SITES}/at-0010"}
INPUT_LEN = 32
#: KV bytes per token of the Qwen3-0.6B shape (28 layers x K,V x 8 heads x 128 x bf16).
KV_BYTES_PER_TOKEN = 28 * 2 * 8 * 128 * 2
#: GPU memory the engines may take together (an H100's 80 GB less a margin), and each
#: engine's own (weights, activations, CUDA graphs) besides its KV cache.
GPU_BUDGET = 74 * 2**30
ENGINE_OVERHEAD = 5 * 2**30


class PlanError(SystemExit):
    """The asked plan cannot run (unknown names, or engines that do not fit together)."""


def config_name(sampling: str, batch: int, output_len: int) -> str:
    return f"{sampling}-b{batch}-l{output_len}"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    try:
        return [(int(b), int(length)) for b, length in (s.split("x") for s in text.split())]
    except ValueError:
        raise PlanError(f"shapes {text!r}: expected BxL items such as 64x2048") from None


def plan(
    variants: list[str],
    shapes: list[tuple[int, int]],
    pristine_shapes: list[tuple[int, int]],
    samplings: list[str],
    series: str = "switch",
    seeded: bool = True,
    gpu_budget: int = GPU_BUDGET,
    gpu_each: list[str] | None = None,
    in_turn: bool = False,
    model_shape: str | None = None,
) -> list[str]:
    """The engine front-end's arguments (one per item, --name=value). `seeded`: every request
    its own seed (tokens comparable across engines; vLLM then draws per request and step).
    A variant named with a trailing 2 (`series2`) is a second engine of that build: the
    control the importer judges token identity against. `gpu_each`: CUDA device ids, one per
    variant in order (CUDA_VISIBLE_DEVICES in its environment), `gpu_budget` then per GPU:
    shapes whose engines do not fit one GPU together (B=256, or L=8160 at B=64, on an H100)
    can still run beside each other, each on its own card. `in_turn`: the engines take turns on
    one GPU instead (`verify.ab engine --in-turn`), each sized to have it alone."""
    bad = [v for v in variants if build_of(v) not in BUILDS]
    bad += [s for s in samplings if s not in SAMPLINGS]
    if bad or series not in SERIES_SITES:
        raise PlanError(f"unknown variants, samplings or series {bad or [series]}")
    if gpu_each is not None and len(gpu_each) < len(variants):
        raise PlanError(
            f"one GPU per variant: {len(variants)} variants, {len(gpu_each)} GPU(s) "
            f"({','.join(gpu_each) or 'none'})"
        )
    if in_turn and gpu_each is not None:
        raise PlanError("engines in turn share one GPU: not with one GPU per variant")
    own = {v: pristine_shapes if build_of(v) in PRISTINE else shapes for v in variants}
    order = list(dict.fromkeys(s for v in variants for s in own[v]))
    if not order:
        raise PlanError("no shape to measure")
    sites = {
        "pristine": "",
        "mrv2": f",{MRV2_ENV}",
        "series": SERIES_SITES[series],
        "patched": f"{SITES}/patched",
    }
    on_gpu = [f",CUDA_VISIBLE_DEVICES={g}" for g in gpu_each] if gpu_each else [""] * len(variants)
    args = [f"--variant={v}={sites[build_of(v)]}{on_gpu[i]}" for i, v in enumerate(variants)]
    for b, length in order:
        for s in samplings:
            config = {"batch": b, "output_len": length, **SAMPLINGS[s]}
            if not seeded:
                config["seed"] = None
            args.append(f"--config={config_name(s, b, length)}={json.dumps(config)}")
    pairs = []
    for b, length in order:
        here = [v for v in variants if (b, length) in own[v]]
        name = {s: config_name(s, b, length) for s in samplings}
        args += [f"--cell={v}/{name[s]}" for v in here for s in samplings]
        for v in here:  # the penalty cost of each variant
            pairs += [
                (f"{v}/{name[p]}", f"{v}/{name[q]}")
                for p, q in COST_PAIRS
                if p in name and q in name
            ]
        if "patched" in here:  # patched against the series and pristine, sampling by sampling
            pairs += [(f"{a}/{name[s]}", f"patched/{name[s]}") for a in ("series", "pristine")
                      if a in here for s in samplings]  # fmt: skip
    args += [f"--compare={a}:{c}" for a, c in pairs]
    engines = 1 if gpu_each or in_turn else len(variants)
    engine = engine_args(engines, order, gpu_budget, model_shape)
    return args + [f"--engine-args={json.dumps(engine)}"] + (["--in-turn"] if in_turn else [])


def build_of(variant: str) -> str:
    """The build a variant runs: `series2` is a second engine of `series` (`mrv22` of `mrv2`)."""
    return variant[:-1] if variant.endswith("2") and variant[:-1] in BUILDS else variant


def engine_args(
    engines: int,
    shapes: list[tuple[int, int]],
    gpu_budget: int = GPU_BUDGET,
    model_shape: str | None = None,
) -> dict:
    """LLM arguments: a KV cache holding the largest shape (4% spare), batch and length limits;
    PlanError when `engines` such engines do not fit the GPU together. `model_shape`: a
    verify.gpu.shapes name, run on vLLM's dummy weights (default: the Qwen3-0.6B-shaped
    random model of verify.gpu.device)."""
    kv_per_token, overhead, extra = KV_BYTES_PER_TOKEN, ENGINE_OVERHEAD, {}
    if model_shape is not None:
        try:
            cfg = model_shapes.config(model_shape)
        except model_shapes.ShapeError as exc:
            raise PlanError(str(exc)) from None
        kv_per_token = model_shapes.kv_bytes_per_token(cfg)
        overhead = ENGINE_OVERHEAD + model_shapes.weight_bytes(cfg)
        extra = {"load_format": "dummy", "skip_tokenizer_init": True}
    tokens = max(b * (INPUT_LEN + length) for b, length in shapes)
    kv = int(tokens * kv_per_token * 1.04)
    if engines * (kv + overhead) > gpu_budget:
        raise PlanError(
            f"{engines} engines x ({kv / 2**30:.1f} GiB of KV cache for {tokens} tokens + "
            f"{overhead / 2**30:.0f} GiB) do not fit the GPU ({gpu_budget / 2**30:.0f} GiB):"
            " ask for fewer variants or smaller shapes"
        )
    return {
        "max_model_len": INPUT_LEN + max(length for _, length in shapes),
        "max_num_seqs": max(b for b, _ in shapes),
        "gpu_memory_utilization": 0.2,
        "kv_cache_memory_bytes": kv,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="series patched")
    parser.add_argument("--shapes", default="64x2048")
    parser.add_argument("--pristine-shapes", default="64x2048")
    parser.add_argument("--sampling", default="plain pen")
    parser.add_argument("--series", default="switch", choices=sorted(SERIES_SITES))
    parser.add_argument("--unseeded", action="store_true", help="no per-request seeds")
    parser.add_argument("--gpu-gib", type=float, default=GPU_BUDGET / 2**30, help="for all engines")
    parser.add_argument(
        "--gpu-each",
        help="CUDA device ids, comma-separated: one GPU per variant (--gpu-gib then per GPU)",
    )
    parser.add_argument(
        "--in-turn", action="store_true", help="engines take turns on one GPU, each alone"
    )
    parser.add_argument(
        "--model-shape", help=f"dummy weights of this shape ({', '.join(model_shapes.SHAPES)})"
    )
    parser.add_argument("--out-args", type=Path, required=True, help="one argument per line")
    args = parser.parse_args(argv)
    items = plan(
        args.variants.split(),
        parse_shapes(args.shapes),
        parse_shapes(args.pristine_shapes),
        args.sampling.split(),
        args.series,
        seeded=not args.unseeded,
        gpu_budget=int(args.gpu_gib * 2**30),
        gpu_each=[g for g in args.gpu_each.split(",") if g] if args.gpu_each is not None else None,
        in_turn=args.in_turn,
        model_shape=args.model_shape,
    )
    args.out_args.write_text("\n".join(items) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
