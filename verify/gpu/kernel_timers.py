"""The kernel benchmarks' timers (scripts/gpu_kernel_bench.py and the penalty-state benches):
GPU time per call in a CUDA graph, one eager call from an idle GPU with L2 flushed (or queued
behind a sleep kernel), and host time to issue a call while the GPU is kept busy. Variants
alternate sample by sample or batch by batch, so host and clock drift pair out."""

from __future__ import annotations

import statistics
import time

import torch


def capture(fns, calls: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph calling fns[0], fns[1], ... round robin `calls` times (warmed first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _events(n):
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def time_graph(graph, calls: int, replays: int) -> float:
    """Median GPU microseconds per call over `replays` replays."""
    start, end = _events(replays), _events(replays)
    for s, e in zip(start, end, strict=True):
        s.record()
        graph.replay()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(
        s.elapsed_time(e) * 1e3 / calls for s, e in zip(start, end, strict=True)
    )


def time_eager(fns: dict, order: list, flush: torch.Tensor, samples: int, sleep=0) -> dict:
    """Per variant, the median microseconds of one eager call issued to an idle GPU with
    L2 flushed; the variants alternate sample by sample (paired against host drift).
    With `sleep` (cycles), the call is issued behind a sleep kernel and the start event
    recorded after it: the GPU time of the launch alone, host issue hidden (queued_us)."""
    times = {n: [] for n in order}
    start, end = _events(2)
    for _ in range(samples):
        for n in order:
            flush.zero_()
            torch.cuda.synchronize()
            if sleep:
                torch.cuda._sleep(sleep)
            start.record()
            fns[n]()
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) * 1e3)
    return {n: statistics.median(t) for n, t in times.items()}


def sleep_cycles_per_us() -> float:
    torch.cuda._sleep(1000)
    start, end = _events(2)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def time_host(fns: dict, order: list, calls: int, cycles_per_us: float, batches=5) -> dict:
    """Per variant, CPU microseconds to issue one call, the GPU kept busy so that no
    launch waits: the median over `batches` batches of calls/batches back-to-back calls
    (a batch hit by an OS hiccup does not move it); variants alternate batch by batch."""
    per_batch = max(1, calls // batches)
    means = {n: [] for n in order}
    for _ in range(batches):
        for n in order:
            torch.cuda.synchronize()
            torch.cuda._sleep(int(per_batch * 200 * cycles_per_us))  # ~200 us per call
            t0 = time.perf_counter_ns()
            for _ in range(per_batch):
                fns[n]()
            means[n].append((time.perf_counter_ns() - t0) / per_batch / 1e3)
    torch.cuda.synchronize()
    return {n: statistics.median(m) for n, m in means.items()}
