"""GPU check: OutputTokensTensorBuilder's pinned, double-buffered CUDA staging.

The CPU equivalence tests drive the CUDA branch with a host stand-in for the copy and its
events; only a GPU shows whether a staging buffer is refilled while its H2D copy is still
queued. This script takes the builder classes (OutputTokensTensorBuilder and, from patch 0007
on, _StagingRows) out of the patched vllm/v1/sample/ops/penalties.py with `ast` (no vLLM
install needed), and on a CUDA device:

1. stress: many builds in a row without host synchronization while a large matmul keeps the
   stream busy, so H2D copies are still queued when the host refills staging buffers; rows
   grow (with -1 placeholders), are truncated (rejection / KV-load discard, reported through
   `invalidate` when the builder has it) and swap places; every device tensor must equal the
   reference built from the Python lists at that step (pad = vocab_size, -1 -> vocab_size);
2. control: the same stress with the copy-done events disabled must show corruption, which
   proves that the stress test can see a race;
3. timing: per-step host time of the upstream list path (a reimplementation of
   make_tensor_with_pad + pin + non_blocking H2D + masked_fill_) vs the builder, B=128.

Usage: python3 scripts/gpu_check_penalty_staging.py
           [--penalties .gpu/overlay/0.22.0/patched/vllm/v1/sample/ops/penalties.py] [--out F]
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time

import numpy as np
import torch

VOCAB = 151_936


DEFAULT_PENALTIES = ".gpu/overlay/0.22.0/patched/vllm/v1/sample/ops/penalties.py"
BUILDER_CLASSES = ("OutputTokensTensorBuilder", "_StagingRows")


def load_builder(path: str):
    """The builder classes of a patched penalties.py, executed without the rest of vLLM."""
    text = open(path).read()
    nodes = [
        n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name in BUILDER_CLASSES
    ]
    if not any(n.name == "OutputTokensTensorBuilder" for n in nodes):
        raise SystemExit(f"{path} has no OutputTokensTensorBuilder (not the patched file?)")
    src = "\n\n".join(ast.get_source_segment(text, n) for n in nodes)
    ns = {"np": np, "torch": torch}
    exec(compile("from __future__ import annotations\n" + src, path, "exec"), ns)
    return ns["OutputTokensTensorBuilder"]


def reference(outputs):
    max_len = max(map(len, outputs), default=0)
    arr = np.full((len(outputs), max_len), VOCAB, dtype=np.int64)
    for i, row in enumerate(outputs):
        arr[i, : len(row)] = row
    t = torch.from_numpy(arr)
    return t.masked_fill_(t == -1, VOCAB)


def upstream_path(outputs, device):
    """What 0.22.0's _convert_to_tensors + masked_fill_ do (pinned, non_blocking)."""
    max_len = max(map(len, outputs), default=0)
    arr = np.full((len(outputs), max_len), VOCAB, dtype=np.int64)
    for i, row in enumerate(outputs):
        arr[i, : len(row)] = row
    t = torch.from_numpy(arr).pin_memory().to(device, non_blocking=True)
    return t.masked_fill_(t == -1, VOCAB)


class Batch:
    def __init__(self, builder_cls, b, length, device, rng, width):
        self.tok = rng.integers(0, VOCAB, (b, width), dtype=np.int32)
        self.prompt = rng.integers(1, 64, b).astype(np.int32)
        self.ntok = self.prompt.copy()
        self.outputs = [[] for _ in range(b)]
        self.rng = rng
        for _ in range(length):
            self.append()
        self.builder = builder_cls(self.tok, self.prompt, self.ntok, self.outputs, device, True)

    def invalidate(self, i: int) -> None:
        """What InputBatch.add_request / the KV-load discard report (patch 0007 on)."""
        hook = getattr(self.builder, "invalidate", None)
        if hook is not None:
            hook(i)

    def shrink(self, i: int, drop: int) -> None:
        keep = max(0, len(self.outputs[i]) - drop)
        del self.outputs[i][keep:]
        self.ntok[i] = self.prompt[i] + keep
        self.invalidate(i)

    def swap(self, i: int, j: int) -> None:
        """InputBatch.swap_states: lists and token rows change places."""
        self.outputs[i], self.outputs[j] = self.outputs[j], self.outputs[i]
        self.tok[[i, j]] = self.tok[[j, i]]
        self.prompt[[i, j]] = self.prompt[[j, i]]
        self.ntok[[i, j]] = self.ntok[[j, i]]

    def append_row(self, i: int) -> None:
        t = int(self.rng.integers(0, VOCAB))
        pos = int(self.ntok[i])
        self.tok[i, pos] = t
        self.ntok[i] = pos + 1
        self.outputs[i].append(t)

    def append(self, placeholder_frac=0.0):
        new = self.rng.integers(0, VOCAB, len(self.outputs))
        new[self.rng.random(len(new)) < placeholder_frac] = -1
        for i, t in enumerate(new.tolist()):
            pos = int(self.ntok[i])
            self.tok[i, pos] = t
            self.ntok[i] = pos + 1
            self.outputs[i].append(t)


def stress(builder_cls, device, steps, disable_events=False):
    rng = np.random.default_rng(1)
    # Row 3 nets +5 tokens at every discard-and-regrow (step % 11 == 5) on top of one per step.
    width = 64 + 300 + steps + 5 * (steps // 11 + 1) + 8
    batch = Batch(builder_cls, 64, 300, device, rng, width=width)
    if disable_events:
        orig = batch.builder._get_staging

        def no_wait(*args):
            batch.builder._copy_done = [None] * len(batch.builder._copy_done)
            return orig(*args)

        batch.builder._get_staging = no_wait
    a = torch.randn(8192, 8192, device=device)
    outs, refs = [], []
    for step in range(steps):
        batch.append(placeholder_frac=0.05)
        if step % 7 == 0:  # rejection-like shrink of a few rows
            for i in range(0, 64, 9):
                batch.shrink(i, 3)
        if step % 11 == 5:  # KV-load discard, then the row grows back before the next build
            batch.shrink(3, 40)
            for _ in range(45):
                batch.append_row(3)
        if step % 13 == 6:  # condense / reorder
            batch.swap(1, 62)
        for _ in range(3):
            a = a @ a  # keep the stream busy so the H2D copies queue up
            a = a / a.norm()
        t = batch.builder.build(batch.outputs, VOCAB, device)
        assert t is not None
        outs.append(t.clone())  # clone on the stream, after the H2D copy
        refs.append(reference(batch.outputs))
    torch.cuda.synchronize()
    bad = sum(not torch.equal(o.cpu(), r) for o, r in zip(outs, refs, strict=True))
    staging = [getattr(b, "tokens", b) for b in batch.builder._buffers]
    pinned = all(t is None or t.is_pinned() for t in staging)
    return {
        "steps": steps,
        "mismatched_steps": bad,
        "staging_pinned": pinned,
        "num_buffers": len(batch.builder._buffers),
    }


def timing(builder_cls, device, lengths, steps):
    rows = []
    for length in lengths:
        rng = np.random.default_rng(length)
        batch = Batch(builder_cls, 128, length, device, rng, width=64 + length + 2 * steps + 8)
        t_up, t_pa = [], []
        for step in range(steps):
            batch.append()
            torch.cuda.synchronize()
            for which in (0, 1) if step % 2 else (1, 0):
                t0 = time.perf_counter()
                if which == 0:
                    x = upstream_path(batch.outputs, device)
                else:
                    x = batch.builder.build(batch.outputs, VOCAB, device)
                t1 = time.perf_counter()
                (t_up if which == 0 else t_pa).append(t1 - t0)
                del x
        up, pa = 1e3 * statistics.median(t_up[1:]), 1e3 * statistics.median(t_pa[1:])
        rows.append({"L": length, "upstream_host_ms": up, "patched_host_ms": pa, "ratio": up / pa})
        print(f"L={length}: upstream {up:.3f} ms, patched {pa:.3f} ms, {up / pa:.1f}x", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--penalties", default=DEFAULT_PENALTIES, help="patched penalties.py")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    builder_cls = load_builder(args.penalties)
    device = torch.device("cuda")
    result = {
        "command": " ".join(["python3", *sys.argv]),
        "penalties": args.penalties,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }
    result["stress"] = stress(builder_cls, device, 200)
    print("stress:", result["stress"], flush=True)
    result["control_no_events"] = stress(builder_cls, device, 200, disable_events=True)
    print("control (events disabled):", result["control_no_events"], flush=True)
    result["timing_B128"] = timing(builder_cls, device, (1024, 4096, 12288), 12)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    ok = (
        result["stress"]["mismatched_steps"] == 0
        and result["stress"]["staging_pinned"]
        and result["control_no_events"]["mismatched_steps"] > 0
    )
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
