#!/usr/bin/env python3
"""V1 device penalty state (0.22.0 patch 0011), two forms side by side, timed the way the
model runner calls them: `record_sampled` (after each sampling step), `PenaltyState.apply`
(the sampler's call: the penalty kernel on float32 CUDA logits) and a decode step's pair of
them (`step`: apply, then record_sampled; a form that counts a step's ids in the next penalty
launch does one launch per step there).

    python3 scripts/gpu_penalty_state_bench.py --variant old=FILE --variant new=FILE \\
        --out $OUT/gpu/micro-penalty-state.json

Each FILE is a `vllm/v1/sample/ops/penalty_state.py` (e.g. from `git show` of two commits of
the build tree); its vLLM imports are replaced by triton and a float32-CUDA test, so no vLLM
is needed. Timers come from verify/gpu/kernel_timers.py (GPU time in a CUDA graph, eager time
with L2 flushed, host time per call; variants alternate, rounds rotate the order). Every shape
first checks that the variants produce the same counts (record) and the same logit bits
(apply); a mismatch stops the run. The first --variant is the baseline of the others; rows
follow the kernel raw-data contract of verify/verdicts/kernel.py (per-round medians).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_kernel_bench as kb  # noqa: E402

VOCAB = 151936
MAX_NUM_REQS = 256
PENALTIES = (1.5, 0.5, 1.1)  # presence, frequency, repetition
VLLM_IMPORTS = {
    "from vllm.triton_utils import tl, triton\n": "",
    "from vllm.v1.sample.ops.penalties import _penalize_in_one_pass\n": (
        "def _penalize_in_one_pass(logits):\n"
        "    return logits.dtype == torch.float32 and logits.is_contiguous()\n"
    ),
}


def load(spec: str):
    """NAME=FILE -> (name, the file's PenaltyState class)."""
    name, _, path = spec.partition("=")
    source = Path(path).read_text()
    for old, new in VLLM_IMPORTS.items():
        if old not in source:
            raise SystemExit(f"{path}: expected the line {old.strip()!r}")
        source = source.replace(old, new)
    return name, kb._module_from_source(source, f"penalty_state_{name}").PenaltyState


def make_state(cls, device, rows: int, with_slot: list[bool], prompt_len: int, output_len: int):
    """A state of `rows` batch rows (those of `with_slot` have penalties), rebuilt from random
    prompt and output ids (seeded: every variant gets the same history)."""
    rng = np.random.default_rng(rows * 1000 + prompt_len + output_len)
    state = cls(MAX_NUM_REQS, VOCAB, device, device.type == "cuda")
    for row in range(rows):
        prompt = rng.integers(0, VOCAB, prompt_len)
        output = rng.integers(0, VOCAB, output_len).tolist()
        state.add_row(row, prompt, output, with_slot[row])
    state.flush()
    return state


def record_fn(state, sampled, discard, rows):
    if "any_discarded" in state.record_sampled.__code__.co_varnames:
        return lambda: state.record_sampled(sampled, discard, rows, any_discarded=False)
    return lambda: state.record_sampled(sampled, discard, rows)


def counts(state, rows: int) -> torch.Tensor:
    getattr(state, "record_pending", lambda: None)()  # ids a form keeps pending, counted
    slots = torch.from_numpy(state.row_slot[:rows].astype(np.int64))
    table = state.state[slots.clamp(min=0).to(state.state.device), :VOCAB].cpu()
    return table[slots >= 0]


def record_case(classes, device, rows: int, share: float):
    """(fns, check) of record_sampled at `rows` rows, `share` of them with penalties."""
    with_slot = [i < round(rows * share) for i in range(rows)]
    states = {n: make_state(c, device, rows, with_slot, 32, 0) for n, c in classes.items()}
    g = torch.Generator().manual_seed(rows)
    sampled = torch.randint(0, VOCAB, (rows, 1), dtype=torch.int32, generator=g).to(device)
    discard = torch.zeros(MAX_NUM_REQS, dtype=torch.bool, device=device)
    fns = {n: record_fn(s, sampled, discard, rows) for n, s in states.items()}
    for f in fns.values():  # the same three calls each, then the counts must agree
        for _ in range(3):
            f()
    tables = {n: counts(s, rows) for n, s in states.items()}
    first = next(iter(tables.values()))
    same = all(torch.equal(t, first) for t in tables.values())
    return fns, same


def apply_case(classes, device, rows: int, prompt_len: int, output_len: int, dense: bool):
    """(fns, check) of the penalty kernel on [rows, VOCAB] float32 logits."""
    with_slot = [True] * rows
    states = {
        n: make_state(c, device, rows, with_slot, prompt_len, output_len)
        for n, c in classes.items()
    }
    g = torch.Generator().manual_seed(output_len)
    logits = torch.randn(rows, VOCAB, generator=g).to(device)
    presence = -PENALTIES[0] if dense else PENALTIES[0]  # a sign bit: every logit is touched
    pens = [torch.full((rows,), p, device=device) for p in (presence, *PENALTIES[1:])]
    outs = {n: s.apply(logits.clone(), *pens) for n, s in states.items()}
    bits = [o.view(torch.int32) for o in outs.values()]
    same = all(torch.equal(b, bits[0]) for b in bits)
    work = {n: logits.clone() for n in states}
    fns = {n: (lambda s=s, w=work[n]: s.apply(w, *pens)) for n, s in states.items()}
    return fns, same


def step_case(classes, device, rows: int, prompt_len: int, output_len: int):
    """(fns, check) of a decode step's penalty path: apply on [rows, VOCAB] float32 logits,
    then record_sampled of the same ids; three steps each must leave the same logits and
    counts in every variant."""
    with_slot = [True] * rows
    states = {
        n: make_state(c, device, rows, with_slot, prompt_len, output_len)
        for n, c in classes.items()
    }
    g = torch.Generator().manual_seed(output_len + 1)
    logits = torch.randn(rows, VOCAB, generator=g).to(device)
    sampled = torch.randint(0, VOCAB, (rows, 1), dtype=torch.int32, generator=g).to(device)
    keep = torch.zeros(MAX_NUM_REQS, dtype=torch.bool, device=device)
    pens = [torch.full((rows,), p, device=device) for p in PENALTIES]
    work = {n: logits.clone() for n in states}

    def step(state, out):
        state.apply(out, *pens)
        record_fn(state, sampled, keep, rows)()

    outs = {}
    for n, state in states.items():
        for _ in range(3):
            outs[n] = logits.clone()
            step(state, outs[n])
    bits = [o.view(torch.int32) for o in outs.values()]
    tables = [counts(state, rows) for state in states.values()]
    same = all(torch.equal(b, bits[0]) for b in bits)
    same = same and all(torch.equal(t, tables[0]) for t in tables)
    fns = {n: (lambda s=s, w=work[n]: step(s, w)) for n, s in states.items()}
    return fns, same


def time_case(fns: dict, args, flush, cyc) -> dict:
    """{variant: {graph_us, eager_us, host_us}}: per-round medians, order rotated."""
    names = list(fns)
    graphs = {n: kb.capture([fns[n]], args.graph_calls) for n in names}
    out = {n: dict(graph_us=[], eager_us=[], host_us=[]) for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            out[n]["graph_us"].append(kb.time_graph(graphs[n], args.graph_calls, args.replays))
        eager = kb.time_eager(fns, order, flush, args.eager_samples)
        host = kb.time_host(fns, order, args.host_calls, cyc)
        for n in order:
            out[n]["eager_us"].append(eager[n])
            out[n]["host_us"].append(host[n])
    return {n: {k: [round(x, 2) for x in v] for k, v in t.items()} for n, t in out.items()}


def case_label(case: dict) -> str:
    if case["bench"] == "record":
        return f"record_sampled, {case['rows']} rows, {case['penalty_share']:.0%} with penalties"
    if case["bench"] == "step":
        return (
            f"step (apply, then record_sampled), {case['rows']} rows, prompt "
            f"{case['prompt_len']}, output {case['output_len']}, positive penalties"
        )
    kind = "negative presence (every logit)" if case["dense"] else "positive penalties"
    return (
        f"apply, {case['rows']} rows, prompt {case['prompt_len']}, output {case['output_len']},"
        f" {kind}"
    )


def kernel_rows(case: dict, timings: dict, baseline: str) -> list[dict]:
    """The kernel raw-data contract (verify/verdicts/kernel.py): one row per variant."""
    return [
        {"variant": name, "baseline": baseline, "shape": case_label(case), "vocab": VOCAB,
         "bench": case["bench"], "identical": True, **times}
        for name, times in timings.items()
    ]  # fmt: skip


def cases(args):
    for rows in args.record_rows:
        for share in (1.0, 0.5):
            yield dict(bench="record", rows=rows, penalty_share=share)
    for length in args.lengths:
        for prompt_len in args.prompt_lens:
            yield dict(bench="apply", rows=args.batch, prompt_len=prompt_len, output_len=length,
                       dense=False)  # fmt: skip
    yield dict(bench="apply", rows=args.batch, prompt_len=32, output_len=args.lengths[-1],
               dense=True)  # fmt: skip
    for rows in args.step_rows:
        for length in args.lengths:
            yield dict(bench="step", rows=rows, prompt_len=32, output_len=length)


def build(case: dict, classes, device):
    if case["bench"] == "record":
        return record_case(classes, device, case["rows"], case["penalty_share"])
    if case["bench"] == "step":
        return step_case(classes, device, case["rows"], case["prompt_len"], case["output_len"])
    return apply_case(classes, device, case["rows"], case["prompt_len"], case["output_len"],
                      case["dense"])  # fmt: skip


def write_run(out: Path, kind: str, specs: list[str], rows: list, timed: bool, machine: dict):
    """Write the run's JSON to `out`: provenance, each NAME=FILE spec's path and sha256 (the
    importer matches it with the build tree's file), and the rows."""
    result = {
        "kind": kind,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "machine": machine,
        "vocab": VOCAB,
        "timed": timed,
        "variants": {
            name: {"path": path, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
            for name, _, path in (spec.partition("=") for spec in specs)
        },
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", action="append", required=True, help="NAME=penalty_state.py")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--record-rows", type=lambda s: [int(x) for x in s.split(",")],
                   default=[8, 64, 256])  # fmt: skip
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                   default=[256, 2048, 8192])  # fmt: skip
    p.add_argument("--prompt-lens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[32, 512])  # fmt: skip
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--step-rows", type=lambda s: [int(x) for x in s.split(",")],
                   default=[32, 64])  # fmt: skip
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--graph-calls", type=int, default=20)
    p.add_argument("--replays", type=int, default=20)
    p.add_argument("--eager-samples", type=int, default=30)
    p.add_argument("--host-calls", type=int, default=500)
    p.add_argument("--check-only", action="store_true", help="no timers (e.g. on a CPU)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    classes = dict(load(v) for v in args.variant)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    timed = not args.check_only and device.type == "cuda"
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if timed else None
    cyc = kb.sleep_cycles_per_us() if timed else 0.0
    rows, t0, baseline = [], time.time(), next(iter(classes))
    for case in cases(args):
        fns, same = build(case, classes, device)
        if not same:
            raise SystemExit(f"{case}: the variants disagree; nothing timed")
        timings = time_case(fns, args, flush, cyc) if timed else {n: {} for n in classes}
        rows += kernel_rows(case, timings, baseline)
        medians = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in timings.items()}
        print(f"[{time.time() - t0:5.0f}s] {case_label(case)}: {json.dumps(medians)}", flush=True)
        del fns
    machine = kb.machine() if device.type == "cuda" else {"device": "cpu"}
    write_run(args.out, "penalty-state-micro", args.variant, rows, timed, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
