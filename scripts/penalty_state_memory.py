"""Bytes of MRV2's penalty statistics, the pin against its series: `PenaltiesState` built in
both import roots of the build tree (CPU tensors: the sizes the GPU allocates), the patched one
after `add_request` of k penalty requests, for max_num_seqs 256 and 1024 and vocab 151936
(Qwen3) and 262144. KV cache tokens freed: the bytes saved over Qwen3-8B's KV bytes per token.

    python scripts/penalty_state_memory.py 0.22.0 --out results/cpu/0.22.0/penalty-state-memory.json
    python scripts/penalty_state_memory.py 0.33.0 --out results/cpu/0.33.0/penalty-state-memory.json

Runs in the equivalence environment (torch, triton, the pin's requirements: `nox -s
equivalence-<pin> --install-only`, then its python).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from verify.equivalence import host_buffers  # noqa: E402
from verify.equivalence.roots import ImportRoot, roots  # noqa: E402
from verify.gpu_overlay import patch_hashes  # noqa: E402
from verify.results import host_facts  # noqa: E402
from verify.series import series_hash  # noqa: E402

SHAPES = [(256, 151_936), (1024, 151_936), (256, 262_144), (1024, 262_144)]
PENALTY_REQUESTS = [0, 1, 8, 64, 256, 1024]
#: Qwen3-8B's KV cache bytes per token in bf16: 36 layers x 8 KV heads x 128 x (K, V) x 2 bytes.
KV_BYTES_PER_TOKEN = 36 * 8 * 128 * 2 * 2


def state_bytes(root, max_num_reqs: int, vocab: int, penalized: int) -> dict:
    """Device bytes of a fresh PenaltiesState after `penalized` penalty requests were added."""
    with root.active():
        host_buffers.install()
        pen = importlib.import_module("vllm.v1.worker.gpu.sample.penalties")
        req_states = SimpleNamespace(
            max_num_reqs=max_num_reqs, vocab_size=vocab, device=torch.device("cpu")
        )
        if "vllm_config" in inspect.signature(pen.PenaltiesState).parameters:
            # A LogitsProcessor (v0.33.0); PenaltiesState reads nothing of the config.
            state = pen.PenaltiesState(None, req_states)
        else:
            state = pen.PenaltiesState(req_states)
        params = SimpleNamespace(
            repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=1.5
        )
        for req_idx in range(penalized):
            state.add_request(req_idx, params)
        tensors = (state.output_bin_counts, state.prompt_bin_mask)
        return {
            "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "rows": state.output_bin_counts.shape[0],
        }


#: Modules of a root that may define the kernel warm-up's penalty requests (by pin).
WARMUP_MODULES = ("vllm.v1.worker.gpu.warmup", "vllm.v1.worker.gpu.sample.penalties")


def warmup_requests(root) -> int | None:
    """WARMUP_PENALTY_REQS of the root's warm-up (the rows it leaves allocated), or None where
    the warm-up gives every request penalties (the pin's own)."""
    with root.active():
        host_buffers.install()
        for name in WARMUP_MODULES:
            found = getattr(importlib.import_module(name), "WARMUP_PENALTY_REQS", None)
            if found is not None:
                return found
    return None


def measure_root(path: Path, requests: list[int]) -> dict:
    """{"shapes": {"N V k": state bytes}, "warmup": warm-up penalty requests} of one root after
    k of `requests` penalty requests, in this process (one vLLM root per process)."""
    root = ImportRoot(path, path.name)
    shapes = {
        f"{n} {v} {k}": state_bytes(root, n, v, k) for n, v in SHAPES for k in requests if k <= n
    }
    return {"shapes": shapes, "warmup": warmup_requests(root)}


def _in_child(path: Path, requests: list[int]) -> dict:
    cmd = [sys.executable, __file__, "--measure-root", str(path), "--requests",
           ",".join(map(str, requests))]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # vLLM logs to stdout before it


def measure(version: str) -> tuple[list[dict], int | None]:
    """(a row per shape and k, the patched warm-up's penalty requests)."""
    pristine_root, patched_root = roots(version)
    pristine = _in_child(pristine_root.path, [0])["shapes"]  # the pin allocates at start-up
    child = _in_child(patched_root.path, PENALTY_REQUESTS)
    patched = child["shapes"]
    rows = []
    for key, new in patched.items():
        max_num_reqs, vocab, k = map(int, key.split())
        base = pristine[f"{max_num_reqs} {vocab} 0"]
        freed = base["bytes"] - new["bytes"]
        rows.append({
            "max_num_reqs": max_num_reqs, "vocab": vocab, "penalty_requests": k,
            "pristine_bytes": base["bytes"], "patched_bytes": new["bytes"],
            "patched_rows": new["rows"], "kv_tokens_freed": freed // KV_BYTES_PER_TOKEN,
        })  # fmt: skip
        print(f"max_num_reqs {max_num_reqs} vocab {vocab} k {k}: {base['bytes']} -> "
              f"{new['bytes']} bytes ({new['rows']} rows)")  # fmt: skip
    return rows, child["warmup"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version", nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--measure-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--requests", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_root:
        requests = [int(k) for k in args.requests.split(",")]
        print(json.dumps(measure_root(args.measure_root, requests)))
        return 0
    if not (args.version and args.out):
        parser.error("give VERSION and --out FILE")
    run = {
        "format": "penalty-state-memory/1",
        "command": " ".join(["python scripts/penalty_state_memory.py", *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {**host_facts(), "torch": torch.__version__},
        "vllm_version": args.version,
        "series_hash": series_hash(args.version),
        "patch_hashes": patch_hashes(args.version),
        "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
        "kv_model": "qwen3-8b (36 layers, 8 KV heads, head 128, bf16)",
    }
    run["rows"], run["warmup_penalty_requests"] = measure(args.version)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(run, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
