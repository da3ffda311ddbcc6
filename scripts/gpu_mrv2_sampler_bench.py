#!/usr/bin/env python3
"""Microbenchmark of the Model Runner V2 ``Sampler.__call__``, pristine vs patched.

Patch 0001 makes ``Sampler.apply_sampling_params`` (``vllm/v1/worker/gpu/sample/sampler.py``)
return the input logits unchanged, skipping an FP32 copy of ``[num_tokens, vocab]``, when no
request in the batch needs logits processing. This times the whole ``sampler(logits,
input_batch)`` call the way ``GPUModelRunner.sample`` makes it (real ``RequestState``,
``Sampler``, ``InputBatch`` and ``vllm.SamplingParams``; bf16 logits, decode step: one logit
per request) for three batch kinds: ``random`` (temperature 1.0, nothing else: the patched
path skips the copy), ``greedy`` (temperature 0: skips too) and ``top_p`` (every request
top_p=0.95: both copy, the ratio should be ~1), plus the copy alone
(``torch.empty_like(logits, dtype=torch.float32).copy_(logits)``: what the patch can save).

Both import roots hold the same compiled ``vllm._C`` and register the same torch ops, so
each variant lives in its own worker process (``PYTHONPATH=<root>``), started once and driven
by JSON lines on stdin; it answers JSON lines on a private copy of its stdout (vLLM's logging
goes to the log file). Rounds alternate the pristine/patched order; every round's result is
written to the JSON at once, so a run cut short keeps what it measured.

    python3 scripts/gpu_mrv2_sampler_bench.py --out $OUT/micro-000.json   # on the GPU machine
    python scripts/gpu_mrv2_sampler_bench.py --device cpu --quick \\
        --pristine-root P --patched-root Q --out /tmp/m000.json            # CPU smoke test

As a ``scripts/gpu_verify.py`` step: ``run(out_dir, meta, {"pristine": p, "patched": q})``
writes ``<out_dir>/micro-000.json`` (worker logs under ``<out_dir>/raw/``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
STEP = "micro-000"
VARIANTS = ("pristine", "patched")
VLLM_VERSION = "0.22.0"
DEFAULT_PRISTINE = Path("/tmp/vllm-bundle/site")
DEFAULT_PATCHED = Path("/tmp/pb-sites/patched")
DEFAULT_OVERLAY = REPO / ".gpu" / "overlay" / VLLM_VERSION

#: Batch kinds: the SamplingParams keyword arguments of every request in the batch.
CONFIGS: dict[str, dict[str, float]] = {
    "random": {"temperature": 1.0},
    "greedy": {"temperature": 0.0},
    "top_p": {"temperature": 1.0, "top_p": 0.95},
}
#: What the patched sampler is expected to do per batch kind.
EXPECT_SKIP = {"random": True, "greedy": True, "top_p": False}

#: Measurement settings per (device, quick).
SETTINGS: dict[tuple[str, bool], dict[str, Any]] = {
    ("cuda", False): {
        "vocab": 151936,
        "batches": [1, 8, 32, 128, 256],
        "rounds": 5,
        "iters": 200,
        "warmup": 20,
        "budget_s": 110.0,
    },
    ("cuda", True): {
        "vocab": 151936,
        "batches": [1, 8, 32, 128, 256],
        "rounds": 2,
        "iters": 30,
        "warmup": 5,
        "budget_s": 110.0,
    },
    ("cpu", False): {
        "vocab": 1024,
        "batches": [1, 8, 32],
        "rounds": 3,
        "iters": 5,
        "warmup": 1,
        "budget_s": 600.0,
    },
    ("cpu", True): {
        "vocab": 1024,
        "batches": [1, 8, 32],
        "rounds": 2,
        "iters": 2,
        "warmup": 1,
        "budget_s": 170.0,
    },
}
CALL_TIMEOUT_S = 90.0  # one command to a worker (first calls compile Triton kernels)
STARTUP_TIMEOUT_S = 150.0  # importing vLLM and building the sampler
CLOSE_MARGIN_S = 8.0  # kept back from the budget to stop the workers and write the JSON


def say(message: str) -> None:
    print(f"[gpu_mrv2_sampler_bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# =============================================================================================
# worker side (a child process; PYTHONPATH = one variant's import root)
class _CpuUvaBuffer:
    """CPU stand-in for ``buffer_utils.UvaBuffer`` (as in test_000): the "UVA" view is the CPU
    tensor itself. Only used with ``--device cpu``."""

    def __init__(self, size: Any, dtype: Any) -> None:
        import torch

        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()
        self.uva = self.cpu


def _install_cpu_stand_ins() -> None:
    """The CPU-only hacks of tests/equivalence/test_mrv2_sampler_logits_copy.py (no accelerator: no
    UVA, no pinned memory, no SM count for the Triton top-k/top-p path)."""
    import importlib

    bu = importlib.import_module("vllm.v1.worker.gpu.buffer_utils")
    bu.UvaBuffer = _CpuUvaBuffer
    h2d = bu.async_tensor_h2d

    def h2d_unpinned(data, dtype, device, pin_memory=False, _f=h2d):
        return _f(data, dtype, device, pin_memory=False)

    bu.async_tensor_h2d = h2d_unpinned
    importlib.import_module("vllm.v1.worker.gpu.sample.penalties").async_tensor_h2d = h2d_unpinned
    st = importlib.import_module("vllm.v1.worker.gpu.sample.states")
    tkp = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
    st.apply_top_k_top_p = tkp.apply_top_k_top_p_pytorch


class _Bench:
    """One variant's sampler state: one RequestState + Sampler (as the model runner holds),
    ``max_batch`` requests per batch kind, one bf16 logits tensor sliced per batch size."""

    MAX_MODEL_LEN = 128

    def __init__(self, device: str, vocab: int, max_batch: int, num_configs: int) -> None:
        import torch

        if device == "cpu":
            _install_cpu_stand_ins()
        from vllm.v1.worker.gpu.sample import sampler as sampler_mod
        from vllm.v1.worker.gpu.states import RequestState

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.vocab = vocab
        self.max_batch = max_batch
        max_num_reqs = max_batch * num_configs
        self.req_states = RequestState(
            max_num_reqs=max_num_reqs,
            max_model_len=self.MAX_MODEL_LEN,
            max_num_batched_tokens=max_num_reqs,
            num_speculative_steps=0,
            vocab_size=vocab,
            device=self.device,
        )
        # Model runner defaults: logprobs_mode "raw_logprobs", num_speculative_tokens 1,
        # use_fp64_gumbel False.
        self.sampler = sampler_mod.Sampler(
            max_num_reqs=max_num_reqs,
            vocab_size=vocab,
            device=self.device,
            req_states=self.req_states,
        )
        self.sampler_file = sampler_mod.__file__
        self.sampler_sha256 = hashlib.sha256(Path(sampler_mod.__file__).read_bytes()).hexdigest()
        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(max_batch, vocab, generator=gen) * 2.0
        self.logits = logits.to(torch.bfloat16).to(self.device)
        self.requests: dict[str, list[int]] = {}
        self.batches: dict[tuple[str, int], Any] = {}

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    # ------------------------------------------------------------------ state
    @staticmethod
    def _prompt_len(i: int) -> int:
        return 16 + (i * 7) % 64

    def _add_requests(self, config: str, params: dict | None = None) -> list[int]:
        """``max_batch`` requests of one kind (``params``: SamplingParams keyword arguments),
        fixed seeds; same order (so the same request indices) in both workers."""
        if config in self.requests:
            return self.requests[config]
        if params is None:
            raise KeyError(f"no requests of kind {config!r} yet: send 'setup' first")
        from vllm.sampling_params import SamplingParams

        idx = []
        for i in range(self.max_batch):
            sp = SamplingParams(max_tokens=512, seed=1000 + i, **params)
            prompt_len = self._prompt_len(i)
            tokens = [(31 * i + 17 * j) % self.vocab for j in range(prompt_len)]
            req_id = f"{config}-{i}"
            self.req_states.add_request(req_id, prompt_len, tokens, prompt_len)
            req_idx = self.req_states.req_id_to_index[req_id]
            self.sampler.add_request(req_idx, prompt_len, sp)
            idx.append(req_idx)
        self.req_states.apply_staged_writes()
        self.sampler.apply_staged_writes()
        self.sync()
        self.requests[config] = idx
        return idx

    def _input_batch(self, config: str, n: int, params: dict | None = None) -> Any:
        """A decode-step InputBatch (one token and one logit per request), built like
        ``InputBatch.make_dummy`` but with the requests' real indices, positions and ids."""
        if (config, n) in self.batches:
            return self.batches[(config, n)]
        import dataclasses
        from types import SimpleNamespace

        import numpy as np
        from vllm.v1.worker.gpu.input_batch import InputBatch

        torch, dev = self.torch, self.device
        idx = self._add_requests(config, params)[:n]
        idx_np = np.asarray(idx, dtype=np.int32)
        idx_t = torch.tensor(idx, dtype=torch.int32, device=dev)
        pos = [self._prompt_len(i) for i in range(n)]  # the first decode step
        positions = torch.tensor(pos, dtype=torch.int64, device=dev)
        input_ids = torch.tensor(
            [(13 * i + 5) % self.vocab for i in range(n)], dtype=torch.int32, device=dev
        )
        ones = np.ones(n, dtype=np.int32)
        qsl_np = np.arange(n + 1, dtype=np.int32)
        fields = dict(
            req_ids=[f"{config}-{i}" for i in range(n)],
            num_reqs=n,
            num_reqs_after_padding=n,
            idx_mapping=idx_t,
            idx_mapping_np=idx_np,
            expanded_idx_mapping=idx_t,
            expanded_local_pos=torch.zeros(n, dtype=torch.int32, device=dev),
            num_scheduled_tokens=ones,
            num_tokens=n,
            num_tokens_after_padding=n,
            num_draft_tokens=0,
            num_draft_tokens_per_req=None,
            query_start_loc=torch.from_numpy(qsl_np).to(dev),
            query_start_loc_np=qsl_np,
            seq_lens=(positions + 1).to(torch.int32),
            seq_lens_cpu_upper_bound=torch.tensor([p + 1 for p in pos], dtype=torch.int32),
            dcp_local_seq_lens=None,
            is_prefilling_np=np.zeros(n, dtype=np.bool_),
            input_ids=input_ids,
            positions=positions,
            logits_indices=torch.arange(n, dtype=torch.int64, device=dev),
            cu_num_logits=torch.arange(n + 1, dtype=torch.int32, device=dev),
            cu_num_logits_np=np.arange(n + 1, dtype=np.int32),
            has_structured_output_reqs=False,
        )
        names = {f.name for f in dataclasses.fields(InputBatch)}
        if names == set(fields):
            batch = InputBatch(**fields)
        else:  # another InputBatch layout: give the sampler the attributes it reads
            batch = SimpleNamespace(**fields)
        self.sync()
        self.batches[(config, n)] = batch
        return batch

    # ------------------------------------------------------------------ ops
    def setup(self, config: str, n: int, params: dict) -> dict:
        """Build the batch, make the first call (its sampled ids are the identity check), and
        ask apply_sampling_params whether it returns the input (copy skipped)."""
        batch = self._input_batch(config, n, params)
        logits = self.logits[:n]
        out = self.sampler(logits, batch)
        self.sync()
        ids = out.sampled_token_ids.view(-1).cpu()
        result: dict[str, Any] = {
            "ids_hash": _ids_hash(ids),
            "first_ids": ids[:8].tolist(),
            "input_batch": type(batch).__name__,
        }
        try:
            processed = self.sampler.apply_sampling_params(
                logits,
                batch.expanded_idx_mapping,
                batch.idx_mapping_np,
                batch.positions[batch.logits_indices],
                batch.input_ids[batch.logits_indices],
                batch.expanded_local_pos,
            )
            result["copy_skipped"] = processed is logits
            result["processed_dtype"] = str(processed.dtype)
        except Exception as exc:  # informational only
            result["copy_skipped"] = None
            result["copy_skipped_error"] = repr(exc)
        return result

    def measure(self, config: str, n: int, iters: int, warmup: int) -> dict:
        batch = self._input_batch(config, n)
        logits = self.logits[:n]
        last: list[Any] = [None]

        def call() -> None:
            last[0] = self.sampler(logits, batch)

        result = self._time(call, iters, warmup)
        result["ids_hash"] = _ids_hash(last[0].sampled_token_ids.view(-1).cpu())
        return result

    def copy_ref(self, n: int, iters: int, warmup: int) -> dict:
        logits = self.logits[:n]
        torch = self.torch

        def call() -> None:
            torch.empty_like(logits, dtype=torch.float32).copy_(logits)

        return self._time(call, iters, warmup)

    def _time(self, fn: Any, iters: int, warmup: int) -> dict:
        """Per call: perf_counter around call + synchronize (wall) and CUDA events (gpu)."""
        torch = self.torch
        for _ in range(warmup):
            fn()
        self.sync()
        wall: list[float] = []
        gpu: list[float] = []
        events = (
            [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))]
            if self.cuda
            else []
        )
        for _ in range(iters):
            if events:
                events[0][0].record()
            t0 = time.perf_counter()
            fn()
            if events:
                events[0][1].record()
            self.sync()
            wall.append((time.perf_counter() - t0) * 1e6)
            if events:
                gpu.append(events[0][0].elapsed_time(events[0][1]) * 1e3)
        out = {
            "wall_us": statistics.median(wall),
            "wall_us_min": min(wall),
            "wall_us_p90": _pct(wall, 90),
            "iters": iters,
        }
        if gpu:
            out["gpu_us"] = statistics.median(gpu)
        return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def _ids_hash(ids: Any) -> str:
    return hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]


def worker(args: argparse.Namespace) -> None:
    """Protocol: one JSON object per stdin line (``op`` + ``seq``); one JSON line back per
    command on the original stdout (fd 1 is redirected to stderr = the log file first)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    t0 = time.perf_counter()
    try:
        import torch

        torch.set_grad_enabled(False)
        bench = _Bench(args.device, args.vocab, args.max_batch, args.num_configs)
        import vllm
        from vllm.platforms import current_platform

        ready = {
            "op": "ready",
            "ok": True,
            "pid": os.getpid(),
            "startup_s": time.perf_counter() - t0,
            "torch": torch.__version__,
            "vllm": getattr(vllm, "__version__", None),
            "vllm_file": vllm.__file__,
            "sampler_file": bench.sampler_file,
            "sampler_sha256": bench.sampler_sha256,
            "has_needs_logits_processing": hasattr(bench.sampler, "needs_logits_processing"),
            "device": torch.cuda.get_device_name(0) if bench.cuda else "cpu",
            "platform": type(current_platform).__name__,
        }
        if args.device == "cpu":
            ready["cpu_stand_ins"] = "CPU UvaBuffer, unpinned h2d, pytorch top-k/top-p"
            ready["triton_interpret"] = os.environ.get("TRITON_INTERPRET")
    except Exception:
        reply({"op": "ready", "ok": False, "error": traceback.format_exc()[-4000:]})
        return
    reply(ready)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request["op"] == "exit":
            break
        response: dict[str, Any] = {"seq": request.get("seq"), "op": request["op"]}
        try:
            with torch.inference_mode():
                if request["op"] == "setup":
                    response.update(
                        bench.setup(request["config"], request["batch"], request["params"])
                    )
                elif request["op"] == "measure":
                    response.update(
                        bench.measure(
                            request["config"], request["batch"], request["iters"], request["warmup"]
                        )
                    )
                elif request["op"] == "copy":
                    response.update(
                        bench.copy_ref(request["batch"], request["iters"], request["warmup"])
                    )
                else:
                    raise ValueError(f"unknown op {request['op']!r}")
            response["ok"] = True
        except Exception:
            response.update(ok=False, error=traceback.format_exc()[-4000:])
            with contextlib.suppress(Exception):
                bench.sync()
        reply(response)


# =============================================================================================
# driver side
class WorkerError(RuntimeError):
    """The worker died, timed out or answered out of protocol: it is no longer usable."""


class Worker:
    """One variant's worker process; JSON lines in on stdin, out on a pipe (read by a thread so
    every wait has a timeout)."""

    def __init__(
        self,
        variant: str,
        root: Path,
        raw: Path,
        device: str,
        vocab: int,
        max_batch: int,
        num_configs: int,
    ) -> None:
        self.variant = variant
        self.log_path = raw / f"{STEP}-{variant}.log"
        self.log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
        if device == "cpu":
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        cmd = [
            sys.executable,
            str(HERE),
            "_worker",
            "--device",
            device,
            "--vocab",
            str(vocab),
            "--max-batch",
            str(max_batch),
            "--num-configs",
            str(num_configs),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.seq = 0
        self.dead: str | None = None
        self.ready: dict | None = None

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return ""

    def _fail(self, why: str) -> WorkerError:
        self.dead = why
        self.kill()
        return WorkerError(f"{self.variant} worker: {why}\n--- log tail ---\n{self._tail()}")

    def receive(self, deadline: float, seq: int | None = None) -> dict:
        waited = time.monotonic()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"no reply after {time.monotonic() - waited:.0f} s (timeout)")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(timeout=5)
                raise self._fail(f"exited with code {self.proc.returncode}")
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # stray output on the protocol pipe
            if seq is None or msg.get("seq") == seq:
                return msg

    def wait_ready(self, deadline: float) -> dict:
        msg = self.receive(deadline)
        if not msg.get("ok"):
            raise self._fail(f"startup failed:\n{msg.get('error')}")
        self.ready = msg
        return msg

    def send(self, op: str, **kwargs: Any) -> int:
        if self.dead:
            raise WorkerError(f"{self.variant} worker is gone: {self.dead}")
        self.seq += 1
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, "seq": self.seq, **kwargs}) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise self._fail(f"stdin closed ({exc})") from exc
        return self.seq

    def call(self, op: str, deadline: float, **kwargs: Any) -> dict:
        return self.receive(deadline, self.send(op, **kwargs))

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None and not self.dead:
            with contextlib.suppress(Exception):
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()
        self.log.close()


def _round_call(worker: Worker, op: str, deadline: float, settings: dict, **kwargs: Any) -> dict:
    """One timed call in a round: the worker's reply without the protocol fields, or the error
    (recorded, not raised: the other shapes and variants go on)."""
    try:
        msg = worker.call(
            op,
            min(deadline, time.monotonic() + CALL_TIMEOUT_S),
            iters=settings["iters"],
            warmup=settings["warmup"],
            **kwargs,
        )
    except WorkerError as exc:
        msg = {"ok": False, "error": str(exc)[-4000:]}
    msg.pop("seq", None)
    msg.pop("op", None)
    return msg


def _gpu_verify() -> Any:
    """scripts/gpu_verify.py as a module (only the standard library at import time)."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    import gpu_verify

    return gpu_verify


def _shape_key(config: str, batch: int) -> str:
    return f"{config}/b{batch}"


def summarize(data: dict) -> dict:
    """Per shape: per-variant median over round medians, pristine/patched speedup with a
    Student-t 95% CI over paired rounds, sampled-id identity, copy reference."""
    ratio_ci = _gpu_verify().ratio_ci
    params = data["params"]
    results: dict[str, dict] = {}
    for config in params["configs"]:
        for batch in params["batches"]:
            key = _shape_key(config, batch)
            rows = [r for r in data["rounds"] if r.get("shape") == key]
            entry: dict[str, Any] = {"config": config, "batch": batch}
            by_round: dict[str, dict[int, dict]] = {v: {} for v in VARIANTS}
            for r in rows:
                if r.get("ok"):
                    by_round[r["variant"]][r["round"]] = r
            for v in VARIANTS:
                setup = data["setup"].get(key, {}).get(v, {})
                ok = list(by_round[v].values())
                entry[v] = {
                    "us_median": statistics.median([r["wall_us"] for r in ok]) if ok else None,
                    "us_rounds": [round(r["wall_us"], 3) for r in ok],
                    "gpu_us_median": (
                        statistics.median([r["gpu_us"] for r in ok])
                        if ok and all("gpu_us" in r for r in ok)
                        else None
                    ),
                    "copy_skipped": setup.get("copy_skipped"),
                    "ids_hash": setup.get("ids_hash"),
                    "first_ids": setup.get("first_ids"),
                    "ids_stable_across_calls": (
                        all(r["ids_hash"] == setup.get("ids_hash") for r in ok) if ok else None
                    ),
                }
            paired = sorted(set(by_round["pristine"]) & set(by_round["patched"]))
            pri = [by_round["pristine"][i] for i in paired]
            pat = [by_round["patched"][i] for i in paired]
            # ratio_ci(a, b) = mean of b/a: a = patched, b = pristine -> pristine/patched.
            entry["speedup"] = ratio_ci([r["wall_us"] for r in pat], [r["wall_us"] for r in pri])
            if pri and all("gpu_us" in r for r in pri + pat):
                entry["speedup_gpu"] = ratio_ci(
                    [r["gpu_us"] for r in pat], [r["gpu_us"] for r in pri]
                )
            hashes = [entry[v]["ids_hash"] for v in VARIANTS]
            entry["ids_identical"] = hashes[0] == hashes[1] if all(hashes) else None
            entry["patched_skips_as_expected"] = (
                entry["patched"]["copy_skipped"] == EXPECT_SKIP[config]
                if entry["patched"]["copy_skipped"] is not None and config in EXPECT_SKIP
                else None
            )
            copies = [
                r["wall_us"] for r in data["copy_ref"] if r.get("batch") == batch and r.get("ok")
            ]
            entry["copy_ref_us"] = statistics.median(copies) if copies else None
            gcopies = [
                r["gpu_us"]
                for r in data["copy_ref"]
                if r.get("batch") == batch and r.get("ok") and "gpu_us" in r
            ]
            entry["copy_ref_gpu_us"] = statistics.median(gcopies) if gcopies else None
            entry["errors"] = [
                f"{r['variant']} r{r['round']}: {r['error']}" for r in rows if not r.get("ok")
            ] + [
                f"{v} setup: {s['error']}"
                for v, s in data["setup"].get(key, {}).items()
                if not s.get("ok")
            ]
            results[key] = entry
    return results


def brief(results: dict) -> dict:
    """Per shape: medians, speedup and CI, identity (what gpu_verify prints for a step)."""
    out = {}
    for key, e in results.items():
        s = e["speedup"]
        out[key] = {
            "pristine_us": e["pristine"]["us_median"],
            "patched_us": e["patched"]["us_median"],
            "speedup": s.get("ratio"),
            "ci95": [s["ci95_low"], s["ci95_high"]] if "ci95_low" in s else None,
            "copy_us": e["copy_ref_us"],
            "ids_identical": e["ids_identical"],
            "patched_skips": e["patched"]["copy_skipped"],
            "errors": len(e["errors"]),
        }
    return out


def table(results: dict) -> str:
    def num(x: float | None, fmt: str = "{:.1f}") -> str:
        return "-" if x is None else fmt.format(x)

    head = (
        f"{'config':7} {'batch':>5} {'pristine us':>11} {'patched us':>10} "
        f"{'speedup [95% CI]':>22} {'copy us':>8} {'ids same':>8} {'skip pri/pat':>12}"
    )
    lines = [head, "-" * len(head)]
    for e in results.values():
        s = e["speedup"]
        if s.get("n"):
            ci = f"[{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]" if "ci95_low" in s else "[n=1]"
            speed = f"{s['ratio']:.3f} {ci}"
        else:
            speed = "-"
        skip = f"{e['pristine']['copy_skipped']}/{e['patched']['copy_skipped']}"
        lines.append(
            f"{e['config']:7} {e['batch']:>5} {num(e['pristine']['us_median']):>11} "
            f"{num(e['patched']['us_median']):>10} {speed:>22} {num(e['copy_ref_us']):>8} "
            f"{str(e['ids_identical']):>8} {skip:>12}"
            + (f"  ERRORS: {len(e['errors'])}" if e["errors"] else "")
        )
    return "\n".join(lines)


def _paths(out: Path) -> tuple[Path, Path]:
    """(json file, raw folder): ``out`` is the JSON file if it ends in .json, else a folder."""
    if out.suffix == ".json":
        return out, out.parent / f"{out.stem}-raw"
    return out / f"{STEP}.json", out / "raw"


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def run(
    out: Path,
    meta: dict,
    sites: dict[str, Path],
    *,
    device: str = "cuda",
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict:
    """Measure pristine vs patched ``Sampler.__call__``; write and return the result dict.

    ``out``: a folder (writes ``<out>/micro-000.json``) or a ``.json`` path; ``meta``: what
    gpu_verify records (command, gpu, torch, vllm_version, series_hash, date); ``sites``:
    ``{"pristine": root, "patched": root}``. Never raises for a failing shape or worker: the
    error text goes into the JSON, which is rewritten after every round."""
    t_start = time.monotonic()
    settings = {"configs": CONFIGS, **SETTINGS[(device, quick)], **(overrides or {})}
    deadline = t_start + settings["budget_s"] - CLOSE_MARGIN_S
    json_path, raw = _paths(Path(out))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    raw.mkdir(parents=True, exist_ok=True)
    batches = sorted(settings["batches"])
    configs: dict[str, dict] = settings["configs"]
    data: dict[str, Any] = {
        **meta,
        "step": STEP,
        "seed": "000",
        "patch": "0001 (Sampler.apply_sampling_params skips the FP32 logits copy)",
        "params": {
            "device": device,
            "quick": quick,
            "vocab": settings["vocab"],
            "logits_dtype": "bfloat16",
            "batches": batches,
            "configs": configs,
            "rounds": settings["rounds"],
            "iters_per_round": settings["iters"],
            "warmup_per_round": settings["warmup"],
            "budget_s": settings["budget_s"],
            "request_seeds": "1000 + i",
            "positions": "16 + (7 i) % 64 (decode step after the prompt)",
            "timing": "per call: perf_counter around sampler(logits, input_batch) + synchronize "
            "(wall_us) and CUDA events (gpu_us); median per round; rounds alternate the order",
            "speedup": "pristine / patched (mean over paired rounds, Student-t 95% CI)",
            "patched_root_note": "patched = the whole series; only 0001 touches "
            "vllm/v1/worker/gpu/sample/sampler.py",
        },
        "sites": {v: str(sites[v]) for v in VARIANTS},
        "startup": {},
        "setup": {},
        "rounds": [],
        "copy_ref": [],
        "errors": [],
        "notes": [],
        "results": {},
    }

    def save() -> None:
        try:
            data["results"] = summarize(data)
            data["summary"] = brief(data["results"])
        except Exception:
            data["summary_error"] = traceback.format_exc()[-2000:]
        data["wall_s"] = time.monotonic() - t_start
        _write(json_path, data)

    save()
    workers: dict[str, Worker] = {}
    try:
        # Start both workers at once (the imports dominate; nothing is timed yet).
        for v in VARIANTS:
            workers[v] = Worker(
                v, sites[v], raw, device, settings["vocab"], batches[-1], len(configs)
            )
        for v in VARIANTS:
            try:
                ready = workers[v].wait_ready(min(deadline, time.monotonic() + STARTUP_TIMEOUT_S))
                data["startup"][v] = ready
                say(f"{v} worker ready in {ready['startup_s']:.1f} s ({ready['sampler_file']})")
            except WorkerError as exc:
                data["startup"][v] = {"ok": False, "error": str(exc)[-4000:]}
                data["errors"].append(f"{v} startup: {str(exc)[-4000:]}")
                say(f"{v} worker FAILED to start: {str(exc)[:300]}")
        first = next((data["startup"][v] for v in VARIANTS if data["startup"][v].get("ok")), {})
        if data.get("gpu") in (None, "") and first:
            data["gpu"] = first.get("device")
        if data.get("torch") in (None, "") and first:
            data["torch"] = first.get("torch")
        if first:
            data["vllm_reported"] = first.get("vllm")
        save()
        live = [v for v in VARIANTS if not workers[v].dead]

        # Setup: first call per shape (Triton compiles), both workers in parallel.
        for config, batch in [(c, b) for c in configs for b in batches]:
            if time.monotonic() > deadline:
                data["notes"].append("budget: setup stopped early")
                break
            key = _shape_key(config, batch)
            data["setup"][key] = {}
            sent = {}
            for v in live:
                if workers[v].dead:
                    continue
                try:
                    sent[v] = workers[v].send(
                        "setup", config=config, batch=batch, params=configs[config]
                    )
                except WorkerError as exc:
                    data["setup"][key][v] = {"ok": False, "error": str(exc)[-4000:]}
            for v, seq in sent.items():
                try:
                    msg = workers[v].receive(min(deadline, time.monotonic() + CALL_TIMEOUT_S), seq)
                except WorkerError as exc:
                    msg = {"ok": False, "error": str(exc)[-4000:]}
                data["setup"][key][v] = msg
                if not msg.get("ok"):
                    say(f"setup {key} {v} FAILED: {msg.get('error', '')[-300:]}")
        save()
        say(f"setup done at {time.monotonic() - t_start:.1f} s")

        def setup_ok(key: str, v: str) -> bool:
            return bool(data["setup"].get(key, {}).get(v, {}).get("ok"))

        round_s = 0.0
        for rnd in range(settings["rounds"]):
            t_round = time.monotonic()
            if t_round + max(1.2 * round_s, 5.0) > deadline:
                data["notes"].append(f"budget: stopped before round {rnd}")
                say(f"budget reached: stopping before round {rnd}")
                break
            for ci, config in enumerate(configs):
                for bi, batch in enumerate(batches):
                    key = _shape_key(config, batch)
                    order = list(VARIANTS) if (rnd + ci + bi) % 2 == 0 else list(VARIANTS)[::-1]
                    for v in order:
                        if not setup_ok(key, v) or workers[v].dead:
                            continue
                        row = {"round": rnd, "shape": key, "variant": v, "order": order}
                        msg = _round_call(
                            workers[v], "measure", deadline, settings, config=config, batch=batch
                        )
                        data["rounds"].append({**row, **msg})
            for bi, batch in enumerate(batches):
                order = list(VARIANTS) if (rnd + bi) % 2 == 0 else list(VARIANTS)[::-1]
                for v in order:
                    if workers[v].dead:
                        continue
                    msg = _round_call(workers[v], "copy", deadline, settings, batch=batch)
                    data["copy_ref"].append({"round": rnd, "batch": batch, "variant": v, **msg})
            round_s = time.monotonic() - t_round
            save()
            say(f"round {rnd} done in {round_s:.1f} s")
    except Exception:
        data["errors"].append(f"driver: {traceback.format_exc()[-4000:]}")
        say(f"driver error: {traceback.format_exc()[-1000:]}")
    finally:
        for w in workers.values():
            with contextlib.suppress(Exception):
                w.close()
        for v, w in workers.items():
            if w.dead and data["startup"].get(v, {}).get("ok"):
                data["errors"].append(f"{v} worker: {w.dead}")
        save()
    print(table(data["results"]), flush=True)
    say(f"wrote {json_path} ({data['wall_s']:.1f} s)")
    return data


# =============================================================================================
def _cli_meta(args: argparse.Namespace) -> dict:
    series = args.overlay / "SERIES_HASH" if args.overlay else None
    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "gpu": None,  # filled in from the workers (the driver does not import torch)
        "torch": None,
        "vllm_version": VLLM_VERSION,
        "series_hash": series.read_text().strip() if series and series.exists() else None,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    w = sub.add_parser("_worker")
    w.add_argument("--device", default="cuda")
    w.add_argument("--vocab", type=int, required=True)
    w.add_argument("--max-batch", type=int, required=True)
    w.add_argument("--num-configs", type=int, required=True)
    parser.add_argument("--pristine-root", type=Path, default=DEFAULT_PRISTINE)
    parser.add_argument("--patched-root", type=Path, default=DEFAULT_PATCHED)
    parser.add_argument(
        "--overlay",
        type=Path,
        default=DEFAULT_OVERLAY,
        help="gpu_overlay folder: SERIES_HASH; builds --patched-root if missing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "/tmp/pb-out")),
        help="JSON file (*.json) or folder (writes micro-000.json)",
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--batches", help="comma-separated batch sizes (default per device)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--iters", type=int)
    parser.add_argument("--budget-s", type=float, help="wall-clock budget of the whole run")
    args = parser.parse_args()
    if args.cmd == "_worker":
        worker(args)
        return 0
    meta = _cli_meta(args)
    if (
        args.device == "cuda"
        and args.patched_root == DEFAULT_PATCHED
        and not (args.patched_root / "vllm" / "__init__.py").exists()
        and (args.overlay / "patched").is_dir()
    ):
        say(f"building {args.patched_root} from {args.overlay} (gpu_verify.build_sites)")
        meta.update(_gpu_verify().build_sites(args.overlay, {"pristine", "patched"}))
    overrides: dict[str, Any] = {}
    if args.batches:
        overrides["batches"] = [int(b) for b in args.batches.split(",")]
    for name in ("rounds", "iters", "budget_s"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    sites = {"pristine": args.pristine_root, "patched": args.patched_root}
    data = run(args.out, meta, sites, device=args.device, quick=args.quick, overrides=overrides)
    return 0 if data["results"] and not data["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
