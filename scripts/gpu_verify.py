#!/usr/bin/env python3
"""GPU steps of the retired verification tier that no A/B-core configuration replaces yet
(embeddings, upstream tests, serving benchmark, gsm8k through lm_eval, microbenchmarks), run
over the offline vLLM bundle (``PYTHONPATH=/tmp/vllm-bundle/site``) and the series' overlay
(``python -m verify.gpu_overlay 0.22.0 --tests .gpu/tests``): each variant is an import root,
a copy of the bundle's site-packages with its files overlaid (``pristine`` is the bundle
itself, checked byte for byte against the sdist first).

    python3 scripts/gpu_verify.py --overlay .gpu/overlay/0.22.0 --steps embed-gritlm --out $OUT

``--list`` prints the steps. Every step writes ``<out>/<step>.json`` (rewritten after every
round, so a run cut short keeps what it measured) with the command, GPU, versions and series
hash.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHIMS = Path("/tmp/pb-shims")
HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))

from verify.ab.engines import (  # noqa: E402  (the A/B core's engine lifecycle)
    Engine,
    digest,
    serve_requests,
)
from verify.ab.variants import COMPILE_ENV  # noqa: E402  (Inductor's deterministic mode)
from verify.gpu.device import (  # noqa: E402  (the device edge: paths, models, import roots)
    MODEL,
    SITES,
    build_grit_model,
    build_model,
    build_sites,
    grit_prompts,
    site_of,
)
from verify.gpu.serve_step import run_serve_bench  # noqa: E402  (serve-bench, gsm8k-lmeval)
from verify.gpu.step_common import compile_env, ratio_ci, say, write_json  # noqa: E402
from verify.results import cpu_model  # noqa: E402


# ---------------------------------------------------------------------------------------------
# engine worker (a child process; PYTHONPATH = one variant's import root)
def worker(args: argparse.Namespace) -> None:
    spec = STEPS[args.step]
    from vllm import LLM

    t0 = time.perf_counter()
    model = build_grit_model() if spec.get("model") == "grit" else MODEL
    llm = LLM(model=str(model), seed=0, **spec["engine"])
    ready = {"startup_s": time.perf_counter() - t0, "pid": os.getpid()}

    def handle(request: dict) -> dict:
        config = spec["configs"][request["config"]]
        return _run_config(llm, spec, config, warmup=request.get("warmup", False))

    serve_requests(handle, args.result_prefix, ready)


def _run_config(llm, spec: dict, config: dict, warmup: bool) -> dict:
    rng = random.Random(0)
    if spec.get("model") == "grit":
        prompts = grit_prompts(config["prompts"] if not warmup else 8, rng)
        t0 = time.perf_counter()
        outs = llm.embed(prompts, use_tqdm=False)
        elapsed = time.perf_counter() - t0
        vectors = [list(map(float, o.outputs.embedding)) for o in outs]
        return {
            "elapsed_s": elapsed,
            "prompts": len(prompts),
            "prompt_tokens": sum(len(p["prompt_token_ids"]) for p in prompts),
            "prompts_per_s": len(prompts) / elapsed,
            "vectors_hash": digest(vectors),
            "dim": len(vectors[0]),
        }
    raise ValueError(f"engine steps run the GritLM model only, not {spec.get('model')!r}")


def start_engine(step: str, variant: str, out: Path, env: dict[str, str]) -> Engine:
    """One variant's LLM for `step` in a worker process (verify.ab.engines.Engine)."""
    prefix = out / "raw" / f"{step}-{variant}"
    cmd = [sys.executable, str(HERE), "_worker", "--step", step, "--result-prefix", str(prefix)]
    engine = Engine(cmd, env, prefix, f"{step} {variant} engine").start()
    try:
        engine.wait_ready(timeout=400)
    except BaseException:
        engine.stop()
        raise
    return engine


def run_engine_step(name: str, out: Path, meta: dict) -> dict:
    spec = STEPS[name]
    data: dict = {**meta, "step": name, "spec": spec, "rounds": [], "startup": {}}
    data["compile_env"] = COMPILE_ENV
    engines: dict[str, Engine] = {}
    try:
        for variant in spec["variants"]:
            env = dict(os.environ, PYTHONPATH=str(site_of(variant)), **spec.get("env", {}))
            env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_SAMPLE_TOKENS_TIMING="1")
            compile_env(env, name)
            say(f"{name}: starting {variant} engine")
            engines[variant] = start_engine(name, variant, out, env)
            data["startup"][variant] = engines[variant].ready
            say(f"{name}: {variant} ready in {engines[variant].ready['startup_s']:.0f} s")
        for config in spec["configs"]:
            for engine in engines.values():
                engine.call({"op": "run", "config": config, "warmup": True}, 400)
        variants = list(spec["variants"])
        for repeat in range(spec.get("repeats", 1)):
            for i, config in enumerate(spec["configs"]):
                order = variants if (repeat + i) % 2 == 0 else variants[::-1]
                for variant in order:
                    result = engines[variant].call({"op": "run", "config": config}, 400)
                    data["rounds"].append(
                        {"repeat": repeat, "config": config, "variant": variant, **result}
                    )
                    say(f"{name}: {config} {variant} r{repeat}: " + _brief(result))
                data["summary"] = summarize(spec, data["rounds"])
                write_json(out / f"{name}.json", data)
    finally:
        for engine in engines.values():
            engine.stop()
    data["summary"] = summarize(spec, data["rounds"])
    return data


def _brief(result: dict) -> str:
    return f"{result['prompts_per_s']:.0f} prompts/s in {result['elapsed_s']:.2f} s"


def summarize(spec: dict, rounds: list[dict]) -> dict:
    variants = spec["variants"]
    base = variants[0]
    summary: dict = {}
    for config in spec["configs"]:
        rows = [r for r in rounds if r["config"] == config]
        metric, hash_key = "prompts_per_s", "vectors_hash"
        per = {v: [r for r in rows if r["variant"] == v] for v in variants}
        entry: dict = {"metric": metric}
        for v in variants:
            entry[v] = {
                metric: [r[metric] for r in per[v]],
                "hashes": sorted({r[hash_key] for r in per[v]}),
            }
        for v in variants[1:]:
            n = min(len(per[base]), len(per[v]))
            entry[f"{v}_over_{base}"] = ratio_ci(
                [r[metric] for r in per[base][:n]], [r[metric] for r in per[v][:n]]
            )
        all_hashes = {h for v in variants for h in entry[v]["hashes"]}
        entry["outputs_identical"] = len(all_hashes) == 1
        summary[config] = entry
    return summary


# ---------------------------------------------------------------------------------------------
# upstream tests
UPSTREAM_TESTS = [
    "tests/v1/sample/test_rejection_sampler.py",
    "tests/v1/sample/test_sampler.py",
    "tests/v1/worker/test_gpu_input_batch.py",
]


def series_tests(tests_dir: Path) -> list[str]:
    """The test files the series adds (read from the packed ``patched`` tree, so a new
    patch's tests run without a list to keep)."""
    patched = tests_dir / "patched"
    found = (str(p.relative_to(patched)) for p in patched.rglob("test_*.py"))
    return sorted(set(found) - set(UPSTREAM_TESTS))


def _pytest_both(
    roots: dict[str, Path], out: Path, extra: list[str], added: list[str]
) -> dict[str, tuple]:
    """Run pytest for each variant at once (`added`: the series' own test files, patched
    only); returns {variant: (returncode, junit, cmd)}."""
    procs = {}
    for variant, root in roots.items():
        files = UPSTREAM_TESTS + (added if variant == "patched" else [])
        junit = out / "raw" / f"upstream-tests-{variant}.xml"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "4",
            f"--junitxml={junit}",
            *extra,
            *files,
        ]
        env = dict(
            os.environ,
            PYTHONPATH=f"{site_of(variant)}:{root}:{SHIMS}",
            VLLM_USE_FLASHINFER_SAMPLER="0",
        )  # FlashInfer is not in the bundle
        log = open(out / "raw" / f"upstream-tests-{variant}.log", "a")
        say(f"upstream-tests: {variant}: {' '.join(cmd[3:])}")
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs[variant] = (proc, junit, cmd, log)
    results = {}
    for variant, (proc, junit, cmd, log) in procs.items():
        rc = proc.wait(timeout=500)
        log.close()
        results[variant] = (rc, junit, cmd)
    return results


def run_upstream_tests(out: Path, meta: dict, tests_dir: Path) -> dict:
    """pytest on the touched areas' upstream test files, pristine and patched side by side
    (two processes at once: correctness, not timing). The patched tree is the pristine tests
    tree with the series' test files overlaid."""
    import xml.etree.ElementTree as ET

    (SHIMS / "tblib").mkdir(parents=True, exist_ok=True)
    # tests/conftest.py imports tblib (a test-only dependency the GPU image lacks) only to
    # pickle exceptions across subprocesses; none of these tests needs that.
    (SHIMS / "tblib" / "__init__.py").write_text("")
    (SHIMS / "tblib" / "pickling_support.py").write_text("def install(*a, **k):\n    pass\n")
    roots = {"pristine": tests_dir / "pristine", "patched": SITES / "tests-patched"}
    if roots["patched"].exists():
        shutil.rmtree(roots["patched"])
    shutil.copytree(roots["pristine"], roots["patched"])
    shutil.copytree(tests_dir / "patched", roots["patched"], dirs_exist_ok=True)
    data: dict = {**meta, "step": "upstream-tests", "variants": {}}
    added = series_tests(tests_dir)
    for variant, (rc, junit, cmd) in _pytest_both(roots, out, [], added).items():
        if rc in (2, 3, 4):  # collection/usage error: retry without the repo's conftest.py
            say(f"upstream-tests: {variant}: rc {rc}; retrying with --noconftest")
            retry = _pytest_both({variant: roots[variant]}, out, ["--noconftest"], added)
            rc, junit, cmd = retry[variant]
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        failed: list[str] = []
        if junit.exists():
            for suite in ET.parse(junit).getroot().iter("testsuite"):
                for key in counts:
                    counts[key] += int(suite.get(key, 0))
            for case in ET.parse(junit).getroot().iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    classname = case.get("classname", "")  # rootdir-independent name
                    classname = classname[classname.find("tests.") :]
                    failed.append(f"{classname}::{case.get('name')}")
        counts["passed"] = (
            counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        )
        tail = (out / "raw" / f"upstream-tests-{variant}.log").read_text()[-1500:]
        data["variants"][variant] = {
            "returncode": rc,
            "command": " ".join(cmd[1:]),
            **counts,
            "failed": failed,
            "log_tail": tail,
        }
        say(f"upstream-tests: {variant}: rc {rc} {counts}")
    pristine_failed = set(data["variants"]["pristine"]["failed"])
    data["summary"] = {
        "new_failures": sorted(set(data["variants"]["patched"]["failed"]) - pristine_failed),
        "pre_existing_failures": sorted(
            pristine_failed & set(data["variants"]["patched"]["failed"])
        ),
    }
    return data


# ---------------------------------------------------------------------------------------------
# microbenchmarks (each its own script and process; one failing does not stop the others)
def micro_jobs(out: Path, overlay: Path, roots_018: Path | None) -> dict[str, list[str]]:
    """{job: its command} of the micro step: 003 host build vs L, 000 sampler call, 003's
    double-buffered CUDA staging under a busy stream (race check with a control), 0008 / 0010's
    dense vs sparse vs one-pass penalty math (the compiled repetition op as in the engine) and,
    with the 0.18.1 roots, 002's pooling prompt ids."""
    py, scripts = sys.executable, HERE.parent
    penalties = str(overlay / "patched" / "vllm" / "v1" / "sample" / "ops" / "penalties.py")
    utils = site_of("pristine") / "vllm" / "model_executor" / "layers" / "utils.py"
    jobs = {
        "003": [py, str(scripts / "bench_penalty_host_cpu.py"), "--pin", "0.22.0",
                "--device", "cuda", "--patched-files", str(site_of("patched")),
                "--out", str(out / "micro-003.json")],
        "000": [py, str(scripts / "gpu_mrv2_sampler_bench.py"),
                "--pristine-root", str(site_of("pristine")),
                "--patched-root", str(site_of("patched")), "--overlay", str(overlay),
                "--out", str(out / "micro-000.json")],
        "003-staging": [py, str(scripts / "gpu_check_penalty_staging.py"),
                        "--penalties", penalties, "--out", str(out / "gpu_check_003_staging.json")],
        "003-apply": [py, str(scripts / "bench_penalties_apply.py"), "--device", "cuda",
                      "--pristine-utils", str(utils), "--patched-penalties", penalties,
                      "--lengths", "256,1024,4096,8192,12288",
                      "--one-pass",  # 0010: the path the patched engine takes on CUDA
                      "--out", str(out / "micro-003-apply.json")],
    }  # fmt: skip
    if roots_018:
        jobs["002"] = [py, str(scripts / "gpu_pooling_prompt_ids_bench.py"), "--device", "cuda",
                       "--roots", str(roots_018), "--out", str(out / "micro-002.json")]  # fmt: skip
    return jobs


def run_micro(out: Path, meta: dict, overlay: Path, roots_018: Path | None) -> dict:
    jobs = micro_jobs(out, overlay, roots_018)
    data: dict = {**meta, "step": "micro", "jobs": {}}
    for name, cmd in jobs.items():
        t0 = time.perf_counter()
        log = out / "raw" / f"micro-{name}.log"
        with open(log, "w") as fh:
            try:
                rc = subprocess.run(
                    cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=240, cwd=HERE.parents[1]
                ).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        data["jobs"][name] = {
            "command": " ".join(cmd[1:]),
            "returncode": rc,
            "wall_s": time.perf_counter() - t0,
            "log_tail": log.read_text()[-1500:],
        }
        say(f"micro {name}: rc {rc} in {time.perf_counter() - t0:.0f} s")
    data["summary"] = {k: v["returncode"] for k, v in data["jobs"].items()}
    return data


def overlay_patch_hashes(overlay: Path) -> dict[str, str]:
    """{patch subject: diff hash} the overlay was packed from (verify.gpu_overlay), or {}."""
    path = overlay / "PATCH_HASHES.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ---------------------------------------------------------------------------------------------
V1 = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}


STEPS: dict[str, dict] = {
    # step 4: pooling with a pooler that reads prompt token ids on the host
    "embed-gritlm": {
        "seed": "002",
        "model": "grit",
        "variants": ["pristine", "patched"],
        "repeats": 3,
        "env": V1,
        "engine": {"runner": "pooling", "max_model_len": 1024, "gpu_memory_utilization": 0.3},
        "configs": {"embed": {"prompts": 2048}},
    },
}
OTHER_STEPS = {
    "upstream-tests": "step 6: pytest, pristine vs patched",
    "serve-bench": "step 7 (+ gsm8k identity; lm_eval with --lmeval-site)",
    "micro": "microbenchmarks: 003 host build vs L, 000 sampler call, 002 pooling (0.18.1); "
    "003 staging race check",
    "gsm8k-lmeval": "step 7's servers without the bench: gsm8k identity (+ lm_eval)",
}


def list_steps() -> None:
    """--list: one line per step."""
    for name, spec in STEPS.items():
        print(f"{name:16} seed {spec['seed']}: {', '.join(spec['configs'])}")
    for name, text in OTHER_STEPS.items():
        print(f"{name:16} {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    w = sub.add_parser("_worker")
    w.add_argument("--step", required=True)
    w.add_argument("--result-prefix", required=True)
    parser.add_argument("--version", default="0.22.0")
    parser.add_argument("--overlay", type=Path)
    parser.add_argument("--tests", type=Path, help="folder made by verify.gpu_overlay --tests")
    parser.add_argument("--gsm8k", type=Path, help="gsm8k test.jsonl for the serve step")
    parser.add_argument(
        "--lmeval-site", type=Path, help="unpacked .gpu/lmeval/site.tar.xz (lm_eval in serve-bench)"
    )
    parser.add_argument(
        "--roots-018", type=Path, help="0.18.1 roots for the 002 microbenchmark (micro step)"
    )
    parser.add_argument("--steps", default="", help="NAME[,NAME...] (--list names them)")
    parser.add_argument("--repeats", type=int, help="override the engine steps' repeats")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/pb-out")))
    args = parser.parse_args()
    if args.cmd == "_worker":
        worker(args)
        return 0
    if args.list:
        list_steps()
        return 0
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS and s not in OTHER_STEPS]
    if unknown or not steps or not args.overlay:
        why = f"unknown steps {unknown}" if unknown else "--overlay is required"
        parser.error(why if steps else "--steps: name one or more steps (--list names them)")
    import torch

    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    variants = {"pristine", "patched"} | {
        v for s in steps if s in STEPS for v in STEPS[s]["variants"]
    }
    t0 = time.perf_counter()
    meta = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "vllm_version": args.version,
        "series_hash": (args.overlay / "SERIES_HASH").read_text().strip(),
        "patch_hashes": overlay_patch_hashes(args.overlay),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **build_sites(args.overlay, variants),
    }
    if args.repeats:
        for name in steps:
            if name in STEPS:
                STEPS[name]["repeats"] = args.repeats
    build_model()
    say(f"import roots and model ready in {time.perf_counter() - t0:.0f} s")
    for name in steps:
        t0 = time.perf_counter()
        try:
            if name in STEPS:
                data = run_engine_step(name, args.out, meta)
            elif name == "upstream-tests":
                data = run_upstream_tests(args.out, meta, args.tests)
            elif name == "micro":
                data = run_micro(args.out, meta, args.overlay, args.roots_018)
            else:
                data = run_serve_bench(args.out, meta, args.gsm8k, args.lmeval_site, step=name)
        except Exception as exc:  # keep going: one failed step must not cost the others
            say(f"{name} FAILED: {exc}")
            partial = args.out / f"{name}.json"
            data = json.loads(partial.read_text()) if partial.exists() else {**meta, "step": name}
            data["error"] = str(exc)[-4000:]
        data["step_wall_s"] = time.perf_counter() - t0
        write_json(args.out / f"{name}.json", data)
        say(
            f"{name} done in {data['step_wall_s']:.0f} s: "
            + json.dumps(data.get("summary", data.get("error")), default=str)[:2000]
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
