"""Step 2 (serving): `vllm serve` per root on 127.0.0.1, `/health` wait, `vllm bench serve` A/B
with interleaved repeats, ratio patched/pristine with a 95% CI. The server lifecycle here is
also used by the accuracy step."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from verify import registry, stats
from verify.ab import rounds as ab_rounds
from verify.ab import vllm_bench
from verify.ab.servers import Server, ServerError, free_port, require_port_free  # noqa: F401
from verify.e2e.common import Context, log_tail, say, workdir, write_result
from verify.errors import PatchbenchError
from verify.verdicts import FAIL
from verify.verdicts import serve_bench as serve_bench_rule

RECORD = "e2e-serve-bench"

METRICS = [
    "output_throughput",
    "request_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
]
#: The engine's own view of a round, from its /metrics before and after (no client in it): on
#: 2 cores the benchmark client and the API server read the stream late, the engine does not.
SERVER_METRICS = ["server_mean_itl_ms"]


def serve_cmd(ctx: Context, port: int, max_model_len: int = 4096) -> list[str]:
    return ctx.runtime.vllm_cmd(
        "serve",
        str(ctx.model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "tiny",
        "--max-model-len",
        str(max_model_len),
        "--seed",
        "0",
        "--enforce-eager",
        # Identity steps on these servers compare runs made one after the other: with prefix
        # caching a later run reuses an earlier run's blocks and prefills only the tail, a
        # different computation. The A/B prompts share no prefixes, so throughput is unaffected.
        "--no-enable-prefix-caching",
        # Stats stay on: the serving rounds read the engine's ITL from /metrics, which
        # --disable-log-stats leaves empty.
        "--uvicorn-log-level",
        "warning",
    )


@contextlib.contextmanager
def ab_servers(ctx: Context, work: Path, health_timeout: float = 600):
    """Both roots served at once (started one after the other: 2 cores)."""
    servers = {}
    try:
        for root in ("pristine", "patched"):
            port = free_port()
            srv = Server(
                serve_cmd(ctx, port),
                ctx.env(root),
                port,
                work / f"server-{root}.log",
                label=f"vllm serve ({root})",
                health_timeout=health_timeout,
            )
            servers[root] = srv
            srv.start()
            srv.wait_healthy()
        yield servers
    finally:
        for srv in servers.values():
            srv.stop()


def bench_cmd(
    ctx: Context,
    srv: Server,
    out_dir: Path,
    name: str,
    num_prompts: int,
    input_len: int,
    output_len: int,
    seed: int,
) -> list[str]:
    return ctx.runtime.vllm_cmd(
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        srv.url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "tiny",
        "--tokenizer",
        str(ctx.model),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        name,
        "--disable-tqdm",
    )


def parse_bench(path: Path) -> dict[str, float]:
    data = json.loads(Path(path).read_text())
    missing = [m for m in METRICS if m not in data]
    if missing:
        raise PatchbenchError(f"bench result {path} lacks {', '.join(missing)}")
    out = {m: float(data[m]) for m in METRICS}
    out["completed"] = data.get("completed")
    return out


def ratio_ci(a: list[float], b: list[float]) -> dict:
    """Paired ratio b/a of interleaved repeats (verify.stats: geometric mean, log-scale 95%
    interval, minimum detectable effect) over the rounds that measured something (the
    verdict's rule: `serve_bench_rule.measured_pairs`); no ratio when none did."""
    a_kept, b_kept, left = serve_bench_rule.measured_pairs(a, b)
    if not a_kept:
        return {
            "ratio": None,
            "ci95": [None, None],
            "n": len(a),
            "degenerate": f"a round measured {min([*a, *b]):.3g} against up to {max([*a, *b]):.3g}",
        }
    r = stats.paired_ratio(a_kept, b_kept)
    out = {"ratio": r.ratio, "ci95": [r.low, r.high], "n": r.n, "mde": r.mde}
    return {**out, "rounds_left_out": left} if left else out


def run_bench(
    ctx: Context,
    servers: dict[str, Server],
    work: Path,
    repeats: int,
    num_prompts: int,
    input_len: int,
    output_len: int,
    first_rep: int = 0,
) -> dict:
    """`repeats` paired rounds numbered from `first_rep` (each root's values per round, and an
    example bench command), after a warm-up of each server when `first_rep` is 0 (later rounds
    run on servers already warm)."""
    for root in ("pristine", "patched") if first_rep == 0 else ():  # first requests are slow
        cmd = bench_cmd(ctx, servers[root], work, f"warmup-{root}.json", 8, input_len, 16, 99)
        with open(work / f"warmup-{root}.log", "w") as fh:
            subprocess.run(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=ctx.runtime.env("pristine"),
                timeout=1200,
            )

    def measure(root: str, index: int) -> dict:
        rep = first_rep + index
        name = f"bench-{root}-{rep}.json"
        cmd = bench_cmd(ctx, servers[root], work, name, num_prompts, input_len, output_len, rep)
        log = work / f"bench-{root}-{rep}.log"
        before = vllm_bench.scrape(servers[root].url)
        with open(log, "w") as fh:
            proc = subprocess.run(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=ctx.runtime.env("pristine"),
                timeout=1200,
            )
        if proc.returncode:
            raise PatchbenchError(
                f"vllm bench serve failed ({root}, repeat {rep}); log tail:\n{log_tail(log)}"
            )
        result = parse_bench(work / name)
        engine = vllm_bench.server_side(before, vllm_bench.scrape(servers[root].url))
        result.update({m: engine[m] for m in SERVER_METRICS if m in engine})
        say(f"bench {root} #{rep}: {result['output_throughput']:.1f} output tok/s")
        return result

    # The A/B core's round loop: paired rounds, order alternating (A B, B A, ...).
    done = ab_rounds.run_rounds(measure, ["pristine", "patched"], repeats, warmup=0)
    runs = {root: [r.values[root] for r in done] for root in ("pristine", "patched")}
    return {
        "runs": runs,
        "bench_command_example": bench_cmd(
            ctx, servers["pristine"], work, "X.json", num_prompts, input_len, output_len, 0
        ),
    }


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Per metric: each root's mean and the paired ratio patched/pristine (`ratio_ci`); an
    engine metric only where every round has it (a server without /metrics has none)."""
    rounds = [*runs["pristine"], *runs["patched"]]
    summary = {}
    for m in [*METRICS, *(m for m in SERVER_METRICS if all(m in r for r in rounds))]:
        a = [r[m] for r in runs["pristine"]]
        b = [r[m] for r in runs["patched"]]
        summary[m] = {
            "pristine_mean": statistics.fmean(a),
            "patched_mean": statistics.fmean(b),
            **ratio_ci(a, b),
        }
    return summary


def judge_runs(runs: dict[str, list[dict]], threshold: float):
    """verify.verdicts.serve_bench over the rounds of both roots (the registry's threshold)."""
    return serve_bench_rule.judge(
        {m: [r[m] for r in runs["pristine"]] for m in serve_bench_rule.METRICS},
        {m: [r[m] for r in runs["patched"]] for m in serve_bench_rule.METRICS},
        threshold=threshold,
    )


def judged_with_confirmation(
    runs: dict[str, list[dict]],
    more: Callable[[int], dict[str, list[dict]]],
    confirm: int,
    threshold: float,
) -> tuple:
    """(verdict, runs, note): the verdict of `runs`; a slowdown they resolve is measured again
    before it is believed: `more(confirm)` rounds on the same servers join them and the verdict
    is that of all rounds, `note` saying so. With two rounds on a 2-core machine, a host that
    slowed one server for both of its rounds resolves a slowdown that is not the patch's (1
    CI run in 34); a slowdown the patch makes holds in the rounds that follow."""
    first = judge_runs(runs, threshold)
    if first.outcome != FAIL or confirm <= 0:
        return first, runs, None
    n = len(runs["pristine"])
    say(f"a slowdown resolved in {n} rounds ({first.reason}): {confirm} more to confirm it")
    extra = more(confirm)
    joined = {root: runs[root] + extra[root] for root in runs}
    verdict = judge_runs(joined, threshold)
    note = (
        f"the first {n} rounds resolved a slowdown ({first.reason}); {confirm} more rounds on "
        f"the same servers joined them: {verdict.outcome} over all {n + confirm}"
    )
    return verdict, joined, note


def table(summary: dict) -> str:
    rows = ["| metric | pristine | patched | ratio | 95% CI |", "|---|---:|---:|---:|---|"]
    for m, s in summary.items():
        lo, hi = s["ci95"]
        ci = f"[{lo:.3f}, {hi:.3f}]" if lo is not None else "n/a"
        ratio = f"{s['ratio']:.3f}" if s["ratio"] is not None else "n/a (every pair measured ~0)"
        if s.get("rounds_left_out"):
            ratio += f" ({len(s['rounds_left_out'])} pair(s) left out: a round measured ~0)"
        rows.append(
            f"| {m} | {s['pristine_mean']:.2f} | {s['patched_mean']:.2f} | {ratio} | {ci} |"
        )
    return "\n".join(rows)


def serve_bench(
    ctx: Context,
    *,
    repeats: int = 3,
    num_prompts: int = 32,
    input_len: int = 128,
    output_len: int = 128,
    health_timeout: float = 600,
    servers=None,
) -> bool:
    work = workdir(ctx.version, "serve-bench")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if servers is None:
            servers = stack.enter_context(ab_servers(ctx, work, health_timeout))
        startup = {r: s.startup_s for r, s in servers.items()}
        shape = (num_prompts, input_len, output_len)
        res = run_bench(ctx, servers, work, repeats, *shape)

        def more(count: int) -> dict[str, list[dict]]:
            return run_bench(ctx, servers, work, count, *shape, first_rep=repeats)["runs"]

        threshold = registry.threshold(ctx.version, RECORD)
        judged, res["runs"], confirmation = judged_with_confirmation(
            res["runs"], more, max(4, 2 * repeats), threshold
        )
        res["summary"] = summarize(res["runs"])
    numbers = {
        "server_startup_s": startup,
        "repeats": len(res["runs"]["pristine"]),
        "num_prompts": num_prompts,
        "input_len": input_len,
        "output_len": output_len,
        "step_s": round(time.monotonic() - started, 1),
        **res,
        "workdir": str(work),
    }
    if confirmation:
        numbers["confirmation"] = confirmation
    tab = table(res["summary"])
    numbers["verdict"] = judged.outcome
    numbers.update({f"{m}_patched_over_pristine": v for m, v in judged.numbers.items()})
    say("serving A/B (patched / pristine):\n" + tab + f"\n{judged.outcome}: {judged.reason}")
    # verify.verdicts.serve_bench: output throughput and p99 ITL, each a paired log-scale
    # interval against the registry's threshold; a resolved slowdown was confirmed with more
    # rounds.
    slower = judged.outcome == "fail"
    reason = f"{judged.reason} ({confirmation})" if confirmation else judged.reason
    write_result(
        ctx, RECORD, "series", judged.outcome, numbers, tables=[tab], reason=reason,
    )  # fmt: skip
    return not slower
