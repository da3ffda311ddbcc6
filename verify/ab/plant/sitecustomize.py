"""A planted effect for proving the A/B core's resolution: with PATCHBENCH_PLANT_DELAY_MS set,
every call of vLLM's `Scheduler.schedule` (once per engine step) first waits that long on the
host: a sleep, or with PATCHBENCH_PLANT_SPIN=1 a busy wait that keeps the GIL (a sleep lets the
engine's other threads run meanwhile, so it need not lengthen the step); with
PATCHBENCH_PLANT_GPU_US set, every `LogitsProcessor.forward` (once per engine step, in both
model runners) first queues that long a spin on the GPU's current stream (`torch.cuda._sleep`
between two CUDA events: each finished spin's measured length corrects the cycles per µs, since
the SM clock changes under load, and is summed); and, with PATCHBENCH_PLANT_COUNT set,
"<calls> <seconds waited on the host> <seconds spun on the GPU>" so far is written to that file
every PATCHBENCH_PLANT_COUNT_EVERY calls (default 8; 1 where a measured run has few engine
steps, e.g. a pooling server; the writing counts as waited), so the size the delay could have
(all of it on the critical path) can be computed per round.

Put this folder first on PYTHONPATH of the planted variant only; every process started with it
(API server, engine core) installs the hook (verify/after_import.py, loaded by path: Python
runs this file before `verify` is importable)."""

import importlib.util
import os
import sys
import time

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "after_import.py")
_DELAY_S = float(os.environ.get("PATCHBENCH_PLANT_DELAY_MS", "0")) / 1000
_GPU_DELAY_S = float(os.environ.get("PATCHBENCH_PLANT_GPU_US", "0")) / 1e6
_COUNT_FILE = os.environ.get("PATCHBENCH_PLANT_COUNT")
_COUNT_EVERY = int(os.environ.get("PATCHBENCH_PLANT_COUNT_EVERY", "8"))
_SPIN_HOST = os.environ.get("PATCHBENCH_PLANT_SPIN") == "1"
_GPU_SPUN = [0.0]  # seconds of finished GPU spins, measured


def _counting(delay, count=True):
    """A wrapper maker: the wrapped call runs `delay()` (returning the seconds it planted) first
    and, where `count`, keeps the count file."""
    calls, slept = [0], [0.0]

    def planted(call):
        def wrapper(self, *args, **kwargs):
            slept[0] += delay()
            calls[0] += 1
            if count and _COUNT_FILE and calls[0] % _COUNT_EVERY == 0:
                with open(_COUNT_FILE, "w") as fh:
                    fh.write(f"{calls[0]} {slept[0]:.6f} {_GPU_SPUN[0]:.6f}")
            return call(self, *args, **kwargs)

        return wrapper

    return planted


def _host_sleep() -> float:
    t0 = time.perf_counter()
    if _SPIN_HOST:
        while time.perf_counter() - t0 < _DELAY_S:
            pass
    else:
        time.sleep(_DELAY_S)
    return time.perf_counter() - t0


_SPIN = {"cycles_per_s": 0.0, "pending": []}


def _gpu_spin() -> float:
    """Queue a spin of _GPU_DELAY_S on the current stream between two timing events (no wait
    here); the spins that have finished since are measured, summed into _GPU_SPUN and steer the
    cycles per second. Returns the planned length."""
    import torch

    if not _SPIN["cycles_per_s"]:  # once: time a spin of 10^7 cycles
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(10**7)
        end.record()
        end.synchronize()
        _SPIN["cycles_per_s"] = 10**7 / (start.elapsed_time(end) / 1000)
    pending = _SPIN["pending"]
    while pending and pending[0][1].query():
        start, end, cycles = pending.pop(0)
        seconds = start.elapsed_time(end) / 1000
        _GPU_SPUN[0] += seconds
        if seconds > 0:
            _SPIN["cycles_per_s"] = 0.8 * _SPIN["cycles_per_s"] + 0.2 * cycles / seconds
    cycles = round(_GPU_DELAY_S * _SPIN["cycles_per_s"])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    pending.append((start, end, cycles))
    return _GPU_DELAY_S


def _plant(module) -> None:
    module.Scheduler.schedule = _counting(_host_sleep)(module.Scheduler.schedule)
    module.PATCHBENCH_PLANTED_DELAY_S = _DELAY_S


def _plant_gpu(module) -> None:
    """Both delays set (the same length): each step's host and GPU work grow by it, so the step
    grows by it whichever of the two is its critical path; the host's count stands for both."""
    cls = module.LogitsProcessor
    cls.forward = _counting(_gpu_spin, count=_DELAY_S == 0)(cls.forward)
    module.PATCHBENCH_PLANTED_GPU_DELAY_S = _GPU_DELAY_S


_spec = importlib.util.spec_from_file_location("_patchbench_after_import", _HOOKS)
_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hooks)
if _DELAY_S > 0:
    _hooks.after_import("vllm.v1.core.sched.scheduler", _plant)
if _GPU_DELAY_S > 0:
    _hooks.after_import("vllm.model_executor.layers.logits_processor", _plant_gpu)
# the shims after this one on the path (the logit scale, the CPU tier's) run too
_hooks.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)), sys.path)
