"""Where an A/B engine's threads run: the CPUs it may use (split between engines, pinned at
start), the one its main thread hops to next (HOP_ENV), and /proc's account of the CPUs' time
(busy, idle, iowait, steal) and of the CPU a thread last ran on."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

from verify.errors import EngineError

#: Environment of a worker: every this many engine-core output batches, move the engine's main
#: thread to the next CPU it may run on (unset or 0: never). On a shared VM each vCPU runs at
#: full or about half speed for seconds at a time (verify.gpu.cpu_probe), and a host-bound cell
#: runs at the speed of the CPU its thread stays on; hopping spreads each cell over all CPUs.
HOP_ENV = "PB_HOP_CPUS_EVERY"


class CpuHopper:
    """Moves the calling thread to the next of `cpus` (from a random one) every `every` ticks;
    `restore` gives it all of them back. `setaffinity`: os.sched_setaffinity (tests)."""

    def __init__(self, cpus: list[int], every: int, setaffinity=None) -> None:
        self.cpus, self.every = sorted(cpus), every
        self._set = setaffinity or os.sched_setaffinity
        self._next, self.ticks, self.hops = random.randrange(len(self.cpus)), 0, 0

    def tick(self) -> None:
        self.ticks += 1
        if (self.ticks - 1) % self.every == 0:
            self._set(0, {self.cpus[self._next]})
            self._next, self.hops = (self._next + 1) % len(self.cpus), self.hops + 1

    def restore(self) -> None:
        self._set(0, set(self.cpus))

    def summary(self) -> dict:
        return {"every": self.every, "hops": self.hops, "cpus": compact_cpus(self.cpus)}


def hopper_from_env(env: dict | None = None) -> CpuHopper | None:
    """A CpuHopper over this thread's CPUs where HOP_ENV asks for one; a named error for a
    value that is not a whole number."""
    value = (os.environ if env is None else env).get(HOP_ENV, "").strip() or "0"
    if not value.isdigit():
        raise EngineError(f"{HOP_ENV}={value!r}: give a whole number of steps (0: off)")
    cpus = sorted(os.sched_getaffinity(0))
    return CpuHopper(cpus, int(value)) if int(value) > 0 and len(cpus) > 1 else None


def thread_cpu(stat: str | None = None) -> int | None:
    """The CPU the calling thread last ran on (field 39 of /proc/thread-self/stat); None where
    it cannot be read. `stat`: the file's text (tests)."""
    try:
        text = stat if stat is not None else Path("/proc/thread-self/stat").read_text()
        return int(text.rsplit(")", 1)[1].split()[36])  # fields after the name start at 3
    except (OSError, IndexError, ValueError):
        return None


#: /proc/stat's per-CPU fields, in order (man 5 proc); guest time is already in user/nice.
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_ticks(cpus: set[int] | None = None, stat: str | None = None) -> dict[str, int] | None:
    """/proc/stat's ticks per field summed over `cpus` (default: the CPUs this process may run
    on); None where /proc/stat cannot be read. `stat`: its text (tests)."""
    try:
        text = stat if stat is not None else Path("/proc/stat").read_text()
        cpus = cpus if cpus is not None else os.sched_getaffinity(0)
    except (OSError, AttributeError):
        return None
    total = dict.fromkeys(PROC_STAT_FIELDS, 0)
    for line in text.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            for key, value in zip(PROC_STAT_FIELDS, fields, strict=False):
                total[key] += int(value)
    return total


def split_cpus(cpus: set[int], parts: int) -> list[list[int]]:
    """`cpus` split into `parts` disjoint runs of consecutive ids, as even as they go (the first
    runs take one more where it does not divide); EngineError where there are fewer CPUs than
    parts."""
    ordered = sorted(cpus)
    if parts < 1 or len(ordered) < parts:
        raise EngineError(f"cannot give {parts} engine(s) CPUs of their own: {len(ordered)} CPU(s)")
    size, extra = divmod(len(ordered), parts)
    runs, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        runs.append(ordered[start:end])
        start = end
    return runs


def cpu_shares(before: dict[str, int] | None, after: dict[str, int] | None) -> dict:
    """The share of the CPUs' time between two `cpu_ticks` spent busy, idle, in iowait and
    stolen by the hypervisor (steal: time a virtual CPU wanted to run and was not let)."""
    if before is None or after is None:
        return {"unavailable": "no /proc/stat"}
    delta = {k: after[k] - before[k] for k in PROC_STAT_FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return {"unavailable": "no CPU time passed"}
    busy = total - delta["idle"] - delta["iowait"] - delta["steal"]
    shares = {"busy": busy, "idle": delta["idle"], "iowait": delta["iowait"]}
    return {k: v / total for k, v in {**shares, "steal": delta["steal"]}.items()}


def pinning(cpus: list[int]) -> Callable[[], None]:
    """A Popen preexec_fn that pins the child to `cpus` before it runs anything (threads it
    starts inherit the set)."""
    return lambda: os.sched_setaffinity(0, cpus)


def compact_cpus(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (taskset's list form)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
