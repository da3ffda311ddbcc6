"""A/B microbenchmark of 0.22.0 patch 0008: dense vs sparse penalty math.

For a decode batch of B rows with a P-token prompt and L output tokens each (Qwen3 vocabulary,
pads and repeated ids as in real text), times the penalty math alone on already-built
tensors: upstream's dense path (bin counts [B, V+1] for prompt and output, repetition
penalty, frequency and presence subtraction over [B, V]) against the patched sparse path.
Calls are interleaved (order alternates per step) in one process; every step also checks that
both results are equal. Reports medians and the dense / sparse ratio per L.

Functions are taken from source files with `ast` (no vLLM import needed on CPU):
    python scripts/bench_penalties_apply.py --pin 0.22.0            # build tree roots
    python scripts/bench_penalties_apply.py --device cuda \\
        --pristine-utils SITE/vllm/model_executor/layers/utils.py \\
        --patched-penalties .gpu/overlay/0.22.0/patched/vllm/v1/sample/ops/penalties.py
On CUDA the dense path uses vLLM's compiled repetition-penalty op (`vllm._custom_ops`, so the
bundle must be importable); on CPU it uses the torch fallback from the pristine _custom_ops.py.
`--one-pass` (CUDA only) adds 0010's `apply_penalties_one_pass` from the patched file as a third
variant, the path the patched engine takes on CUDA; it must equal the dense path bit for bit
(on CPU the dense path multiplies by 1/penalty and the patch keeps it there).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from verify import sparse_penalties  # noqa: E402
from verify.results import host_facts  # noqa: E402

VOCAB = 151_936


def _functions(path: Path, names: set[str], namespace: dict) -> dict:
    """Execute the named top-level functions (and module constants) of `path` in `namespace`."""
    tree = ast.parse(path.read_text())
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name in names)
        or (
            isinstance(node, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.startswith("_SPARSE") for t in node.targets)
        )
    ]
    missing = names - {n.name for n in keep if isinstance(n, ast.FunctionDef)}
    if missing:
        raise SystemExit(f"{path}: no {', '.join(sorted(missing))}")
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def load(pristine_utils: Path, custom_ops: Path | None, patched_penalties: Path, device: str):
    if device == "cuda":
        from vllm import _custom_ops  # the bundle's compiled op, as in the engine
    else:
        ns = _functions(custom_ops, {"apply_repetition_penalties_torch"}, {"torch": torch})
        _custom_ops = types.ModuleType("vllm._custom_ops")
        _custom_ops.apply_repetition_penalties = ns["apply_repetition_penalties_torch"]
        sys.modules.setdefault("vllm", types.ModuleType("vllm"))
        sys.modules["vllm._custom_ops"] = _custom_ops
    dense = _functions(
        pristine_utils, {"get_token_bin_counts_and_mask", "apply_penalties"}, {"torch": torch}
    )["apply_penalties"]
    sparse = _functions(patched_penalties, {"apply_penalties_at_token_ids"}, {"torch": torch})[
        "apply_penalties_at_token_ids"
    ]
    return dense, sparse


def load_one_pass(patched_penalties: Path):
    """0010's `apply_penalties_one_pass` and its Triton kernel, from the patched file."""
    import triton
    import triton.language as tl

    names = {"_apply_penalties_kernel", "apply_penalties_one_pass"}
    namespace = {"torch": torch, "triton": triton, "tl": tl}
    return _functions(patched_penalties, names, namespace)["apply_penalties_one_pass"]


def inputs(batch: int, prompt_len: int, length: int, device: torch.device, seed: int):
    g = torch.Generator().manual_seed(seed)
    # Text-like ids: a 4096-id working set per row, so ids repeat.
    pool = torch.randint(0, VOCAB, (batch, 4096), generator=g)
    prompt = pool.gather(1, torch.randint(0, 4096, (batch, prompt_len), generator=g))
    output = pool.gather(1, torch.randint(0, 4096, (batch, length), generator=g))
    prompt[batch // 2 :, prompt_len // 2 :] = VOCAB  # shorter prompts are padded
    logits = torch.randn(batch, VOCAB, generator=g)
    pres = torch.full((batch,), 1.5)
    freq = torch.full((batch,), 0.5)
    rep = torch.full((batch,), 1.1)
    return [t.to(device) for t in (logits, prompt, output, pres, freq, rep)]


def _time(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pin", default="0.22.0")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--pristine-utils", type=Path)
    ap.add_argument("--pristine-custom-ops", type=Path)
    ap.add_argument("--patched-penalties", type=Path)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--lengths", default="256,1024,4096,8192")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument(
        "--one-pass", action="store_true", help="add 0010's one-pass Triton path (CUDA)"
    )
    ap.add_argument("--out", type=Path)
    return ap.parse_args()


def resolve_sources(args: argparse.Namespace) -> str | None:
    """Fill in the source files `args` leaves out (from the build tree's roots); the series
    hash when the roots were used, else None."""
    series_hash = None
    if not (args.pristine_utils and args.patched_penalties):
        from verify.equivalence.roots import materialize
        from verify.series import series_hash as _hash

        pristine_root, patched_root = materialize(args.pin)
        args.pristine_utils = pristine_root / "vllm/model_executor/layers/utils.py"
        args.pristine_custom_ops = pristine_root / "vllm/_custom_ops.py"
        args.patched_penalties = patched_root / "vllm/v1/sample/ops/penalties.py"
        series_hash = _hash(args.pin)
    if args.device == "cpu" and args.pristine_custom_ops is None:
        args.pristine_custom_ops = args.pristine_utils.parents[2] / "_custom_ops.py"
    return series_hash


def load_variants(args: argparse.Namespace) -> dict[str, Callable]:
    """{variant name: penalty function}: dense, sparse and, with --one-pass, one_pass."""
    dense, sparse = load(
        args.pristine_utils, args.pristine_custom_ops, args.patched_penalties, args.device
    )
    variants = {"dense": dense, "sparse": sparse}
    if args.one_pass:
        if args.device != "cuda":
            raise SystemExit("--one-pass needs --device cuda (the patch takes it on CUDA only)")
        variants["one_pass"] = load_one_pass(args.patched_penalties)
    return variants


def measure(
    variants: dict[str, Callable], args: argparse.Namespace, length: int, device: torch.device
) -> tuple[dict[str, list[float]], bool]:
    """({variant: seconds per timed step}, one_pass bit-identical to dense at every step) at
    output length `length`; exits when sparse differs from dense."""
    base = inputs(args.batch, args.prompt_len, length, device, seed=length)
    times: dict[str, list[float]] = {name: [] for name in variants}
    one_pass_equal = True
    for step in range(args.steps + 1):
        names = list(variants)
        names = names[step % len(names) :] + names[: step % len(names)]  # rotate the order
        out = {}
        for name in names:
            logits = base[0].clone()
            fn = variants[name]
            t = _time(lambda fn=fn, logits=logits, rest=base[1:]: fn(logits, *rest), device)
            out[name] = logits
            if step:  # step 0 warms up
                times[name].append(t)
        if not torch.equal(out["dense"], out["sparse"]):
            raise SystemExit(f"L={length}: sparse result differs from dense")
        if "one_pass" in out:
            one_pass_equal &= torch.equal(
                out["one_pass"].view(torch.int32), out["dense"].view(torch.int32)
            )
    return times, one_pass_equal


def summary_row(length: int, times: dict[str, list[float]], one_pass_equal: bool) -> dict:
    """The results row of one L: medians, median per-step ratios and the per-step times."""
    t_dense, t_sparse = times["dense"], times["sparse"]
    row = {
        "L": length,
        "steps": len(t_dense),
        "dense_ms": 1e3 * statistics.median(t_dense),
        "sparse_ms": 1e3 * statistics.median(t_sparse),
        "ratio_median_of_steps": statistics.median(
            d / s for d, s in zip(t_dense, t_sparse, strict=True)
        ),
        "equal": True,
        # per-step times (ms): verify.sparse_penalties judges the paired ratios offline
        **{f"{name}_ms_steps": [1e3 * t for t in ts] for name, ts in times.items()},
    }
    if "one_pass" in times:
        row["one_pass_ms"] = 1e3 * statistics.median(times["one_pass"])
        row["dense_over_one_pass_median_of_steps"] = statistics.median(
            d / f for d, f in zip(t_dense, times["one_pass"], strict=True)
        )
        row["one_pass_bit_identical"] = one_pass_equal
    return row


def print_row(row: dict) -> None:
    """The progress line of one results row."""
    print(
        f"L={row['L']:6d}: dense {row['dense_ms']:9.3f} ms  sparse {row['sparse_ms']:8.3f} ms  "
        f"dense/sparse {sparse_penalties.speedup(row, 'sparse').text(2)}"
        + (
            f"  one-pass {row['one_pass_ms']:8.3f} ms"
            f" {row['dense_over_one_pass_median_of_steps']:5.1f}x"
            f" bit-identical {row['one_pass_bit_identical']}"
            if "one_pass_ms" in row
            else ""
        ),
        flush=True,
    )


def result_record(args: argparse.Namespace, series_hash: str | None, rows: list[dict]) -> dict:
    """The JSON record of the run."""
    return {
        "benchmark": "bench_penalties_apply",
        "patch": f"{args.pin} apply penalties at token ids (0.22.0: 0008)"
        + (" and in one Triton pass (0.22.0: 0010)" if args.one_pass else ""),
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "series_hash": series_hash,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "machine": host_facts(),
        "torch": torch.__version__,
        "params": {
            "batch": args.batch,
            "prompt_len": args.prompt_len,
            "vocab_size": VOCAB,
            "timed": "penalty math on built tensors (bin counts + repetition + frequency + "
            "presence), one call per step, the variants interleaved; results compared",
        },
        "results": rows,
    }


def main() -> int:
    """Time the variants at each L, print a line per L and write the JSON record (--out)."""
    args = parse_args()
    series_hash = resolve_sources(args)
    device = torch.device(args.device)
    variants = load_variants(args)
    rows = []
    for length in (int(x) for x in args.lengths.split(",")):
        times, one_pass_equal = measure(variants, args, length, device)
        rows.append(summary_row(length, times, one_pass_equal))
        print_row(rows[-1])
    result = result_record(args, series_hash, rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
