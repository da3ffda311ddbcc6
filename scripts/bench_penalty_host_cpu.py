"""Microbenchmark of the V1 penalties' per-step sampler host work vs generated length.

Measures, for a decode batch of B requests that have each generated L tokens:

* penalties: building the padded [B, L] output-token tensor that `apply_all_penalties`
  feeds to `apply_penalties` -- pristine `_convert_to_tensors` (+ the -1 mask fill) vs
  patched `OutputTokensTensorBuilder.build` reading `InputBatch.token_ids_cpu`;
* think scan: `ThinkingBudgetStateHolder.update_state` for B requests that are still
  thinking (no end marker yet) -- pristine full rescan vs patched watermark scan.

Each step appends one token per request (not timed) and then times one call; pristine
and patched calls are interleaved in the same process. The penalty math itself
(`apply_penalties` on [B, vocab] logits) is identical in both and not timed.

Usage (from the repo root):
    python scripts/bench_penalty_host_cpu.py --pin 0.22.0 [--out results/cpu/0.22.0/bench_003.json]
Roots: the build tree's pristine tag and HEAD (verify.equivalence.roots), or the
PATCHBENCH_PRISTINE_ROOT / PATCHBENCH_PATCHED_ROOT overrides.

On the GPU machine (``--device cuda --patched-files SITE``): the installed vLLM is the pristine
root, and the patched ``penalties.py`` / ``thinking_budget_state.py`` are loaded from SITE as
extra module files inside that same vLLM (two full roots would load the compiled extension
twice). Both files import only modules the series leaves unchanged, which is checked. The
builders then target the GPU as in the engine (pinned host memory, non-blocking copy): the
table reports the host time of the call and, separately, the time until the copy is done.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from verify.equivalence.registrations import custom_ops_once, opaque_types_once  # noqa: E402
from verify.results import cpu_model  # noqa: E402

if TYPE_CHECKING:
    from verify.equivalence.roots import ImportRoot

VOCAB = 151_936
PROMPT_LEN = 512
END_MARKER = [151_668]  # Qwen3 </think>
START_MARKER = [151_667]  # Qwen3 <think>


# Files of the 0.22.0 series that bench modules must not import when loaded as extra files.
SERIES_FILES = (
    "vllm/v1/sample/metadata.py",
    "vllm/v1/sample/sampler.py",
    "vllm/v1/worker/gpu_input_batch.py",
)
FILE_MODULES = {
    "vllm.v1.sample.ops.penalties": "vllm/v1/sample/ops/penalties.py",
    "vllm.v1.sample.thinking_budget_state": "vllm/v1/sample/thinking_budget_state.py",
}


class InstalledRoot:
    """The installed vLLM as the pristine root (no sys.modules swapping)."""

    label = "installed vllm"

    def __init__(self) -> None:
        import vllm

        self.path = Path(vllm.__file__).parent.parent

    @contextlib.contextmanager
    def active(self):
        yield self

    def load(self, dotted: str):
        return importlib.import_module(dotted)


class FileOverlayRoot(InstalledRoot):
    """Patched modules loaded from SITE's files under private names, inside the installed vLLM."""

    label = "patched files"

    def __init__(self, site: Path) -> None:
        self.path = site
        self._mods: dict[str, object] = {}

    def load(self, dotted: str):
        if dotted not in FILE_MODULES:
            return importlib.import_module(dotted)  # unchanged by the series
        if dotted not in self._mods:
            path = self.path / FILE_MODULES[dotted]
            for line in path.read_text().splitlines():
                for changed in SERIES_FILES:
                    if line.startswith(("from ", "import ")) and (
                        changed[:-3].replace("/", ".") + " " in line + " "
                    ):
                        raise SystemExit(f"{path} imports {changed}, which the series changes")
            name = "patchbench_patched." + dotted
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            self._mods[dotted] = module
        return self._mods[dotted]


if TYPE_CHECKING:
    Root = InstalledRoot | ImportRoot  # either kind of import root


class PenaltyBatch:
    def __init__(self, batch: int, length: int, rng: np.random.Generator, extra: int):
        self.width = PROMPT_LEN + length + extra
        self.token_ids = rng.integers(0, VOCAB, (batch, self.width), dtype=np.int32)
        self.num_prompt = np.full(batch, PROMPT_LEN, dtype=np.int32)
        self.num_tokens = np.full(batch, PROMPT_LEN + length, dtype=np.int32)
        self.outputs = [
            self.token_ids[i, PROMPT_LEN : PROMPT_LEN + length].tolist() for i in range(batch)
        ]
        self.rng = rng

    def append(self) -> None:
        new = self.rng.integers(0, VOCAB, len(self.outputs)).tolist()
        for i, tok in enumerate(new):
            pos = int(self.num_tokens[i])
            self.token_ids[i, pos] = tok
            self.num_tokens[i] = pos + 1
            self.outputs[i].append(tok)


DONE: list[float] = []  # per timed call: seconds until the device copy finished (cuda)


def _time(fn) -> float:
    """Host time of fn(); on CUDA also appends the time until its copies are done to DONE."""
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    if torch.cuda.is_available() and DEVICE.type == "cuda":
        torch.cuda.synchronize()
        DONE.append(time.perf_counter() - t0)
    return t1 - t0


DEVICE = torch.device("cpu")


def bench_penalties(pr_pen, pa_pen, pristine, patched, batch, length, steps, rng):
    pb = PenaltyBatch(batch, length, rng, extra=steps + 1)
    pin = DEVICE.type == "cuda"
    builder = pa_pen.OutputTokensTensorBuilder(
        pb.token_ids, pb.num_prompt, pb.num_tokens, pb.outputs, DEVICE, pin
    )

    def run_pristine():
        t = pr_pen._convert_to_tensors(pb.outputs, VOCAB, DEVICE)
        t.masked_fill_(t == -1, VOCAB)
        return t

    def run_patched():
        t = builder.build(pb.outputs, VOCAB, DEVICE)
        assert t is not None
        return t

    with patched.active():  # warm-up (allocates the staging buffer)
        run_patched()
    t_pr, t_pa, d_pr, d_pa = [], [], [], []
    for step in range(steps):
        pb.append()
        if step == 0:
            with pristine.active():
                ref = run_pristine().clone()
            with patched.active():
                assert torch.equal(run_patched(), ref), "patched tensor differs"
            continue
        order = ((pristine, run_pristine, t_pr, d_pr), (patched, run_patched, t_pa, d_pa))
        for root, fn, times, done in order if step % 2 else order[::-1]:
            with root.active():
                times.append(_time(fn))
            if DONE:
                done.append(DONE.pop())
    return t_pr, t_pa, d_pr, d_pa


def bench_think(pr_tbs, pa_tbs, pr_if, pa_if, pristine, patched, batch, length, steps, rng):
    cfg = SimpleNamespace(
        reasoning_start_token_ids=START_MARKER, reasoning_end_token_ids=END_MARKER
    )
    # Thinking requests: the prompt ends with <think>, budget larger than any L.
    prompt = rng.integers(0, 1000, PROMPT_LEN).tolist() + START_MARKER
    holders = []
    outputs = [rng.integers(0, 1000, length).tolist() for _ in range(batch)]
    for root, mod, _iface in ((pristine, pr_tbs, pr_if), (patched, pa_tbs, pa_if)):
        with root.active():
            h = mod.ThinkingBudgetStateHolder(cfg, batch, 0, DEVICE, DEVICE.type == "cuda")
            h.sync_batch(
                SimpleNamespace(
                    batch_size=batch,
                    removed=[],
                    added=[
                        (i, SimpleNamespace(thinking_token_budget=10**9), prompt, outputs[i])
                        for i in range(batch)
                    ],
                    moved=[],
                )
            )
            h.update_state(outputs, None)  # first step: both scan everything once
        holders.append((root, h))
    t_pr, t_pa = [], []
    for step in range(steps):
        new = rng.integers(0, 1000, batch).tolist()
        for out, tok in zip(outputs, new, strict=False):
            out.append(tok)
        order = holders if step % 2 else holders[::-1]
        for root, h in order:
            with root.active():
                dt = _time(lambda h=h: h.update_state(outputs, None))
            DONE.clear()
            (t_pr if root is pristine else t_pa).append(dt)
    states = [h._state for _, h in holders]
    for idx, ref in states[0].items():
        for key, value in ref.items():
            assert states[1][idx][key] == value, (idx, key)
    return t_pr, t_pa


def _series_hash(pin: str) -> str:
    from verify.series import series_hash

    return series_hash(pin)


class Modules(NamedTuple):
    """The pristine (pr_) and patched (pa_) vLLM modules the benchmark calls."""

    pr_pen: ModuleType
    pa_pen: ModuleType
    pr_tbs: ModuleType
    pa_tbs: ModuleType
    pr_if: ModuleType
    pa_if: ModuleType


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pin", default="0.22.0")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lengths", default="256,1024,4096,12288")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per L (0: auto)")
    ap.add_argument(
        "--out", default=None, help="JSON path (default results/cpu/PIN/bench_003.json)"
    )
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the GPU machine)")
    ap.add_argument(
        "--patched-files",
        type=Path,
        help="GPU machine: pristine = the installed vLLM, patched files from this site",
    )
    return ap.parse_args()


def open_roots(args: argparse.Namespace) -> tuple[Root, Root, bool]:
    """(pristine, patched, whether the PATCHBENCH_*_ROOT overrides are set), ready to load."""
    # Single intra-op thread: on the shared machine, waking torch's OpenMP pool between
    # steps costs ~20 ms per tiny op and would swamp the pristine timings.
    if DEVICE.type == "cpu":
        torch.set_num_threads(1)
    opaque_types_once()
    overrides = bool(
        os.environ.get("PATCHBENCH_PRISTINE_ROOT") and os.environ.get("PATCHBENCH_PATCHED_ROOT")
    )
    if args.patched_files:
        return InstalledRoot(), FileOverlayRoot(args.patched_files), overrides
    from verify.equivalence.roots import roots

    pristine, patched = roots(args.pin)
    for root in (pristine, patched):
        with root.active():
            custom_ops_once(importlib.import_module("vllm.utils.torch_utils"), torch.ops)
    return pristine, patched, overrides


def load_modules(pristine: Root, patched: Root) -> Modules:
    """Both roots' penalties, thinking-budget and logits-processor interface modules."""
    pr_pen = pristine.load("vllm.v1.sample.ops.penalties")
    pa_pen = patched.load("vllm.v1.sample.ops.penalties")
    for mod in (pr_pen, pa_pen):  # no accelerator: do not pin the upstream tensor
        if DEVICE.type == "cuda":
            break
        if hasattr(mod, "is_pin_memory_available"):
            mod.is_pin_memory_available = lambda: False
        if hasattr(mod, "PIN_MEMORY"):
            mod.PIN_MEMORY = False
    pr_tbs = pristine.load("vllm.v1.sample.thinking_budget_state")
    pa_tbs = patched.load("vllm.v1.sample.thinking_budget_state")
    pr_if = pristine.load("vllm.v1.sample.logits_processor.interface")
    pa_if = patched.load("vllm.v1.sample.logits_processor.interface")
    return Modules(pr_pen, pa_pen, pr_tbs, pa_tbs, pr_if, pa_if)


def measure_length(
    mods: Modules,
    pristine: Root,
    patched: Root,
    args: argparse.Namespace,
    length: int,
    rng: np.random.Generator,
) -> dict:
    """One results row: both benchmarks at generated length `length`, then its progress line."""
    # At least 9 steps: the double-buffered CUDA staging reallocates (width doubles) on the
    # first two timed steps after the warm-up, so with fewer steps the median is a refill.
    steps = args.steps or max(9, min(21, 60_000 // length))
    p_pr, p_pa, pd_pr, pd_pa = bench_penalties(
        mods.pr_pen, mods.pa_pen, pristine, patched, args.batch, length, steps, rng
    )
    think_steps = args.steps or max(3, min(11, 20_000 // length))
    think = (mods.pr_tbs, mods.pa_tbs, mods.pr_if, mods.pa_if)
    k_pr, k_pa = bench_think(*think, pristine, patched, args.batch, length, think_steps, rng)
    row = {
        "L": length,
        "penalties_steps": len(p_pr),
        "penalties_pristine_ms": 1e3 * statistics.median(p_pr),
        "penalties_patched_ms": 1e3 * statistics.median(p_pa),
        "penalties_pristine_mean_ms": 1e3 * statistics.fmean(p_pr),
        "penalties_patched_mean_ms": 1e3 * statistics.fmean(p_pa),
        "think_steps": len(k_pr),
        "think_pristine_ms": 1e3 * statistics.median(k_pr),
        "think_patched_ms": 1e3 * statistics.median(k_pa),
    }
    if pd_pr:
        row["penalties_pristine_done_ms"] = 1e3 * statistics.median(pd_pr)
        row["penalties_patched_done_ms"] = 1e3 * statistics.median(pd_pa)
    row["penalties_ratio"] = row["penalties_pristine_ms"] / row["penalties_patched_ms"]
    row["think_ratio"] = row["think_pristine_ms"] / row["think_patched_ms"]
    print(
        f"L={length}: penalties {row['penalties_pristine_ms']:.3f} -> "
        f"{row['penalties_patched_ms']:.3f} ms, think {row['think_pristine_ms']:.3f} -> "
        f"{row['think_patched_ms']:.3f} ms",
        flush=True,
    )
    return row


def print_table(rows: list[dict], batch: int) -> None:
    """The summary table of medians and ratios (and, on CUDA, the times until copy done)."""
    print()
    print(f"B={batch}, median ms per step (pristine vs patched, interleaved)")
    hdr = f"{'L':>6} | {'pen pristine':>12} {'pen patched':>11} {'ratio':>7} | "
    hdr += f"{'think pristine':>14} {'think patched':>13} {'ratio':>8}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(
            f"{r['L']:>6} | {r['penalties_pristine_ms']:>12.3f} {r['penalties_patched_ms']:>11.3f} "
            f"{r['penalties_ratio']:>6.1f}x | {r['think_pristine_ms']:>14.3f} "
            f"{r['think_patched_ms']:>13.3f} {r['think_ratio']:>7.1f}x"
        )
    if DEVICE.type == "cuda":
        print("until the device copy is done (ms): L pristine patched")
        for r in rows:
            print(
                f"{r['L']:>6} {r['penalties_pristine_done_ms']:>9.3f} "
                f"{r['penalties_patched_done_ms']:>9.3f}"
            )


def result_record(
    args: argparse.Namespace,
    lengths: list[int],
    pristine: Root,
    patched: Root,
    overrides: bool,
    rows: list[dict],
) -> dict:
    """The JSON record of the run."""
    return {
        "benchmark": "bench_penalty_host_cpu" if DEVICE.type == "cpu" else "bench_penalty_host_gpu",
        "device": str(DEVICE),
        "gpu": torch.cuda.get_device_name(0) if DEVICE.type == "cuda" else None,
        "seed": "003",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pin": args.pin,
        # The build tree's series (the roots are made from it); None for --patched-files runs,
        # whose overlay records its own hash.
        "series_hash": None if args.patched_files else _series_hash(args.pin),
        "roots": {
            "pristine": str(pristine.path),
            "patched": str(patched.path),
            "env_overrides": overrides,
        },
        "versions": {
            "vllm": args.pin,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "machine": {
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "note": "shared 2-core machine; other jobs may run concurrently"
            if DEVICE.type == "cpu"
            else "lent GPU machine's host CPU",
        },
        "params": {
            "batch": args.batch,
            "prompt_len": PROMPT_LEN,
            "vocab_size": VOCAB,
            "lengths": lengths,
            "torch_threads": torch.get_num_threads(),
            "statistic": "median over timed steps (at least 8; *_mean_ms: mean incl. staging "
            "reallocations), one token appended per request per step",
            "penalties_timed": "output-token tensor build incl. -1 -> pad mapping, host time"
            + ("" if DEVICE.type == "cpu" else "; *_done_ms: until the device copy is done"),
            "think_timed": "ThinkingBudgetStateHolder.update_state, all requests thinking",
        },
        "results": rows,
    }


def main() -> int:
    """Run both benchmarks at each L, print the table and write the JSON record."""
    args = parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    lengths = [int(x) for x in args.lengths.split(",")]
    out_path = Path(args.out or REPO / "results" / "cpu" / args.pin / "bench_003.json")
    pristine, patched, overrides = open_roots(args)
    mods = load_modules(pristine, patched)
    rng = np.random.default_rng(0)
    rows = [measure_length(mods, pristine, patched, args, length, rng) for length in lengths]
    print_table(rows, args.batch)
    result = result_record(args, lengths, pristine, patched, overrides, rows)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
