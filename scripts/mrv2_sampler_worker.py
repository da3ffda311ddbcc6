#!/usr/bin/env python3
"""The worker process of scripts/gpu_mrv2_sampler_bench.py and its driver-side handle.

`python3 scripts/mrv2_sampler_worker.py --device D --vocab V --max-batch B --num-configs N`,
started with one variant's import root alone on PYTHONPATH, builds MRV2's real `Sampler`,
`RequestState` and `InputBatch` and answers one JSON line per command read from stdin
(`setup`, `measure`, `copy`, `exit`) on a private copy of its stdout (vLLM's logging goes to
stderr, the log file). `Worker` starts it and sends commands, every wait with a timeout.
"""

from __future__ import annotations

import argparse
import contextlib
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


class WorkerError(RuntimeError):
    """The worker died, timed out or answered out of protocol: it is no longer usable."""


class Worker:
    """One variant's worker process; JSON lines in on stdin, out on a pipe (read by a thread so
    every wait has a timeout)."""

    def __init__(
        self,
        variant: str,
        root: Path,
        log_path: Path,
        device: str,
        vocab: int,
        max_batch: int,
        num_configs: int,
    ) -> None:
        self.variant = variant
        self.log_path = log_path
        self.log = open(self.log_path, "w")
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
        if device == "cpu":
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        cmd = [
            sys.executable,
            str(HERE),
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--max-batch", type=int, required=True)
    parser.add_argument("--num-configs", type=int, required=True)
    worker(parser.parse_args())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
