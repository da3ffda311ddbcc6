"""The plan of the engine-level resolution proof on the GPU (scripts/gpu_engine_aa.sh):
the `python -m verify.ab engine` arguments of three engines of the official bundle measuring
one config, and the run's meta (vLLM version read from the bundle, the checkout's series).

    pristine, pristine2   the bundle twice: the A/A control
    planted               pristine + a host sleep per Scheduler.schedule call, or a GPU spin
                          per step (--plant-gpu-us: the plant for GPU-bound 8B-class shapes)
                          (verify/ab/plant)
    only-NNNN, at-NNNN    (--patch) the bundle with that overlay root of the carried series
                          (verify.gpu_overlay --only-patch / --at-patch), compared with
                          pristine (only-) or with the at- root before it, in the same rounds
                          as the controls

KV cache and limits come from verify.gpu.penalty_plan.engine_args (the largest shape held
without preemption; a plan whose engines do not fit the GPU together is refused).

    python3 -m verify.gpu.engine_aa --shape 64x1024 --plant-ms 0.1 --out-args ARGS --meta META

Standard library only at import (runs on the device with nothing but the bundle)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
from pathlib import Path

from verify.gpu import device, penalty_plan
from verify.gpu.device import SITES
from verify.gpu.penalty_plan import GPU_BUDGET, config_name, engine_args, parse_shapes
from verify.series import series_hash

VARIANTS = ("pristine", "pristine2", "planted")
#: greedy, and the penalty A/B's samplings (plain is temperature 1; presence-k20p95 is the
#: sampling Qwen3.5's card recommends)
SAMPLINGS = {"greedy": {"temperature": 0.0}, **penalty_plan.SAMPLINGS}
ASYNC = {"default": None, "1": True, "0": False}
#: Where `python -m verify.gpu_overlay` packs the series (carried to the device as .gpu/overlay).
OVERLAY = Path(".gpu/overlay")


def plan(
    batch: int,
    output_len: int,
    plant_ms: float,
    sampling: str = "plain",
    async_scheduling: bool | None = None,
    gpu_budget: int = GPU_BUDGET,
    model_shape: str | None = None,
    plant_gpu_us: float | None = None,
    plant_both: bool = False,
    plant_spin: bool = False,
    patches: tuple[str, ...] = (),
    input_len: int | None = None,
    sites: Path = SITES,
) -> list[str]:
    """The engine front-end's arguments (one per item): the three variants, one config, the
    A/A and planted comparisons, engine arguments (`async_scheduling` None: the pin's default).
    `plant_gpu_us`: the planted variant spins the GPU this long per step instead of sleeping
    `plant_ms` on the host; `plant_spin`: the host wait is a busy wait that keeps the GIL (not
    a sleep); `model_shape`: dummy weights of a verify.gpu.shapes shape; `patches`: overlay
    roots measured beside the controls (their import roots under `sites`); `input_len`:
    prompt tokens (the front-end's default when None)."""
    if sampling not in SAMPLINGS:
        raise SystemExit(f"sampling {sampling!r}: expected one of {list(SAMPLINGS)}")
    delay = plant_ms if plant_gpu_us is None else plant_gpu_us
    if delay <= 0:
        raise SystemExit(f"planted delay {delay}: expected a delay above 0")
    name = config_name(sampling, batch, output_len)
    config = {"batch": batch, "output_len": output_len, **SAMPLINGS[sampling]}
    if input_len is not None:
        config["input_len"] = input_len
    args = ["--variant=pristine=", "--variant=pristine2="]
    if plant_gpu_us is None:
        args += [f"--variant=planted=plant,PATCHBENCH_PLANT_DELAY_MS={plant_ms:g}"]
    elif plant_both:  # the step grows by it whether the host or the GPU is its critical path
        ms = plant_gpu_us / 1000
        args += [f"--variant=planted=plant,PATCHBENCH_PLANT_DELAY_MS={ms:g},"
                 f"PATCHBENCH_PLANT_GPU_US={plant_gpu_us:g}"]  # fmt: skip
    else:
        args += [f"--variant=planted=plant,PATCHBENCH_PLANT_GPU_US={plant_gpu_us:g}"]
    if plant_spin:
        args[-1] += ",PATCHBENCH_PLANT_SPIN=1"
    args += [f"--config={name}={json.dumps(config)}"]
    args += [f"--variant={patch}={sites / patch}" for patch in patches]
    pairs = [("pristine", twin) for twin in ("pristine2", "planted")] + patch_pairs(patches)
    args += [f"--compare={base}/{name}:{variant}/{name}" for base, variant in pairs]
    engines = len(VARIANTS) + len(patches)
    engine = engine_args(engines, [(batch, output_len)], gpu_budget, model_shape)
    if async_scheduling is not None:
        engine["async_scheduling"] = async_scheduling
    return args + [f"--engine-args={json.dumps(engine)}"]


def patch_pairs(patches: tuple[str, ...]) -> list[tuple[str, str]]:
    """(baseline, variant) per overlay root: only-NNNN against pristine, at-NNNN against the
    at- root listed before it (the patch on top of its base)."""
    bad = [p for p in patches if not re.fullmatch(r"(only|at)-\d{4}", p)]
    if bad:
        raise SystemExit(f"--patch {bad}: expected only-NNNN or at-NNNN (overlay roots)")
    pairs, base = [], None
    for patch in patches:
        if patch.startswith("only-"):
            pairs.append(("pristine", patch))
        elif base is not None:
            pairs.append((base, patch))
        base = patch if patch.startswith("at-") else base
    return pairs


def bundle_version() -> str:
    """The release of the vLLM on PYTHONPATH (the bundle), without a local version."""
    return importlib.metadata.version("vllm").split("+")[0]


def meta(
    command: str,
    plant_ms: float,
    overlay: Path = OVERLAY,
    model_shape: str | None = None,
    plant_gpu_us: float | None = None,
) -> dict:
    """What the record says of the run besides the front-end's own: the vLLM version of the
    bundle on PYTHONPATH, the checkout's series hash (none of its patches runs here) and, where
    the carried overlay packs that series, its per-patch diff hashes (read_series needs git,
    which the device lacks)."""
    version = bundle_version()
    out = {
        "vllm_version": version,
        "series_hash": series_hash(version),
        "command": command,
        "runner": "the pin's default (workers[...].model_runner says which)",
        "model": model_shape or "qwen3-0.6b-random",
        "weights": "vLLM dummy" if model_shape else "random (transformers init)",
    }
    if plant_gpu_us is None:
        out["planted_delay_ms"] = plant_ms
    else:
        out["planted_gpu_delay_us"] = plant_gpu_us
    packed = overlay / version
    if (packed / "SERIES_HASH").is_file() and (packed / "PATCH_HASHES.json").is_file():
        if (packed / "SERIES_HASH").read_text().strip() == out["series_hash"]:
            out["patch_hashes"] = json.loads((packed / "PATCH_HASHES.json").read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="64x1024", help="BxL: batch x output tokens")
    parser.add_argument("--plant-ms", type=float, default=0.1, help="sleep per schedule call")
    parser.add_argument("--sampling", default="plain", choices=sorted(SAMPLINGS))
    parser.add_argument("--async-scheduling", default="default", choices=sorted(ASYNC))
    parser.add_argument("--gpu-gib", type=float, default=GPU_BUDGET / 2**30, help="for all engines")
    parser.add_argument("--command", default="bash scripts/gpu_engine_aa.sh", help="for the record")
    parser.add_argument("--overlay", type=Path, default=OVERLAY, help="for the patch hashes")
    parser.add_argument(
        "--plant-gpu-us", type=float, help="GPU spin per step instead of the host sleep"
    )
    parser.add_argument(
        "--plant-both", action="store_true", help="the --plant-gpu-us delay on the host too"
    )
    parser.add_argument(
        "--plant-spin", action="store_true", help="the host wait busy-waits (keeps the GIL)"
    )
    parser.add_argument("--model-shape", help="dummy weights of a verify.gpu.shapes shape")
    parser.add_argument(
        "--patch",
        action="append",
        default=[],
        help="an overlay root measured beside the controls (only-NNNN, at-NNNN; repeatable)",
    )
    parser.add_argument("--input-len", type=int, help="prompt tokens (default: the front-end's)")
    parser.add_argument("--base-site", type=Path, help="the bundle's site the roots copy")
    parser.add_argument("--build-model", action="store_true", help="build /tmp/pb-model first")
    parser.add_argument("--out-args", type=Path, required=True, help="one argument per line")
    parser.add_argument("--meta", type=Path, required=True, help="the record's meta (JSON)")
    args = parser.parse_args(argv)
    (batch, output_len), *more = parse_shapes(args.shape)
    if more:
        raise SystemExit(f"--shape {args.shape!r}: one BxL shape")
    items = plan(
        batch,
        output_len,
        args.plant_ms,
        args.sampling,
        ASYNC[args.async_scheduling],
        int(args.gpu_gib * 2**30),
        args.model_shape,
        args.plant_gpu_us,
        args.plant_both,
        args.plant_spin,
        tuple(args.patch),
        args.input_len,
    )
    if args.build_model and args.model_shape:
        from verify.gpu import shapes

        shapes.write(args.model_shape, shapes.model_dir(args.model_shape))
    elif args.build_model:
        device.build_model()
    if args.patch:
        device.build_sites(args.overlay / bundle_version(), set(args.patch), args.base_site, SITES)
    args.out_args.write_text("\n".join(items) + "\n")
    record = meta(args.command, args.plant_ms, args.overlay, args.model_shape, args.plant_gpu_us)
    record["patches_measured"] = args.patch
    args.meta.write_text(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
