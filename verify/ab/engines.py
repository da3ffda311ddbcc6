"""Engine lifecycle of the A/B core: one vLLM `LLM` per variant in its own worker process (the
variant's import root first on PYTHONPATH, its own environment), driven by one JSON request
per line on stdin ("run config X"); each result comes back as a file, so a slow or dying
engine never leaves the driver half-reading a pipe.

Driver side: `Engine` (start, wait until the worker wrote its ready file, `call`, `stop` with
no child left). Worker side: `python -m verify.ab.engines --model M --engine-args JSON
--prefix P` builds the `LLM`, writes `P-ready.json` (start-up time and what it imported) and
answers every request with `P-<seq>.json`: generated tokens, wall seconds of the
`LLM.generate`, output tokens per second and a digest of the token ids (identity across
variants). Standard library only at import: the worker imports vLLM from the variant's root.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from verify.ab.cpus import (
    CpuHopper,
    compact_cpus,
    cpu_shares,
    cpu_ticks,
    hopper_from_env,
    pinning,
    thread_cpu,
)
from verify.ab.nvml import gpu_counters, gpu_shares
from verify.ab.servers import log_tail, say, start_group, stop_group
from verify.errors import EngineError

#: What a config may set: SamplingParams fields, and the batch shape.
SAMPLING_KEYS = (
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "top_k",
    "top_p",
    "temperature",
    "seed",
)
SHAPE_KEYS = ("batch", "output_len", "input_len")
INPUT_LEN = 32
#: Request i of a batch samples with seed FIRST_SEED + i (a config's "seed" replaces it; "seed":
#: null gives no per-request seed: vLLM then draws from the engine's generator for the whole
#: batch instead of one generator call per request and step).
FIRST_SEED = 1000
#: Prompt token ids are drawn from [10, PROMPT_ID_HIGH) (capped at the model's vocabulary).
PROMPT_ID_HIGH = 4000


def check_config(name: str, config: dict) -> dict:
    """`config` with its input length filled in; a named error for unknown or missing keys."""
    unknown = sorted(set(config) - set(SAMPLING_KEYS) - set(SHAPE_KEYS))
    if unknown:
        raise EngineError(
            f"config {name!r}: unknown keys {unknown}; allowed: {[*SAMPLING_KEYS, *SHAPE_KEYS]}"
        )
    missing = [k for k in ("batch", "output_len") if not isinstance(config.get(k), int)]
    if not isinstance(config.get("seed", 0), int | None):
        raise EngineError(f"config {name!r}: seed must be an integer or null")
    if missing:
        raise EngineError(f"config {name!r}: {missing} must be given as integers")
    return {"input_len": INPUT_LEN, **config}


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()


def prompt_batch(
    count: int,
    input_len: int,
    rng: random.Random,
    period: int | None = None,
    high: int = PROMPT_ID_HIGH,
) -> list[dict]:
    """`count` prompts of `input_len` random token ids (a phrase of `period` ids repeated, when
    given: the ngram proposer then finds matches)."""
    prompts = []
    for _ in range(count):
        ids = [rng.randrange(10, high) for _ in range(period or input_len)]
        prompts.append({"prompt_token_ids": (ids * input_len)[:input_len]})
    return prompts


#: An engine step counts as slow when its interval exceeds this multiple of the median.
SLOW_STEP = 2.0


def step_stats(stamps: list[tuple[float, int]]) -> dict:
    """Engine-step intervals of one generate from `(engine timestamp, outputs)` per output batch
    (batches with no request output dropped; the prefill, before the first batch, is no step):
    steps, median / mean / p99 / max step in ms, `slow_share` (the fraction of the decode time
    spent in steps slower than SLOW_STEP x the median: stalls, not per-step work) and
    `median_tok_per_s` (median outputs per batch over the median step)."""
    batches = [(t, n) for t, n in stamps if n > 0]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(batches)]
    if len(gaps) < 2 or min(gaps) < 0:
        return {"steps": len(gaps), "unavailable": "fewer than two decode steps, or unordered"}
    ordered = sorted(gaps)
    median = statistics.median(ordered)
    slow = sum(g for g in gaps if g > SLOW_STEP * median)
    per_batch = statistics.median(n for _, n in batches[1:])
    return {
        "steps": len(gaps),
        "median_step_ms": 1000 * median,
        "mean_step_ms": 1000 * statistics.fmean(gaps),
        "p99_step_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max_step_ms": 1000 * ordered[-1],
        "slow_share": slow / sum(gaps) if sum(gaps) > 0 else 0.0,
        "median_tok_per_s": per_batch / median if median > 0 else None,
    }


#: Every this many engine-core output batches, the CPU the reading thread runs on is sampled
#: (prime: with HOP_ENV's hops every 16 or 32 batches, the samples still see every CPU).
CPU_SAMPLE_EVERY = 31


def recording_steps(
    llm, thread_cpus: dict[int, int] | None = None, hopper: CpuHopper | None = None
) -> tuple[list[tuple[float, int]], Callable[[], None]]:
    """Record `(timestamp, outputs)` of every engine-core output batch the `LLM` reads (the V1
    engine core's own `EngineCoreOutputs.timestamp`, else this process's clock); returns the
    list and a function that stops recording. Where `thread_cpus` is given, it counts the CPU
    the reading thread (in-process: the engine's main thread) runs on every CPU_SAMPLE_EVERY
    batches; where `hopper` is given, it ticks once per batch. Raises AttributeError where the
    engine has no `engine_core.get_output` (not a V1 `LLMEngine`)."""
    core = llm.llm_engine.engine_core
    stamps: list[tuple[float, int]] = []
    original = core.get_output

    def get_output(*args, **kwargs):
        outputs = original(*args, **kwargs)
        when = getattr(outputs, "timestamp", 0.0) or time.monotonic()
        stamps.append((when, len(getattr(outputs, "outputs", ()) or ())))
        if thread_cpus is not None and len(stamps) % CPU_SAMPLE_EVERY == 1:
            cpu = thread_cpu()
            if cpu is not None:
                thread_cpus[cpu] = thread_cpus.get(cpu, 0) + 1
        if hopper is not None:
            hopper.tick()
        return outputs

    own = getattr(core, "__dict__", {}).get("get_output")  # put back by stop()
    core.get_output = get_output

    def stop() -> None:
        if own is None:
            del core.get_output
        else:
            core.get_output = own

    return stamps, stop


#: sample_tokens_timing's per-step fields (seconds) that `timer_summary` reports, in µs.
TIMER_FIELDS = ("sample_tokens_s", "sample_s", "update_async_output_s", "ready_wait_s")


def timer_summary(snapshot: dict) -> dict:
    """The median host time per engine step, in µs, of each of TIMER_FIELDS in a
    `sample_tokens_timing.snapshot()` (and of `get_output`'s waits, where any), with the
    number of steps; {"unavailable": why} where it holds no step."""
    fields, steps = snapshot.get("step_fields", []), snapshot.get("steps", [])
    if not steps:
        return {"unavailable": "the timers recorded no step"}
    out: dict = {"steps": len(steps)}
    for name in TIMER_FIELDS:
        if name in fields:
            i = fields.index(name)
            out[name.removesuffix("_s") + "_us"] = 1e6 * statistics.median(s[i] for s in steps)
    waits = [w[0] for w in snapshot.get("get_output", [])]
    if waits:
        out["get_output_wait_us"] = 1e6 * statistics.median(waits)
    return out


def take_sampler_timers() -> dict | None:
    """`timer_summary` of the engine's sample_tokens timers since the last take, which clears
    them: the series' opt-in host timers (patch 0005, VLLM_SAMPLE_TOKENS_TIMING=1), readable
    here because the driver runs each engine core in its worker's process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0). None where they are off; {"unavailable": why} where
    this build has none (pristine) or the engine core runs elsewhere."""
    if os.environ.get("VLLM_SAMPLE_TOKENS_TIMING", "0").strip().lower() not in ("1", "true"):
        return None
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
        return {"unavailable": "the engine core runs in another process"}
    try:
        timers = importlib.import_module("vllm.v1.worker.sample_tokens_timing")
    except ImportError:
        return {"unavailable": "this build has no sample_tokens timers (patch 0005)"}
    snapshot = timers.snapshot()
    timers.reset()
    return timer_summary(snapshot)


def timed_generate(llm, prompts: list[dict], sampling: list) -> dict:
    """One `LLM.generate` of the whole batch: wall seconds, tokens, tok/s, token-id digest, the
    engine's step intervals (`step_stats`; {"unavailable": why} where they cannot be read), how
    this process's CPUs spent the time (`cpu_shares`: busy, idle, iowait, steal), which CPUs the
    engine's main thread ran on (`thread_cpus`: samples per CPU, to tell a whole cell run slow
    on one CPU from a slow host), what its GPU did (`gpu`: mean power, throttled shares, SM
    clock; verify.ab.nvml) and, where the series' timers are on, the sampler's host time per
    step (`take_sampler_timers`); with HOP_ENV set, the thread's CPU hops (`cpu_hops`)."""
    take_sampler_timers()  # what an earlier generate or the start-up left is not this one's
    thread_cpus: dict[int, int] = {}
    hopper = hopper_from_env()
    try:
        stamps, stop = recording_steps(llm, thread_cpus, hopper)
    except AttributeError as exc:
        stamps, stop = None, None
        steps = {"unavailable": f"no engine-core outputs to time: {exc}"}
    gpu, ticks, t0 = gpu_counters(), cpu_ticks(), time.perf_counter()
    try:
        outs = llm.generate(prompts, sampling, use_tqdm=False)
    finally:
        if stop is not None:
            stop()
        if hopper is not None:
            hopper.restore()
    elapsed = time.perf_counter() - t0
    cpus = cpu_shares(ticks, cpu_ticks())
    gpu = gpu_shares(gpu, gpu_counters(), elapsed)
    if stamps is not None:
        steps = step_stats(stamps)
    timers = take_sampler_timers()
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    n_tokens = sum(len(t) for t in tokens)
    keep_tokens(tokens)
    return {
        **({"sampler": timers} if timers is not None else {}),
        "elapsed_s": elapsed,
        "output_tokens": n_tokens,
        "tok_per_s": n_tokens / elapsed,
        "token_ids_hash": digest(tokens),
        "first_tokens": tokens[0][:16],
        "steps": steps,
        "cpus": cpus,
        "gpu": gpu,
        "thread_cpus": {str(cpu): n for cpu, n in sorted(thread_cpus.items())},
        **({"cpu_hops": hopper.summary()} if hopper is not None else {}),
    }


#: Environment of a worker: a folder where each distinct batch output is kept whole, as
#: `tokens-<first 16 hex of its token_ids_hash>.json` (the record holds only the hash): where
#: two engines' tokens differ, the first differing request and step can be found afterwards.
KEEP_TOKENS_ENV = "PB_KEEP_TOKENS"


def keep_tokens(tokens: list[list[int]], env: dict | None = None) -> Path | None:
    """Write `tokens` under KEEP_TOKENS_ENV's folder once per distinct output; its path."""
    folder = (os.environ if env is None else env).get(KEEP_TOKENS_ENV)
    if not folder:
        return None
    path = Path(folder) / f"tokens-{digest(tokens)[:16]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, tokens)
    return path


def run_config(llm, config: dict, warmup_tokens: int = 0) -> dict:
    """`config`'s batch (the same prompts and per-request seeds every time), `warmup_tokens`
    long instead of its output length when given; `ignore_eos`, so every request generates
    exactly its length."""
    from vllm import SamplingParams

    params = {k: config[k] for k in SAMPLING_KEYS if k in config}
    seed = params.pop("seed", FIRST_SEED)
    seeds = [None if seed is None else seed + i for i in range(config["batch"])]
    high = min(PROMPT_ID_HIGH, llm.model_config.get_vocab_size())
    prompts = prompt_batch(config["batch"], config["input_len"], random.Random(0), high=high)
    max_tokens = warmup_tokens or config["output_len"]
    sampling = [
        SamplingParams(max_tokens=max_tokens, ignore_eos=True, seed=seeds[i], **params)
        for i in range(len(prompts))
    ]
    return timed_generate(llm, prompts, sampling)


def atomic_write(path: Path, data: object, indent: int | None = None) -> None:
    """`data` as JSON at `path`, replaced whole (a reader never sees it half-written); with
    `indent`, indented and ending in a newline."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) if indent is None else json.dumps(data, indent=indent) + "\n")
    tmp.replace(path)


def serve_requests(handle: Callable[[dict], dict], prefix: str, ready: dict) -> None:
    """The worker's loop: write `<prefix>-ready.json`, then answer each stdin request with
    `<prefix>-<seq>.json` (an exception becomes {"error": traceback}) until {"op": "exit"}."""
    atomic_write(Path(prefix + "-ready.json"), ready)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        try:
            result = handle(request)
        except Exception:
            result = {"error": traceback.format_exc()[-4000:]}
        atomic_write(Path(f"{prefix}-{request['seq']}.json"), result)


def worker_provenance() -> dict:
    """What this worker runs on and imported (read here, in the variant's process)."""
    import torch
    import vllm

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "vllm": vllm.__version__,
        "vllm_file": vllm.__file__,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_")},
        "cpus": compact_cpus(list(os.sched_getaffinity(0))),
    }


def kv_cache_tokens(llm) -> int | None:
    """Tokens the engine's KV cache holds (blocks x block size), where the engine says."""
    cache = llm.llm_engine.vllm_config.cache_config
    blocks = getattr(cache, "num_gpu_blocks", None)
    return blocks * cache.block_size if blocks else None


def model_runner(llm) -> str | None:
    """The model runner the engine chose, "MRV2" or "V1" (None on a pin with only V1)."""
    v2 = getattr(llm.llm_engine.vllm_config, "use_v2_model_runner", None)
    return None if v2 is None else ("MRV2" if v2 else "V1")


class Engine:
    """One variant's `LLM` in a worker process (its own process group), driven through stdin;
    results come back as files `<prefix>-<seq>.json`."""

    def __init__(
        self,
        cmd: list[str],
        env: dict,
        prefix: Path,
        label: str = "engine",
        cpus: list[int] | None = None,
    ) -> None:
        self.cmd, self.env, self.prefix, self.label = cmd, env, str(prefix), label
        self.cpus = cpus  # the CPUs the worker and its threads may run on (None: inherited)
        self.log = Path(self.prefix + ".log")
        self.proc: subprocess.Popen | None = None
        self.ready: dict = {}
        self.seq = 0

    def start(self) -> Engine:
        # files of an earlier worker with this prefix must not pass for this one's answers
        prefix = Path(self.prefix)
        for stale in prefix.parent.glob(f"{prefix.name}-*.json"):
            answer = stale.name[len(prefix.name) + 1 : -len(".json")]
            if answer == "ready" or answer.isdigit():  # not another variant's (`NAME-x-1.json`)
                stale.unlink(missing_ok=True)
        pin = {} if self.cpus is None else {"preexec_fn": pinning(self.cpus)}
        self.proc, self._fh = start_group(
            self.cmd, self.env, self.log, stdin=subprocess.PIPE, text=True, **pin
        )
        # the process group's id, for a caller that must clean up after this driver was killed
        Path(self.prefix + ".pid").write_text(f"{self.proc.pid}\n")
        where = "" if self.cpus is None else f", CPUs {compact_cpus(self.cpus)}"
        say(f"{self.label}: started pid {self.proc.pid} (log {self.log}{where})")
        return self

    def _wait(self, path: Path, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.proc.poll() is not None:
                raise EngineError(
                    f"{self.label} exited with code {self.proc.returncode}; log tail "
                    f"({self.log}):\n{log_tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise EngineError(
                    f"{self.label}: no {path.name} after {timeout:.0f} s; log tail "
                    f"({self.log}):\n{log_tail(self.log)}"
                )
            time.sleep(0.2)
        return json.loads(path.read_text())

    def wait_ready(self, timeout: float = 600) -> dict:
        self.ready = self._wait(Path(self.prefix + "-ready.json"), timeout)
        say(f"{self.label}: ready in {self.ready.get('startup_s', 0):.0f} s")
        return self.ready

    def call(self, request: dict, timeout: float = 600) -> dict:
        """Send one request and wait for its result file (EngineError on a worker error)."""
        self.seq += 1
        self.proc.stdin.write(json.dumps({**request, "seq": self.seq}) + "\n")
        self.proc.stdin.flush()
        result = self._wait(Path(f"{self.prefix}-{self.seq}.json"), timeout)
        if "error" in result:
            raise EngineError(f"{self.label}: request {request} failed:\n{result['error']}")
        return result

    def kill(self) -> None:
        """Stop the worker's process group at once (a measurement in flight is lost)."""
        if self.proc is not None:
            stop_group(self.proc, grace=0)
            self._fh.close()
            self.proc = None

    def stop(self, grace: float = 60) -> None:
        """Ask the worker to exit; stop its process group when it does not within `grace`."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=grace)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        stop_group(self.proc, grace=10)
        self._fh.close()
        self.proc = None


def worker_command(
    python: str, model: str, engine_args: dict, prefix: Path, target_entropy: float | None = None
) -> list[str]:
    """The worker of `python -m verify.ab engine` (the repo root must be on PYTHONPATH);
    `target_entropy`: calibrate the logit scale of a dummy-weight model to it first."""
    extra = [] if target_entropy is None else ["--target-entropy", str(target_entropy)]
    return [
        python,
        "-m",
        "verify.ab.engines",
        "--model",
        model,
        "--engine-args",
        json.dumps(engine_args),
        "--prefix",
        str(prefix),
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="engine worker of the A/B core (one LLM)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--engine-args", default="{}", help="JSON: keyword arguments of LLM")
    parser.add_argument("--prefix", required=True, help="result files <prefix>-<seq>.json")
    parser.add_argument(
        "--target-entropy",
        type=float,
        help="nats: scale the logits of a dummy-weight model to this mean next-token entropy",
    )
    args = parser.parse_args(argv)
    if args.target_entropy is not None:  # apply_model's function reaches an engine core process
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from vllm import LLM

    t0 = time.perf_counter()
    llm = LLM(model=args.model, seed=0, **json.loads(args.engine_args))
    ready = {"startup_s": time.perf_counter() - t0, "pid": os.getpid(), **worker_provenance()}
    if args.target_entropy is not None:
        from verify.ab.output_entropy import calibrate

        ready["output_entropy"] = calibrate(llm, args.target_entropy)
    ready["kv_cache_tokens"] = kv_cache_tokens(llm)
    scheduler = llm.llm_engine.vllm_config.scheduler_config
    ready["async_scheduling"] = getattr(scheduler, "async_scheduling", None)
    ready["model_runner"] = model_runner(llm)

    def handle(request: dict) -> dict:
        return run_config(llm, request["config"], request.get("warmup_tokens", 0))

    serve_requests(handle, args.prefix, ready)
    return 0


if __name__ == "__main__":
    code = main()
    # Results are written; skip interpreter teardown, where the engine's C++ threads can abort
    # the process after the work is done (as verify/e2e/worker.py does).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
