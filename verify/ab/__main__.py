"""Serving A/B through the core: `python -m verify.ab serve ...` starts one `vllm serve` per
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
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from verify.ab import rounds as ab_rounds
from verify.ab.servers import Server, free_port, say

PLANT_SITE = Path(__file__).resolve().parent / "plant"


def parse_variant(spec: str, base_site: str) -> tuple[str, list[str], dict[str, str]]:
    """`NAME=SITE[,K=V...]` -> (name, PYTHONPATH entries, extra env)."""
    name, _, rest = spec.partition("=")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise SystemExit(f"--variant {spec!r}: expected NAME=SITE[,KEY=VALUE...]")
    site, *pairs = rest.split(",") if rest else [""]
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise SystemExit(f"--variant {spec!r}: {bad} is not KEY=VALUE")
    if site == "plant":
        paths = [str(PLANT_SITE), base_site]
    elif site and is_full_install(Path(site)):
        paths = [site]  # a whole vLLM installation (e.g. a patched wheel's bundle): alone
    else:
        paths = [site or base_site] + ([base_site] if site and site != base_site else [])
    return name, paths, env


def is_full_install(site: Path) -> bool:
    """Whether `site` holds an installed vLLM distribution (a wheel's dist-info), not overlay
    files meant to be laid in front of the base site."""
    return any(site.glob("vllm-*.dist-info/METADATA"))


def server_for(name: str, paths: list[str], env: dict, args, work: Path) -> Server:
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "VLLM_CACHE_ROOT": str(work / "cache" / name),
        "TORCHINDUCTOR_DETERMINISTIC": "1",
        **env,
    }
    if "PATCHBENCH_PLANT_DELAY_MS" in env:
        full_env["PATCHBENCH_PLANT_COUNT"] = str(work / f"plant-count-{name}")
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", args.model]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *shlex.split(args.serve_args)]
    return Server(
        cmd, full_env, port, work / f"server-{name}.log", f"vllm serve ({name})", args.health_s
    )


def read_count(path: Path) -> tuple[int, float]:
    """(engine steps, seconds slept) the planted shim has written so far."""
    try:
        calls, slept = path.read_text().split()
        return int(calls), float(slept)
    except (OSError, ValueError):
        return 0, 0.0


def provenance() -> dict:
    """Python, CPU, GPU, torch and vLLM of the machine running the A/B (read here, not assumed)."""
    out: dict = {"python": platform.python_version(), "cpu": platform.processor(), "gpu": None}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                out["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(Exception):
        import torch

        out["torch"] = torch.__version__
        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    with contextlib.suppress(Exception):
        import vllm

        out["vllm"] = vllm.__version__
    return out


def planted_prediction(
    rnd: ab_rounds.Round, baseline: str, planted: str, metric: str = "output_throughput"
) -> float | None:
    """Ratio planted/baseline of `metric` if every planted delay were on the critical path:
    the client's run stretched by the time slept (output_throughput), or each engine step by
    the mean delay per step (server_token_rate, the inverse of the server's mean ITL)."""
    slept = rnd.values[planted].get("planted_slept_s")
    steps = rnd.values[planted].get("planted_steps")
    base = rnd.values[baseline]
    if not slept:
        return None
    if metric == "output_throughput" and base.get("duration"):
        return base["duration"] / (base["duration"] + slept)
    if metric == "server_token_rate" and steps and base.get("server_mean_itl_ms"):
        itl = base["server_mean_itl_ms"] / 1000
        return itl / (itl + slept / steps)
    return None


#: What each comparison is judged on: the client's output throughput (vllm bench serve) and
#: the engine's token rate from the server's own inter-token latency (free of client overhead).
METRICS = ("output_throughput", "server_token_rate")


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
    started = time.monotonic()
    record: dict = {"kind": "serve-ab", "argv": sys.argv[1:], "machine": provenance()}
    record["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    if args.meta:  # what the caller knows of the run (version, series and patch hashes, command)
        record.update(json.loads(Path(args.meta).read_text()))
    record["variants"] = {n: {"pythonpath": p, "env": e} for n, (p, e) in variants.items()}
    with contextlib.ExitStack() as stack:
        servers = {n: server_for(n, p, e, args, work) for n, (p, e) in variants.items()}
        for srv in servers.values():
            stack.callback(srv.stop)
            srv.start()
        record["startup_s"] = {n: round(s.wait_healthy(), 1) for n, s in servers.items()}
        bench = {
            n: bench_args(s.url, args.model, args.model, shlex.split(args.bench_args))
            for n, s in servers.items()
        }

        def measure(name: str, index: int) -> dict[str, float]:
            planted = servers[name].env.get("PATCHBENCH_PLANT_COUNT")
            count = Path(planted) if planted else None
            before = read_count(count) if count else (0, 0.0)
            values = run_bench(bench[name], seed=index)
            if count:
                after = read_count(count)
                values["planted_steps"] = after[0] - before[0]
                values["planted_slept_s"] = after[1] - before[1]
            return values

        def progress(rnd: ab_rounds.Round) -> None:
            tput = ", ".join(
                f"{n} {v['output_throughput']:.0f}"
                + (f" ({v['server_mean_itl_ms']:.3f} ms ITL)" if "server_mean_itl_ms" in v else "")
                for n, v in sorted(rnd.values.items())
            )
            tag = "warm-up" if rnd.warmup else "round"
            say(f"{tag} {rnd.index} ({' '.join(rnd.order)}): {tput} out tok/s")

        done = ab_rounds.run_rounds(
            measure,
            list(variants),
            args.rounds,
            warmup=args.warmup,
            budget_s=args.budget_s - (time.monotonic() - started),
            on_round=progress,
        )
    record["rounds"] = ab_rounds.as_records(done)
    record["comparisons"] = []
    counted = [r for r in done if not r.warmup]
    metrics = [
        m for m in METRICS if counted and all(m in v for r in counted for v in r.values.values())
    ]
    for base, var in comparisons:
        cmp: dict = {}
        for metric in metrics:
            result = ab_rounds.compare(
                done, base, var, metric, threshold=args.threshold, higher_is_better=True
            )
            predicted = [planted_prediction(r, base, var, metric) for r in counted]
            if predicted and all(p is not None for p in predicted):
                geo = math.exp(sum(math.log(p) for p in predicted) / len(predicted))
                result["predicted_if_all_on_critical_path"] = geo
            say(f"{metric}: {result['text']} -> {result['outcome']}")
            if metric == METRICS[0]:
                cmp.update(result)  # the client's metric at top level (records of earlier runs)
            else:
                cmp[metric] = result
        record["comparisons"].append(cmp)
    record["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    say(f"wrote {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m verify.ab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serving A/B of variants through vllm serve + bench serve")
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
    p.add_argument("--health-s", type=float, default=600)
    p.add_argument("--work", default="ab-work")
    p.add_argument("--meta", help="a JSON object merged into the record (version, hashes...)")
    p.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
