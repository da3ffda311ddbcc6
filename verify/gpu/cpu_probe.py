"""How fast each CPU of this machine runs single-threaded Python, over time.

A host-bound decode step (B=32 on an H200, ~3 ms) runs at the speed of the CPU its engine's main
thread lands on. On a shared virtual machine two vCPUs can differ (one may be a hyperthread
sibling of a neighbour's busy core; steal stays 0 then), and a cell of the penalty-cost A/B ran
whole at one speed, 3.0 to 4.0 ms per step for the same work. This probe times the same pure
Python work pinned to each CPU in turn, in rotating order over several rounds, so that a CPU
slower in every round stands apart from a machine whose speed drifts for all CPUs at once.

`python3 -m verify.gpu.cpu_probe --rounds 8 --fastest 3 --out F.json` writes the per-CPU times
and prints, last, the fastest CPUs in taskset's list form (`taskset -c "$(... | tail -1)"`).
Standard library only: it runs on the device machine before vLLM is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from verify.errors import PatchbenchError


class ProbeError(PatchbenchError):
    """The probe cannot pin itself or was asked for more CPUs than it may use."""


def python_work(n: int = 60_000) -> int:
    """Interpreter-bound work like an engine step's host side: calls, dict and list traffic."""
    table: dict[int, int] = {}
    out: list[int] = []
    for i in range(n):
        table[i & 1023] = table.get(i & 1023, 0) + i
        out.append(table[i & 1023] & 7)
    return sum(out)


def time_on(cpu: int, repeats: int = 3) -> float:
    """The fastest of `repeats` timings (s) of `python_work` with this thread pinned to `cpu`."""
    os.sched_setaffinity(0, {cpu})
    python_work(5_000)  # settle on the CPU
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        python_work()
        best = min(best, time.perf_counter() - start)
    return best


def probe(cpus: list[int], rounds: int, timer=time_on) -> dict[int, list[float]]:
    """Per CPU, one timing per round; each round visits the CPUs in an order rotated by one."""
    times: dict[int, list[float]] = {cpu: [] for cpu in cpus}
    for r in range(rounds):
        shift = r % len(cpus)
        for cpu in cpus[shift:] + cpus[:shift]:
            times[cpu].append(timer(cpu))
    return times


def siblings(cpu: int) -> str | None:
    """The CPU's hyperthread siblings as the kernel lists them (e.g. "2,10"), None if unknown."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def summarize(times: dict[int, list[float]]) -> dict:
    """Each CPU's median time relative to the fastest CPU's, and each round's median over CPUs
    relative to the first round's (a drift of the whole machine)."""
    medians = {cpu: statistics.median(ts) for cpu, ts in times.items()}
    fastest = min(medians.values())
    rounds = len(next(iter(times.values())))
    per_round = [statistics.median(ts[r] for ts in times.values()) for r in range(rounds)]
    return {
        "cpus": {
            str(cpu): {
                "median_ms": medians[cpu] * 1e3,
                "relative": medians[cpu] / fastest,
                "min_ms": min(ts) * 1e3,
                "max_ms": max(ts) * 1e3,
                "siblings": siblings(cpu),
            }
            for cpu, ts in times.items()
        },
        "round_relative": [m / per_round[0] for m in per_round],
    }


def fastest_cpus(summary: dict, count: int) -> list[int]:
    """The `count` CPUs with the lowest median time."""
    ranked = sorted(summary["cpus"], key=lambda cpu: summary["cpus"][cpu]["median_ms"])
    if count > len(ranked):
        raise ProbeError(f"asked for the {count} fastest CPUs of {len(ranked)}")
    return sorted(int(cpu) for cpu in ranked[:count])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--fastest", type=int, default=0, help="print the N fastest CPUs last")
    parser.add_argument("--out", type=Path, help="write the timings and summary here (JSON)")
    args = parser.parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    start = time.time()
    try:
        times = probe(allowed, args.rounds)
    finally:
        os.sched_setaffinity(0, allowed)
    summary = summarize(times)
    summary["seconds"] = time.time() - start
    summary["times_ms"] = {str(c): [t * 1e3 for t in ts] for c, ts in times.items()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    for cpu, row in summary["cpus"].items():
        print(
            f"cpu {cpu:>3}: {row['median_ms']:.2f} ms ({row['relative']:.3f}x) "
            f"range {row['min_ms']:.2f}-{row['max_ms']:.2f} siblings {row['siblings']}"
        )
    drift = summary["round_relative"]
    print(f"rounds relative to the first: {min(drift):.3f}-{max(drift):.3f}")
    if args.fastest:
        from verify.ab.cpus import compact_cpus

        print(compact_cpus(fastest_cpus(summary, args.fastest)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
