"""A/B of two versions of the V1 penalty output-token builder (`OutputTokensTensorBuilder.build`).

Loads `OutputTokensTensorBuilder` from two `penalties.py` files into the installed vLLM (each
under a private module name) and drives both with the same decode batch: every step appends
one token per request and, with --async-placeholders (the engine's async scheduling), a -1
placeholder that the next step replaces. The two builds are timed interleaved (order
alternating) and their tensors compared at every step.

    python scripts/bench_penalty_staging_ab.py --a OLD/penalties.py --b NEW/penalties.py \\
        --batch 64 --lengths 256,4096 --steps 200 --async-placeholders --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verify import stats  # noqa: E402
from verify.results import host_facts  # noqa: E402

VOCAB = 151_936
PROMPT_LEN = 512


def load_builder(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"patchbench_ab.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.OutputTokensTensorBuilder


class Batch:
    """A persistent batch of `batch` rows that have generated `length` tokens each."""

    def __init__(self, batch: int, length: int, steps: int, rng: np.random.Generator):
        width = PROMPT_LEN + length + steps + 8
        self.token_ids = np.zeros((batch, width), dtype=np.int32)
        self.token_ids[:, : PROMPT_LEN + length] = rng.integers(
            0, VOCAB, (batch, PROMPT_LEN + length)
        )
        self.num_prompt = np.full(batch, PROMPT_LEN, dtype=np.int32)
        self.num_tokens = np.full(batch, PROMPT_LEN + length, dtype=np.int32)
        self.outputs = [
            self.token_ids[i, PROMPT_LEN : PROMPT_LEN + length].tolist() for i in range(batch)
        ]
        self.rng = rng

    def step(self, placeholders: bool) -> None:
        new = self.rng.integers(0, VOCAB, len(self.outputs)).tolist()
        for i, tok in enumerate(new):
            row, pos = self.outputs[i], int(self.num_tokens[i])
            if placeholders and row and row[-1] == -1:
                pos -= 1
                row[-1] = tok  # the previous step's placeholder gets its sampled id
            else:
                row.append(tok)
            self.token_ids[i, pos] = tok
            pos += 1
            if placeholders:
                row.append(-1)
                self.token_ids[i, pos] = -1
                pos += 1
            self.num_tokens[i] = pos


def ratio_ci(a: list[float], b: list[float]) -> tuple[float, float | None, float | None]:
    """Paired ratio a/b per step through verify.stats (geometric mean, log-scale 95% interval)."""
    r = stats.paired_ratio(b, a)
    return r.ratio, r.low, r.high


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="baseline penalties.py")
    ap.add_argument("--b", type=Path, required=True, help="candidate penalties.py")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lengths", default="256,4096")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--async-placeholders", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--series-hash", help="series the b side belongs to (for the record)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    device = torch.device(args.device)
    builders = {"a": load_builder(args.a, "a"), "b": load_builder(args.b, "b")}
    rows = []
    for length in map(int, args.lengths.split(",")):
        batch = Batch(args.batch, length, args.steps, np.random.default_rng(length))
        made = {
            k: cls(
                batch.token_ids,
                batch.num_prompt,
                batch.num_tokens,
                batch.outputs,
                device,
                pin_memory=device.type == "cuda",
            )
            for k, cls in builders.items()
        }
        times: dict[str, list[float]] = {"a": [], "b": []}
        mismatches = 0
        for step in range(args.steps + 5):
            batch.step(args.async_placeholders)
            got = {}
            for k in ("a", "b") if step % 2 == 0 else ("b", "a"):
                t0 = time.perf_counter()
                got[k] = made[k].build(batch.outputs, VOCAB, device)
                elapsed = time.perf_counter() - t0
                if step >= 5:  # first builds copy whole rows
                    times[k].append(elapsed)
            if device.type == "cuda":
                torch.cuda.synchronize()
            mismatches += not torch.equal(got["a"], got["b"])
        m, lo, hi = ratio_ci(times["a"], times["b"])
        row = {
            "L": length,
            "a_ms_median": statistics.median(times["a"]) * 1e3,
            "b_ms_median": statistics.median(times["b"]) * 1e3,
            "a_over_b": m,
            "ci95": [lo, hi],
            "steps": len(times["a"]),
            "mismatched_steps": mismatches,
        }
        rows.append(row)
        print(
            f"L={length:6d}: a {row['a_ms_median']:.3f} ms  b {row['b_ms_median']:.3f} ms  "
            f"a/b {m:.2f} [{lo:.2f}, {hi:.2f}]  mismatched steps {mismatches}",
            flush=True,
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "command": "python " + " ".join(sys.argv),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "series_hash": args.series_hash,
                    "machine": host_facts(),
                    "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
                    "torch": torch.__version__,
                    "params": vars(args)
                    | {"a": str(args.a), "b": str(args.b), "out": str(args.out)},
                    "results": rows,
                },
                indent=1,
            )
        )
    return 0 if all(r["mismatched_steps"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
