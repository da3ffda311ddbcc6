"""GPU-only check of the fused penalty kernel candidate against upstream's dense math in torch.

No vLLM needed: upstream's apply_penalties with its CUDA repetition op written out in torch
(`tests/test_penalties_fused_kernel.py::upstream_apply_penalties`). Times both interleaved
(CUDA-synchronized wall time per call, median of steps) and compares the results bit for bit.
The comparison against vLLM's compiled op itself is the micro step's 003-apply job.

    python3 scripts/gpu_bench_penalties_fused.py --out $OUT/penalties_fused.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

import torch

# Compiled kernels: the test module's TRITON_INTERPRET=1 default must not apply here.
os.environ["TRITON_INTERPRET"] = "0"
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "scripts" / "kernels"))

from bench_penalties_apply import VOCAB, _time, inputs  # noqa: E402
from penalties_fused import apply_penalties_fused  # noqa: E402

from tests.test_penalties_fused_kernel import upstream_apply_penalties  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--lengths", default="256,4096,12288")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for length in map(int, args.lengths.split(",")):
        # The inputs of bench_penalties_apply (penalties 1.5 / 0.5 / 1.1), on the GPU.
        logits, *rest = inputs(args.batch, args.prompt_len, length, dev, seed=length)
        fns = {"dense": upstream_apply_penalties, "fused": apply_penalties_fused}
        times: dict[str, list[float]] = {k: [] for k in fns}
        identical = True
        for step in range(args.steps + 2):
            outs = {}
            for name in list(fns) if step % 2 else list(fns)[::-1]:
                x = logits.clone()
                t = _time(lambda fn=fns[name], x=x, rest=rest: fn(x, *rest), dev)
                if step >= 2:
                    times[name].append(t)
                outs[name] = x
            identical &= torch.equal(
                outs["dense"].view(torch.int32), outs["fused"].view(torch.int32)
            )
        row = {
            "L": length,
            "dense_ms": 1e3 * statistics.median(times["dense"]),
            "fused_ms": 1e3 * statistics.median(times["fused"]),
            "dense_over_fused": statistics.median(
                d / f for d, f in zip(times["dense"], times["fused"], strict=True)
            ),
            "bit_identical": identical,
            "steps": len(times["dense"]),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "command": "python3 " + " ".join(sys.argv),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "params": {"batch": args.batch, "prompt_len": args.prompt_len, "vocab": VOCAB,
                       "penalties": [1.5, 0.5, 1.1]},
            "results": rows,
        }, indent=1))  # fmt: skip
    return 0 if all(r["bit_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
