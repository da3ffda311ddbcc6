"""The A/B core's front-ends: `serve` (vllm serve + vllm bench serve) and `engine` (LLM.generate).

Serving A/B through the core: `python -m verify.ab serve ...` starts one `vllm serve` per
variant (all kept alive, sized by --serve-args to share the machine), discards warm-up rounds,
runs paired rounds of `vllm bench serve` in rotating order, and writes one record with every
round and each comparison's ratio, 95% interval and minimum detectable effect.

A variant is `NAME=SITE[,KEY=VALUE...]`: SITE goes first on PYTHONPATH (a vLLM import root, or
`plant` for the planted-effect shim in front of the base site), KEY=VALUE are extra
environment. Example (the A/A and planted-effect proof on the GPU machine):

    python3 -m verify.ab serve --model /tmp/pb-model --base-site /tmp/vllm-bundle/site \\
      --variant pristine= --variant pristine2= \\
      --variant planted=plant,PATCHBENCH_PLANT_DELAY_MS=1 \\
      --compare pristine:pristine2 --compare pristine:planted \\
      --serve-args "--gpu-memory-utilization 0.25 --max-model-len 4096 --seed 0" \\
      --bench-args "--dataset-name random --random-input-len 2 --random-output-len 512 \\
                    --num-prompts 128 --ignore-eos" --rounds 60 --budget-s 330 --out ab.json

Generation A/B through the core: `python -m verify.ab engine ...` keeps one vLLM `LLM` per
variant in a worker process (verify/ab/engines.py), all started at once (or taking turns on
one GPU, `--in-turn`, for shapes whose engines do not fit it together), and measures cells
VARIANT/CONFIG (a config: batch, lengths and sampling parameters) as one `LLM.generate` each,
in rotating rounds per batch shape, within a time budget (`--help` says how). A planted variant
(`plant`) gets its steps and seconds slept per cell and a predicted ratio, as in `serve`
(the engine A/A + planted proof: scripts/gpu_engine_aa.sh). Example (the penalty cost;
scripts/gpu_penalties_ab.sh builds the full argument list):

    python3 -m verify.ab engine --model /tmp/pb-model --base-site /tmp/vllm-bundle/site \\
      --variant series=/tmp/pb-sites/patched,VLLM_V1_PENALTY_STATE=0 \\
      --variant patched=/tmp/pb-sites/patched \\
      --config 'plain={"batch": 64, "output_len": 2048, "temperature": 1.0}' \\
      --config 'pen={"batch": 64, "output_len": 2048, "temperature": 1.0, \\
        "presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}' \\
      --compare patched/plain:patched/pen --compare series/pen:patched/pen \\
      --engine-args '{"max_num_seqs": 64, "max_model_len": 2080}' --budget-s 420 --out ab.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from verify import results
from verify.ab import rounds as ab_rounds
from verify.ab.engines import (
    SAMPLING_KEYS,
    Engine,
    EngineError,
    atomic_write,
    check_config,
)
from verify.ab.servers import Server, free_port, say
from verify.ab.stages import (  # noqa: F401  (the front-end's names, as tests import them)
    CHECKPOINT_STOP,
    ENGINE_PORT_BASE,
    ENGINE_PORT_SPAN,
    REPO_ROOT,
    WALL_SECONDS,
    Stage,
    block_estimate,
    bring_up,
    cells_of,
    check_capacity,
    check_turns,
    comparisons_of,
    engine_ports,
    estimate_round_s,
    measurer,
    merge_turns,
    plan_stages,
    plant_count_env,
    planted_prediction,
    predicted_ratio,
    rate_key,
    read_count,
    run_block,
    run_stages,
    run_stages_in_turn,
    run_stages_restarting,
    run_turn,
    say_round,
    shape_of,
    stage_ends,
    stage_results,
    stage_share,
    start_engines,
    stop_all,
    warm_up,
    with_plant_count,
)
from verify.ab.variants import parse_variant, variant_env


def cpu_plan(
    servers: int, per_server: int, available: list[int]
) -> tuple[list[int], list[list[int]]]:
    """(the driver's CPUs, each server's CPUs): `per_server` CPUs of their own per server from
    the top of `available`, the rest (at least one) for the driver and its benchmark client."""
    need = servers * per_server
    if need >= len(available):
        raise SystemExit(
            f"--cpus-per-server {per_server} x {servers} servers needs more than the "
            f"{len(available)} CPUs this process may use (one is kept for the benchmark client)"
        )
    own = available[len(available) - need :]
    return available[: len(available) - need], [
        own[i * per_server : (i + 1) * per_server] for i in range(servers)
    ]


def server_for(
    name: str, paths: list[str], env: dict, args, work: Path, cpus: list[int] | None = None
) -> Server:
    port = free_port()
    full_env = {**variant_env(name, paths, env, work / "cache"), **plant_count_env(name, env, work)}
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", args.model]
    if cpus:  # the server's processes (API server, engine core) inherit the affinity
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
        full_env.setdefault("OMP_NUM_THREADS", str(len(cpus)))
    cmd += ["--host", "127.0.0.1", "--port", str(port), *shlex.split(args.serve_args)]
    return Server(
        cmd, full_env, port, work / f"server-{name}.log", f"vllm serve ({name})", args.health_s
    )


def host_provenance() -> dict:
    """Python and CPU of the machine running the A/B driver (read here, not assumed)."""
    return {"python": platform.python_version(), "cpu": results.cpu_model(), "gpu": None}


def provenance() -> dict:
    """Python, CPU, GPU, torch and vLLM of the machine running the A/B (read here, not assumed)."""
    out = host_provenance()
    with contextlib.suppress(Exception):
        import torch

        out["torch"] = torch.__version__
        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    with contextlib.suppress(Exception):
        import vllm

        out["vllm"] = vllm.__version__
    return out


#: What each comparison is judged on by default: the client's output throughput (vllm bench
#: serve) and the engine's token rate from the server's own inter-token latency (free of client
#: overhead). A pooling server generates no tokens: judge it on request_throughput (--metric).
METRICS = ("output_throughput", "server_token_rate")


def record_head(kind: str, args, variants: dict, machine: dict) -> dict:
    """The start of a record: kind, argv, machine, date, the caller's --meta, the variants."""
    record: dict = {"kind": kind, "argv": sys.argv[1:], "machine": machine}
    record["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    if args.meta:  # what the caller knows of the run (version, series and patch hashes, command)
        record.update(json.loads(Path(args.meta).read_text()))
    record["variants"] = {n: {"pythonpath": p, "env": e} for n, (p, e) in variants.items()}
    return record


def serve_comparisons(
    done: list, comparisons: list[tuple[str, str]], wanted: tuple[str, ...], threshold: float
) -> list[dict]:
    """Each baseline:variant pair compared on every wanted metric that every counted round of
    every variant has (the first metric at the top level, as records of earlier runs had it)."""
    counted = [r for r in done if not r.warmup]
    metrics = [
        m for m in wanted if counted and all(m in v for r in counted for v in r.values.values())
    ]
    for metric in sorted(set(wanted) - set(metrics)):
        say(f"{metric}: not in every counted round of every variant, not compared")
    found = []
    for base, var in comparisons:
        cmp: dict = {"baseline": base, "variant": var}
        for metric in metrics:
            result = ab_rounds.compare(
                done, base, var, metric, threshold=threshold, higher_is_better=True
            )
            predicted = predicted_ratio(done, base, var, metric)
            if predicted is not None:
                result["predicted_if_all_on_critical_path"] = predicted
            say(f"{metric}: {result['text']} -> {result['outcome']}")
            if metric == wanted[0]:
                cmp.update(result)
            else:
                cmp[metric] = result
        found.append(cmp)
    return found


def serve(args) -> int:
    from verify.ab.vllm_bench import bench_args, run_bench

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    variants = dict(
        (name, (paths, env))
        for name, paths, env in (parse_variant(v, args.base_site) for v in args.variant)
    )
    comparisons = [tuple(c.split(":")) for c in args.compare]
    unknown = {v for c in comparisons for v in c} - set(variants)
    if unknown:
        raise SystemExit(f"--compare names unknown variants {sorted(unknown)}")
    wanted = tuple(args.metric or METRICS)
    started = time.monotonic()
    record = record_head("serve-ab", args, variants, provenance())
    record["metrics"] = list(wanted)
    with contextlib.ExitStack() as stack:
        cpus: dict[str, list[int] | None] = dict.fromkeys(variants)
        if args.cpus_per_server:
            driver, own = cpu_plan(
                len(variants), args.cpus_per_server, sorted(os.sched_getaffinity(0))
            )
            os.sched_setaffinity(0, driver)
            cpus = dict(zip(variants, own, strict=True))
            record["cpus"] = {"driver": driver, **cpus}
        servers = {n: server_for(n, p, e, args, work, cpus[n]) for n, (p, e) in variants.items()}
        for srv in servers.values():
            stack.callback(srv.stop)
            srv.start()
        record["startup_s"] = {n: round(s.wait_healthy(), 1) for n, s in servers.items()}
        bench = {
            n: bench_args(s.url, args.model, args.model, shlex.split(args.bench_args))
            for n, s in servers.items()
        }

        def measure(name: str, index: int) -> dict[str, float]:
            return with_plant_count(
                servers[name].env,
                lambda mark: run_bench(bench[name], seed=index, at_start=mark),
            )

        def progress(rnd: ab_rounds.Round) -> None:
            first = wanted[0]
            tput = ", ".join(
                f"{n} {v.get(first, float('nan')):.1f}"
                + (f" ({v['server_mean_itl_ms']:.3f} ms ITL)" if "server_mean_itl_ms" in v else "")
                for n, v in sorted(rnd.values.items())
            )
            tag = "warm-up" if rnd.warmup else "round"
            say(f"{tag} {rnd.index} ({' '.join(rnd.order)}): {first} {tput}")

        done = ab_rounds.run_rounds(
            measure,
            list(variants),
            args.rounds,
            warmup=args.warmup,
            budget_s=args.budget_s - (time.monotonic() - started),
            on_round=progress,
        )
    record["rounds"] = ab_rounds.as_records(done)
    record["comparisons"] = serve_comparisons(done, comparisons, wanted, args.threshold)
    record["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    say(f"wrote {args.out}")
    return 0


# ---------------------------------------------------------------------------------------------
# engine A/B: one LLM per variant, cells = variant/config, one stage of rounds per batch shape


def parse_config(spec: str) -> tuple[str, dict]:
    """`NAME=JSON` -> (name, config with its input length filled in)."""
    name, _, text = spec.partition("=")
    if not name or "/" in name or ":" in name:
        raise SystemExit(f"--config {spec!r}: expected NAME=JSON (NAME without / or :)")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--config {spec!r}: the value is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise SystemExit(f"--config {spec!r}: the value must be a JSON object")
    try:
        return name, check_config(name, config)
    except EngineError as exc:
        raise SystemExit(str(exc)) from None


def write_record(record: dict, stages: list[Stage], pairs, args, started: float) -> None:
    """The record as it stands (`stage_results`) written to --out at once, whole (replaced,
    never half-written): the front-end's last write, and a checkpoint after every round while
    it runs (`record["stopped"]` then says so), so a run that is killed keeps its rounds."""
    stage_results(record, stages, pairs, args.threshold, quiet="checkpoint" in record)
    record["wall_s"] = round(time.monotonic() - started, 1)
    if "checkpoint" in record:
        record["stopped"] = CHECKPOINT_STOP.format(n=len(record["rounds"]), wall=record["wall_s"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(args.out), record, indent=1)


def engine(args) -> int:
    """`python -m verify.ab engine`: see the epilog of its --help."""
    started = time.monotonic()
    deadline = started + args.budget_s
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    variants = {
        name: (paths, env)
        for name, paths, env in (parse_variant(v, args.base_site) for v in args.variant)
    }
    configs = dict(parse_config(c) for c in args.config)
    cells = cells_of(args, variants, configs)
    pairs = comparisons_of(args, cells, configs)
    stages = plan_stages(cells, configs)
    if args.in_turn:
        check_turns(stages)
    record = record_head("engine-ab", args, variants, host_provenance())
    record.update(configs=configs, cells=cells, engine_args=json.loads(args.engine_args))
    record["metric"] = "tok_per_s (output tokens / wall s of one LLM.generate); ratio = B/A"
    engines: dict[str, Engine] = {}
    code = 0

    def checkpoint() -> None:
        write_record({**record, "checkpoint": True}, stages, pairs, args, started)

    try:
        ctx = {"engines": engines, "record": record, "work": work, "deadline": deadline}
        if args.in_turn:
            record["in_turn"] = True
            run_stages_in_turn(stages, variants, configs, args, ctx | {"checkpoint": checkpoint})
        elif args.restart_every:
            record["restart_every"] = args.restart_every
            run_stages_restarting(stages, variants, configs, args, ctx | {"checkpoint": checkpoint})
        else:
            bring_up(variants, args, work, engines, record)
            check_capacity(engines, configs, cells)
            run_stages(stages, engines, configs, args, deadline, checkpoint)
    except EngineError as exc:
        record["stopped"] = str(exc)
        code = 1
    except KeyboardInterrupt:
        record["stopped"] = "interrupted (SIGINT, e.g. the caller's time limit)"
        code = 1
    except BaseException as exc:  # a bug: the record keeps what was measured, then it is raised
        record["stopped"] = f"{type(exc).__name__}: {exc}"
        code = 1
        raise
    finally:
        if code:
            say(f"stopped: {record['stopped'][:2000]}")
        write_record(record, stages, pairs, args, started)
        say(f"wrote {args.out}")
        for eng in engines.values():
            if code:  # failed or interrupted: no time to let them finish a measurement
                eng.kill()
            else:
                eng.stop()
    return code


ENGINE_EPILOG = """\
A cell is VARIANT/CONFIG; by default every variant runs every config (--cell picks some).
Cells of one batch shape (batch, input_len, output_len) form a stage: a warm-up call per cell
(--warmup-tokens long), then rounds in which every cell of the stage is measured once, in
rotating order. Stages run one after another, each within an equal share of the time left;
a stage whose round no longer fits is recorded as "not run: out of time". The record is
written whatever happens (a failure or SIGINT keeps every whole round).
With --in-turn the engines take turns on the GPU instead of running side by side: per stage,
each variant's engine is started alone, measures rounds of its own cells and is stopped; the
stage's round k joins every turn's k-th round (the record says `in_turn` and lists `turns`).
With --restart-every K every engine is started afresh after each K counted rounds (rounds carry
their `block`; the record lists `blocks` with each block's start-up and calibrated entropy), and
each comparison's interval is over the blocks, so an engine instance's own offset is in it.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verify.ab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_arguments(
        sub.add_parser("serve", help="serving A/B of variants through vllm serve + bench serve")
    )
    _engine_arguments(
        sub.add_parser(
            "engine",
            help="generation A/B of variants x configs, one LLM per variant",
            epilog=ENGINE_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    return parser


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--base-site", default="", help="the vLLM import root every variant builds on")
    p.add_argument("--variant", action="append", required=True, help="NAME=SITE[,KEY=VALUE...]")
    p.add_argument("--compare", action="append", default=[], help="BASELINE:VARIANT")
    p.add_argument("--serve-args", default="")
    p.add_argument("--bench-args", default="")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=1e9, help="stop before a round past this")
    p.add_argument("--threshold", type=float, default=0.01, help="noise threshold (fraction)")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        help="a round metric to compare (repeatable; the first is the record's headline; "
        f"default: {', '.join(METRICS)}); e.g. request_throughput for a pooling server",
    )
    p.add_argument("--health-s", type=float, default=600)
    p.add_argument(
        "--cpus-per-server",
        type=int,
        default=0,
        help="pin each server to this many CPUs of its own (taskset) and the driver to the rest",
    )
    p.add_argument("--work", default="ab-work")
    p.add_argument("--meta", help="a JSON object merged into the record (version, hashes...)")
    p.add_argument("--out", required=True)


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--base-site", default="", help="the vLLM import root every variant builds on")
    p.add_argument("--variant", action="append", required=True, help="NAME=SITE[,KEY=VALUE...]")
    p.add_argument(
        "--config",
        action="append",
        required=True,
        help="NAME=JSON: batch, output_len, input_len (default 32) and SamplingParams "
        f"({', '.join(SAMPLING_KEYS)}; seed: request i gets seed+i)",
    )
    p.add_argument("--cell", action="append", default=[], help="VARIANT/CONFIG (default: all)")
    p.add_argument("--compare", action="append", default=[], help="CELL:CELL (ratio B/A)")
    p.add_argument("--engine-args", default="{}", help="JSON: keyword arguments of vllm.LLM")
    p.add_argument("--python", default=sys.executable, help="the workers' Python")
    p.add_argument(
        "--target-entropy",
        type=float,
        help="nats: each engine scales a dummy-weight model's logits to this mean next-token "
        "entropy before it measures (verify/ab/output_entropy.py; the record's workers say "
        "what was measured)",
    )
    p.add_argument("--rounds", type=int, default=20, help="rounds per stage (at most)")
    p.add_argument("--warmup", type=int, default=0, help="discarded rounds per stage")
    p.add_argument("--warmup-tokens", type=int, default=16, help="the warm-up call's length")
    p.add_argument("--budget-s", type=float, default=1e9, help="all stages end by then")
    p.add_argument("--grace-s", type=float, default=30, help="a measurement may overrun by this")
    p.add_argument("--start-s", type=float, default=600, help="engine start-up timeout")
    p.add_argument("--threshold", type=float, default=0.01, help="noise threshold (fraction)")
    p.add_argument("--work", default="ab-work")
    p.add_argument("--cache-root", help="VLLM_CACHE_ROOT/<variant> (default: WORK/cache)")
    p.add_argument(
        "--pin-cpus",
        action="store_true",
        help="give each engine its own consecutive share of this process's CPUs",
    )
    p.add_argument(
        "--in-turn",
        action="store_true",
        help="one engine at a time: the variants take turns on the GPU per stage (shapes "
        "whose engines do not fit it together); each variant needs two cells or more",
    )
    p.add_argument(
        "--restart-every",
        type=int,
        default=0,
        metavar="K",
        help="start every engine afresh after each K counted rounds; comparisons are then "
        "over these blocks (engine instances), not over rounds",
    )
    p.add_argument("--meta", help="a JSON object merged into the record (version, hashes...)")
    p.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return engine(args) if args.command == "engine" else serve(args)


if __name__ == "__main__":
    sys.exit(main())
