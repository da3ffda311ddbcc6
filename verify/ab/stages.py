"""The engine A/B's stages (`python -m verify.ab engine`): a stage per batch shape, its engines
started (one worker per variant, verify/ab/engines.py), side by side, in turn on one GPU or
restarted in blocks, its rounds of cells run in rotating order within the time budget, a planted
variant's seconds slept counted, and the stages' comparisons written into the record."""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from verify.ab import rounds as ab_rounds
from verify.ab.cpus import split_cpus
from verify.ab.engines import (
    SAMPLING_KEYS,
    Engine,
    EngineError,
    worker_command,
)
from verify.ab.servers import say
from verify.ab.variants import variant_env

REPO_ROOT = Path(__file__).resolve().parents[2]


#: Engines' VLLM_PORT when the caller sets none: below Linux's ephemeral range (32768-60999),
#: from which the port-0 binds of vLLM's default port choice draw. Each engine gets its own
#: ENGINE_PORT_SPAN ports from the base: vLLM scans upward from VLLM_PORT for a free one.
ENGINE_PORT_BASE = 20000


ENGINE_PORT_SPAN = 100


def plant_count_env(name: str, env: dict, work: Path) -> dict[str, str]:
    """For a planted variant (PATCHBENCH_PLANT_DELAY_MS or PATCHBENCH_PLANT_GPU_US in `env`):
    PATCHBENCH_PLANT_COUNT, the file its shim keeps "<steps> <seconds planted>" in
    (`with_plant_count` reads it per round)."""
    if not {"PATCHBENCH_PLANT_DELAY_MS", "PATCHBENCH_PLANT_GPU_US"} & set(env):
        return {}
    return {"PATCHBENCH_PLANT_COUNT": str(work / f"plant-count-{name}")}


def with_plant_count(env: dict, run: Callable[[Callable[[], None]], dict]) -> dict:
    """`run(mark)`'s values; for a planted variant (PATCHBENCH_PLANT_COUNT in `env`) with the
    steps its shim counted and the seconds it slept during the run (planted_steps,
    planted_slept_s), counted from the call or from `mark()`, which a run calls where its timed
    part starts (after the benchmark's warm-ups)."""
    planted = env.get("PATCHBENCH_PLANT_COUNT")
    if not planted:
        return run(lambda: None)
    path = Path(planted)
    before = [read_count(path)]

    def mark() -> None:
        before[0] = read_count(path)

    values = run(mark)
    after = read_count(path)
    values["planted_steps"] = after[0] - before[0][0]
    values["planted_slept_s"] = after[1] - before[0][1]
    if after[2] > 0:  # a GPU spin was planted: its measured seconds, beside the host's
        values["planted_gpu_s"] = after[2] - before[0][2]
    return values


def read_count(path: Path) -> tuple[int, float, float]:
    """(engine steps, seconds waited on the host, seconds spun on the GPU) the planted shim
    has written so far (an older shim writes no GPU seconds: 0)."""
    try:
        calls, slept, *gpu = path.read_text().split()
        return int(calls), float(slept), float(gpu[0]) if gpu else 0.0
    except (OSError, ValueError, IndexError):
        return 0, 0.0, 0.0


#: Throughput metrics of a fixed amount of work and the values key of the wall seconds they
#: divide it by: the client's rates over the benchmark's duration (vllm bench serve), one
#: LLM.generate's tokens over its elapsed time (the engine front-end).
WALL_SECONDS = {
    "output_throughput": "duration",
    "request_throughput": "duration",
    "total_token_throughput": "duration",
    "tok_per_s": "elapsed_s",
}


def planted_prediction(
    rnd: ab_rounds.Round, baseline: str, planted: str, metric: str = "output_throughput"
) -> float | None:
    """Ratio planted/baseline of `metric` if every planted delay were on the critical path:
    the baseline's wall time stretched by the time slept (a client rate such as output or
    request throughput, tok_per_s), or each engine step by the mean delay per step
    (server_token_rate, 1 / the server's mean ITL)."""
    slept = rnd.values[planted].get("planted_slept_s")
    steps = rnd.values[planted].get("planted_steps")
    base = rnd.values[baseline]
    if not slept:
        return None
    wall = base.get(WALL_SECONDS.get(metric, ""))
    if wall:
        return wall / (wall + slept)
    if metric == "server_token_rate" and steps and base.get("server_mean_itl_ms"):
        itl = base["server_mean_itl_ms"] / 1000
        return itl / (itl + slept / steps)
    return None


def predicted_ratio(
    rounds: list[ab_rounds.Round], baseline: str, planted: str, metric: str
) -> float | None:
    """The geometric mean of the counted rounds' `planted_prediction`s (None unless every
    counted round has one): what `compare` of the same rounds should find."""
    counted = [r for r in rounds if not r.warmup]
    predicted = [planted_prediction(r, baseline, planted, metric) for r in counted]
    if not predicted or any(p is None for p in predicted):
        return None
    return math.exp(sum(math.log(p) for p in predicted) / len(predicted))


def shape_of(config: dict) -> tuple[int, int, int]:
    """(batch, input length, output length): cells of one shape share a stage's rounds."""
    return config["batch"], config["input_len"], config["output_len"]


@dataclass
class Stage:
    """The cells of one batch shape, measured in rounds of their own."""

    shape: tuple[int, int, int]
    cells: list[str]
    status: str = "not run: not reached"
    rounds: list[ab_rounds.Round] = field(default_factory=list)


def plan_stages(cells: list[str], configs: dict[str, dict]) -> list[Stage]:
    """One stage per shape, in the order the shapes first appear among the cells."""
    stages: dict[tuple, Stage] = {}
    for cell in cells:
        shape = shape_of(configs[cell.split("/", 1)[1]])
        stages.setdefault(shape, Stage(shape, [])).cells.append(cell)
    return list(stages.values())


def rate_key(cell: str, configs: dict[str, dict]) -> tuple[str, str]:
    """(variant, sampling parameters): cells whose seconds per token are alike."""
    variant, config = cell.split("/", 1)
    params = {k: v for k, v in configs[config].items() if k in SAMPLING_KEYS}
    return variant, json.dumps(params, sort_keys=True)


def estimate_round_s(stage: Stage, configs: dict, rates: dict) -> float | None:
    """A round's seconds from the seconds per token measured so far (the slowest rate for a
    cell not seen yet); None before anything was measured."""
    if not rates:
        return None
    slowest = max(rates.values())
    total = 0.0
    for cell in stage.cells:
        batch, _, output_len = shape_of(configs[cell.split("/", 1)[1]])
        total += batch * output_len * rates.get(rate_key(cell, configs), slowest)
    return total


def cells_of(args, variants: dict, configs: dict) -> list[str]:
    cells = args.cell or [f"{v}/{c}" for v in variants for c in configs]
    split = [c.partition("/") for c in cells]
    bad = [f"{v}/{c}" for v, _, c in split if v not in variants or c not in configs]
    if bad:
        raise SystemExit(f"--cell names unknown variants or configs: {bad} (VARIANT/CONFIG)")
    return list(dict.fromkeys(cells))


def comparisons_of(args, cells: list[str], configs: dict) -> list[tuple[str, str]]:
    pairs = [tuple(c.split(":")) for c in args.compare]
    for pair in pairs:
        if len(pair) != 2 or not set(pair) <= set(cells):
            raise SystemExit(f"--compare {':'.join(pair)}: expected CELL:CELL of measured cells")
        a, b = (configs[c.split("/", 1)[1]] for c in pair)
        if shape_of(a) != shape_of(b):
            raise SystemExit(
                f"--compare {':'.join(pair)}: the cells have different shapes, so they are "
                "never measured in the same round"
            )
    return pairs


def engine_ports(count: int, env: dict | None = None) -> list[int]:
    """Each engine's own VLLM_PORT, ENGINE_PORT_SPAN apart from the caller's VLLM_PORT (or
    ENGINE_PORT_BASE). Left to vLLM, engines started at once pick a free port each by binding
    port 0 and closing it, and two of them can draw the same one (EADDRINUSE in
    init_process_group); jobs that share a host set VLLM_PORT apart
    (scripts/gpu_penalties_ab_parallel.sh)."""
    raw = (os.environ if env is None else env).get("VLLM_PORT", "").strip()
    try:
        base = int(raw) if raw else ENGINE_PORT_BASE
    except ValueError:
        raise SystemExit(f"VLLM_PORT={raw!r}: expected a port number") from None
    end = base + count * ENGINE_PORT_SPAN
    if base <= 0 or end > 65536:
        raise SystemExit(f"VLLM_PORT={base}: {count} engines need ports {base}-{end - 1}")
    return [base + i * ENGINE_PORT_SPAN for i in range(count)]


def start_engines(variants: dict, args, work: Path, engines: dict[str, Engine]) -> None:
    """Every variant's worker started at once (start-up overlaps) into `engines`, each with its
    own VLLM_PORT (engine_ports)."""
    cache = Path(args.cache_root) if args.cache_root else work / "cache"
    shares = split_cpus(os.sched_getaffinity(0), len(variants)) if args.pin_cpus else None
    ports = engine_ports(len(variants))
    for i, (name, (paths, env)) in enumerate(variants.items()):
        full_env = variant_env(name, [*paths, str(REPO_ROOT)], env, cache)
        full_env.update(plant_count_env(name, env, work))
        full_env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        full_env["VLLM_PORT"] = env.get("VLLM_PORT", str(ports[i]))  # a variant's own wins
        cmd = worker_command(
            args.python,
            args.model,
            json.loads(args.engine_args),
            work / name,
            args.target_entropy,
        )
        cpus = shares[i] if shares else None
        engines[name] = Engine(cmd, full_env, work / name, f"{name} engine", cpus).start()


def check_capacity(engines: dict[str, Engine], configs: dict, cells: list[str]) -> None:
    """Every cell's batch fits its engine's KV cache without preemption (where it reported its
    size); an EngineError naming the cell otherwise."""
    for cell in cells:
        variant, name = cell.split("/", 1)
        kv = engines[variant].ready.get("kv_cache_tokens")
        batch, input_len, output_len = shape_of(configs[name])
        if kv and batch * (input_len + output_len) > kv:
            raise EngineError(
                f"{cell}: {batch} x ({input_len} + {output_len}) tokens exceed the engine's KV "
                f"cache of {kv} tokens (it would preempt); give more KV cache or a smaller shape"
            )


def measurer(engines: dict[str, Engine], configs: dict, args, deadline: float, rates: dict):
    """`measure(cell, index)` for the round loop: one timed LLM.generate of the cell's config on
    its variant's engine (in `engines` when called), its seconds per token noted in `rates`."""

    def measure(cell: str, index: int) -> dict:
        variant, name = cell.split("/", 1)
        config = configs[name]
        left = deadline + args.grace_s - time.monotonic()
        if left <= 0:
            raise EngineError(f"{cell}: out of time before the measurement")
        engine = engines[variant]
        result = with_plant_count(engine.env, lambda _mark: engine.call({"config": config}, left))
        expected = config["batch"] * config["output_len"]
        if result["output_tokens"] != expected:
            raise EngineError(
                f"{cell}: generated {result['output_tokens']} tokens, expected {expected} "
                "(batch x output_len with ignore_eos): the requests were cut short"
            )
        rates[rate_key(cell, configs)] = result["elapsed_s"] / result["output_tokens"]
        # Everything the worker measured reaches the record (a list of keys to keep would drop
        # each new measurement, such as thread_cpus or gpu); only the token preview stays out.
        return {k: v for k, v in result.items() if k != "first_tokens"}

    return measure


def warm_up(cells: list[str], engines: dict[str, Engine], configs: dict, args, deadline: float):
    """One short call per cell (--warmup-tokens long), not measured."""
    for cell in cells:
        variant, name = cell.split("/", 1)
        request = {"config": configs[name], "warmup_tokens": args.warmup_tokens}
        engines[variant].call(request, timeout=deadline + args.grace_s - time.monotonic())


def say_round(stage: Stage, rnd: ab_rounds.Round, what: str = "round") -> None:
    tput = ", ".join(
        f"{c} {v['tok_per_s']:.0f}"
        + (f" ({v['planted_slept_s']:.3f} s slept)" if "planted_slept_s" in v else "")
        for c, v in rnd.values.items()
    )
    say(f"B={stage.shape[0]} L={stage.shape[2]} {what} {rnd.index}: {tput} tok/s")


def stage_share(stage: Stage, i: int, stages: list, configs: dict, rates: dict, deadline: float):
    """The seconds stage `i` may take (an equal share of the time left), or None with the
    stage marked not run when its estimated round no longer fits."""
    left = deadline - time.monotonic()
    estimate = estimate_round_s(stage, configs, rates)
    if left <= 0 or (estimate is not None and estimate > left):
        need = f"a round needs about {estimate:.0f} s, " if estimate else ""
        stage.status = f"not run: out of time ({need}{max(left, 0):.0f} s left)"
        say(f"stage B={stage.shape[0]} L={stage.shape[2]}: {stage.status}")
        return None
    return left / (len(stages) - i)


def run_stages(stages, engines, configs, args, deadline: float, checkpoint=lambda: None) -> None:
    """Each stage: one warm-up call per cell, then rounds in rotating order within an equal
    share of the time left (`checkpoint()` after each); a stage whose round cannot fit in the
    time left is not run."""
    rates: dict[tuple, float] = {}
    measure = measurer(engines, configs, args, deadline, rates)
    for i, stage in enumerate(stages):
        share = stage_share(stage, i, stages, configs, rates, deadline)
        if share is None:
            continue
        t0 = time.monotonic()
        stage.status = "stopped during warm-up"
        warm_up(stage.cells, engines, configs, args, deadline)

        def progress(rnd: ab_rounds.Round, stage: Stage = stage) -> None:
            stage.rounds.append(rnd)
            stage.status = f"ran {len(stage.rounds)} rounds"
            say_round(stage, rnd)
            checkpoint()

        stage.status = "stopped in its first round"
        ab_rounds.run_rounds(
            measure,
            stage.cells,
            args.rounds,
            warmup=args.warmup,
            budget_s=share - (time.monotonic() - t0),
            on_round=progress,
        )
        if len(stage.rounds) < args.warmup + args.rounds:
            stage.status += f" of {args.warmup + args.rounds} (its share of the time ran out)"


def counted(stage: Stage) -> int:
    return sum(not r.warmup for r in stage.rounds)


def stop_all(engines: dict[str, Engine]) -> None:
    """Every engine stopped and forgotten (a restart block's end)."""
    while engines:
        engines.popitem()[1].stop()


def stage_ends(stages, variants, configs, args, ctx: dict):
    """The stages that still fit, each with the monotonic time its share of the time ends
    (`stage_share`), after `ctx` gets the args, variants, configs and the shared `measure`."""
    rates: dict[tuple, float] = {}
    ctx |= {"args": args, "variants": variants, "configs": configs}
    ctx["measure"] = measurer(ctx["engines"], configs, args, ctx["deadline"], rates)
    for i, stage in enumerate(stages):
        share = stage_share(stage, i, stages, configs, rates, ctx["deadline"])
        if share is not None:
            yield stage, time.monotonic() + share


def run_block(stage: Stage, block: int, ctx: dict, budget_s: float) -> int:
    """One restart block of a stage: every variant's engine started afresh, warmed up, and
    measured in --restart-every rounds (fewer when `budget_s` runs out), each round tagged
    with `block` and numbered on from the stage's last; the engines stopped after it. Returns
    the rounds it ran."""
    args, engines, record = ctx["args"], ctx["engines"], ctx["record"]
    t0 = time.monotonic()
    stage.status = f"stopped starting block {block}'s engines"
    bring_up(ctx["variants"], args, ctx["work"], engines, record)
    record["blocks"].append(
        {
            "block": block,
            "startup_s": {n: record["startup_s"][n] for n in ctx["variants"]},
            "output_entropy": {
                n: record["workers"][n].get("output_entropy") for n in ctx["variants"]
            },
        }
    )
    check_capacity(engines, ctx["configs"], stage.cells)
    warm_up(stage.cells, engines, ctx["configs"], args, ctx["deadline"])
    ran = []

    def progress(rnd: ab_rounds.Round) -> None:
        rnd = replace(rnd, index=len(stage.rounds), block=block)
        ran.append(rnd)
        stage.rounds.append(rnd)
        stage.status = f"ran {len(stage.rounds)} rounds in {block + 1} engine blocks"
        say_round(stage, rnd, f"block {block} round")
        ctx["checkpoint"]()

    budget = budget_s - (time.monotonic() - t0)
    ab_rounds.run_rounds(
        ctx["measure"], stage.cells, args.restart_every, warmup=args.warmup, budget_s=budget,
        on_round=progress,
    )  # fmt: skip
    stop_all(engines)
    return len(ran)


def block_estimate(took: list[float]) -> float:
    """Seconds the next engine block may take: the slowest block after the first (the first
    one's engines also compiled, later ones start from the compile cache), or the first while
    it is the only one (0 before any)."""
    return max(took[1:]) if len(took) > 1 else sum(took)


def run_stages_restarting(stages, variants, configs, args, ctx: dict) -> None:
    """--restart-every K: per stage, blocks of K counted rounds (after --warmup discarded ones),
    every engine started afresh for each block and stopped after it, until the stage's share
    of the time no longer fits another block (`block_estimate`), or --rounds are counted.
    An engine instance's own offset (seen between identical engines at production shapes) then
    varies from block to block, and the comparisons are over blocks (`ab_rounds.paired`)."""
    ctx["record"]["blocks"] = []
    for stage, end in stage_ends(stages, variants, configs, args, ctx):
        took: list[float] = []
        while time.monotonic() + block_estimate(took) < end and counted(stage) < args.rounds:
            t0 = time.monotonic()
            if run_block(stage, len(took), ctx, end - t0) == 0:
                break
            took.append(time.monotonic() - t0)
        block = len(took)
        if block < 2:
            stage.status += " (fewer than two blocks: no interval over engine instances)"


def merge_turns(turns: list[list[ab_rounds.Round]]) -> list[ab_rounds.Round]:
    """The rounds of engines that took turns: round k holds the k-th round of every turn that
    reached it (each variant's cells in the order they ran), so a round past a later turn's
    last still counts for the comparisons within the earlier turn's engine."""
    count = max((len(t) for t in turns), default=0)
    merged = []
    for k in range(count):
        reached = [t[k] for t in turns if k < len(t)]
        order = tuple(c for r in reached for c in r.order)
        values = {c: v for r in reached for c, v in r.values.items()}
        merged.append(ab_rounds.Round(k, order, values, warmup=reached[0].warmup))
    return merged


def run_turn(name: str, cells: list[str], stage: Stage, ctx: dict, cap: int, budget_s: float):
    """One variant's turn on the GPU: its engine started alone, warmed up, measured in rounds
    of its own `cells` (at most `cap` counted) within `budget_s`, and stopped; each round joins
    the stage's rounds as it ends (`ctx["turns"]`' last list) and the record is checkpointed."""
    args, engines, record = ctx["args"], ctx["engines"], ctx["record"]
    got = ctx["turns"][-1]
    t0 = time.monotonic()
    stage.status = f"stopped starting {name}'s engine"
    bring_up({name: ctx["variants"][name]}, args, ctx["work"], engines, record)
    batch, _, output_len = stage.shape
    turn = {"batch": batch, "output_len": output_len, "variant": name}
    record["turns"].append({**turn, "startup_s": record["startup_s"][name], "rounds": 0})
    check_capacity(engines, ctx["configs"], cells)
    stage.status = f"stopped during {name}'s warm-up"
    warm_up(cells, engines, ctx["configs"], args, ctx["deadline"])

    def progress(rnd: ab_rounds.Round) -> None:
        got.append(rnd)
        stage.rounds = merge_turns(ctx["turns"])
        record["turns"][-1]["rounds"] = len(got)
        say_round(stage, rnd, f"{name} round")
        ctx["checkpoint"]()

    stage.status = f"stopped in {name}'s first round"
    budget = budget_s - (time.monotonic() - t0)
    ab_rounds.run_rounds(
        ctx["measure"], cells, cap, warmup=args.warmup, budget_s=budget, on_round=progress
    )
    engines.pop(name).stop()


def check_turns(stages: list[Stage]) -> None:
    """--in-turn rounds rotate a variant's own cells: each variant of a stage needs two."""
    for stage in stages:
        count = Counter(cell.split("/", 1)[0] for cell in stage.cells)
        alone = sorted(v for v, n in count.items() if n < 2)
        if alone:
            raise SystemExit(
                f"--in-turn: {', '.join(alone)} has one cell at B={stage.shape[0]} "
                f"L={stage.shape[2]}; a turn's rounds need two cells of its variant or more"
            )


def run_stages_in_turn(stages, variants, configs, args, ctx: dict) -> None:
    """--in-turn: the variants' engines take turns on one GPU, one engine at a time (shapes
    whose engines do not fit it together). Per stage each variant, in --variant order, gets an
    equal share of the stage's time for `run_turn`; later turns run at most as many counted
    rounds as the first, and round k of the stage joins every turn's k-th (`merge_turns`).
    Penalized over plain stays within one engine and one turn; across variants only their
    ratios meet. `ctx`: engines, record, work, deadline and checkpoint of the front-end."""
    ctx["record"]["turns"] = []
    for stage, end in stage_ends(stages, variants, configs, args, ctx):
        own = {v: [c for c in stage.cells if c.split("/", 1)[0] == v] for v in variants}
        own = {v: cells for v, cells in own.items() if cells}
        ctx["turns"], cap = [], args.rounds
        for k, name in enumerate(own):
            ctx["turns"].append([])
            run_turn(name, own[name], stage, ctx, cap, (end - time.monotonic()) / (len(own) - k))
            cap = min(cap, len(ctx["turns"][-1]) - args.warmup)
            if cap <= 0:
                raise EngineError(f"{name}'s turn ended before a counted round")
        ran = ", ".join(f"{n} {len(t)}" for n, t in zip(own, ctx["turns"], strict=True))
        stage.status = f"ran {ran} rounds in turns"
        if min(len(t) for t in ctx["turns"]) < args.warmup + args.rounds:
            stage.status += f" of {args.warmup + args.rounds} (its share of the time ran out)"


def bring_up(variants: dict, args, work: Path, engines: dict[str, Engine], record: dict) -> None:
    """`variants`' engines started at once (`start_engines`) and ready, their start-up seconds,
    readiness reports and the GPU, torch and vLLM they found noted in `record`."""
    start_engines(variants, args, work, engines)
    for name in variants:
        ready = engines[name].wait_ready(args.start_s)
        record.setdefault("startup_s", {})[name] = round(ready["startup_s"], 1)
        record.setdefault("workers", {})[name] = ready
        record["machine"].update({k: ready.get(k) for k in ("gpu", "torch", "vllm")})


def stage_results(
    record: dict, stages: list[Stage], pairs, threshold: float, quiet: bool = False
) -> None:
    """Rounds (numbered across stages), stages, comparisons (over the rounds that measured both
    cells) and token identity into `record`; `quiet`: the comparisons not printed."""
    flat, record["stages"] = [], []
    for stage in stages:
        rounds = [replace(r, index=len(flat) + k) for k, r in enumerate(stage.rounds)]
        flat += rounds
        batch, input_len, output_len = stage.shape
        record["stages"].append(
            {
                "batch": batch,
                "input_len": input_len,
                "output_len": output_len,
                "cells": stage.cells,
                "status": stage.status,
                "rounds": [r.index for r in rounds],
            }
        )
    record["rounds"] = ab_rounds.as_records(flat)
    record["comparisons"] = []
    for base, var in pairs:
        stage = next(s for s in stages if base in s.cells and var in s.cells)
        both = [r for r in stage.rounds if base in r.values and var in r.values]
        if not any(not r.warmup for r in both):
            cmp = {"baseline": base, "variant": var, "metric": "tok_per_s", "outcome": "not run"}
            record["comparisons"].append({**cmp, "reason": stage.status})
            continue
        cmp = ab_rounds.compare(
            both, base, var, "tok_per_s", threshold=threshold, higher_is_better=True
        )
        predicted = predicted_ratio(both, base, var, "tok_per_s")
        if predicted is not None:
            cmp["predicted_if_all_on_critical_path"] = predicted
        record["comparisons"].append(cmp)
        if not quiet:
            say(f"{cmp['text']} -> {cmp['outcome']}")
    hashes: dict[str, dict[str, set]] = {}
    for rnd in flat:
        for cell, values in rnd.values.items():
            variant, config = cell.split("/", 1)
            hashes.setdefault(config, {}).setdefault(variant, set()).add(values["token_ids_hash"])
    record["tokens"] = {
        config: {
            "identical": len(set().union(*per.values())) == 1,
            **{v: sorted(h) for v, h in per.items()},
        }
        for config, per in hashes.items()
    }


#: A checkpoint's `stopped`: what the record says if the run never writes its last one.
CHECKPOINT_STOP = (
    "no final record: this is the checkpoint after round {n} ({wall:.0f} s in); the run ended "
    "without writing its record (killed, or its machine given back)"
)
