#!/usr/bin/env python3
"""0011's penalty kernel (one `penalty_state.py`) at several output lengths, timed side by side
in the same rounds: the penalty path's host time per step must not grow with L.

    python3 scripts/gpu_penalty_state_length_bench.py --source now=FILE \\
        --out $OUT/gpu/micro-penalty-state-length.json

Each length is one "variant" of a shape (B rows, prompt P, positive penalties), the shortest the
baseline, so the timers of verify/gpu/kernel_timers.py interleave them (order rotated every
round). GPU and eager time grow with L by design (the kernel walks the listed ids); host time
per call must not. Rows: {variant (the length), baseline, shape, vocab, graph_us, eager_us,
host_us} with per-round medians, as in verify/verdicts/kernel.py (outputs differ by design).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_kernel_bench as kb  # noqa: E402
import gpu_penalty_state_bench as psb  # noqa: E402


def length_fns(cls, device, rows: int, prompt_len: int, lengths: list[int]) -> dict:
    """{"L=<n>": the penalty kernel of a state whose rows generated n tokens}."""
    fns = {}
    for length in lengths:
        one, _ = psb.apply_case({f"L={length}": cls}, device, rows, prompt_len, length, False)
        fns.update(one)
    return fns


def parse_args(argv=None):
    """--source NAME=FILE, then gpu_penalty_state_bench.py's options (--out, --lengths,
    --prompt-lens, --batch, --rounds and the timer counts)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", required=True, help="NAME=penalty_state.py")
    own, rest = p.parse_known_args(argv)
    args = psb.parse_args(["--variant", own.source, *rest])
    args.source = own.source
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA: host time per call of a CUDA launch")
    name, cls = psb.load(args.source)
    device = torch.device("cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device)
    cyc = kb.sleep_cycles_per_us()
    rows, t0, baseline = [], time.time(), f"L={args.lengths[0]}"
    for prompt_len in args.prompt_lens:
        fns = length_fns(cls, device, args.batch, prompt_len, args.lengths)
        timings = psb.time_case(fns, args, flush, cyc)
        shape = f"apply ({name}), {args.batch} rows, prompt {prompt_len}, positive penalties"
        rows += [
            {"variant": v, "baseline": baseline, "shape": shape, "vocab": psb.VOCAB,
             "bench": "length", **t}
            for v, t in timings.items()
        ]  # fmt: skip
        medians = {v: {k: statistics.median(x) for k, x in t.items()} for v, t in timings.items()}
        print(f"[{time.time() - t0:5.0f}s] {shape}: {json.dumps(medians)}", flush=True)
        del fns
    psb.write_run(args.out, "penalty-state-length", [args.source], rows, True, kb.machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
