"""The serving step of ``scripts/gpu_verify.py`` (``serve-bench``, ``gsm8k-lmeval``): `vllm
serve` of the pristine and patched import roots, `vllm bench serve` rounds between them, then
greedy gsm8k completions on both servers (per-sample identity) and gsm8k through lm_eval."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from verify.ab.engines import digest
from verify.ab.servers import Server  # scipy: a vLLM dependency, so on the device too
from verify.ab.variants import COMPILE_ENV
from verify.gpu.device import BUNDLE, MODEL, site_of
from verify.gpu.step_common import compile_env, ratio_ci, say, write_json


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", *args]


def _complete(port: int, prompt: str, max_tokens: int) -> str:
    body = json.dumps(
        {
            "model": str(MODEL),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 0,
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["choices"][0]["text"]


def _gsm8k_prompts(path: Path, count: int) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()[:count]]
    return [
        (f"Question: {r['question']}\nAnswer:", r["answer"].split("####")[-1].strip()) for r in rows
    ]


def _bench_round(out: Path, variant: str, port: int, repeat: int) -> dict:
    """One `vllm bench serve` run of seed 000's workload against `variant`'s server: the
    throughputs, latencies and counts the step keeps."""
    name = f"bench-{variant}-{repeat}.json"
    cmd = _cli("bench", "serve", "--model", str(MODEL), "--dataset-name", "random",
               "--host", "127.0.0.1", "--port", str(port), "--random-input-len", "2",
               "--random-output-len", "512", "--request-rate", "inf", "--num-prompts", "128",
               "--num-warmups", "16", "--ignore-eos", "--seed", "0", "--save-result",
               "--result-dir", str(out / "raw"), "--result-filename", name)  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(site_of(variant)))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise RuntimeError(f"bench serve failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    result = json.loads((out / "raw" / name).read_text())
    kept = ("output_throughput", "request_throughput", "median_tpot_ms", "p99_tpot_ms",
            "median_itl_ms", "p99_itl_ms", "median_ttft_ms", "p99_ttft_ms", "completed",
            "total_output_tokens")  # fmt: skip
    return {k: result.get(k) for k in kept}


def run_serve_bench(
    out: Path,
    meta: dict,
    gsm8k: Path | None,
    lmeval_site: Path | None = None,
    step: str = "serve-bench",
) -> dict:
    """Step 7. As ``gsm8k-lmeval``: the same two servers, gsm8k checks only (no bench)."""
    variants = ["pristine", "patched"]
    ports = {"pristine": 8101, "patched": 8102}
    bench = step == "serve-bench"
    data: dict = {**meta, "step": step, "rounds": [], "startup": {}, "compile_env": COMPILE_ENV}
    servers: dict[str, Server] = {}
    try:
        for variant in variants:  # one after the other: each sizes its KV cache from free memory
            env = dict(os.environ, PYTHONPATH=str(site_of(variant)), VLLM_USE_V2_MODEL_RUNNER="1")
            compile_env(env, step)
            cmd = _cli(
                "serve",
                str(MODEL),
                "--port",
                str(ports[variant]),
                "--host",
                "127.0.0.1",
                "--gpu-memory-utilization",
                "0.4",
                "--max-model-len",
                "4096",  # 5-shot gsm8k prompts for lm_eval (this tokenizer: ~1.5k tokens)
                "--seed",
                "0",
            )
            log = out / "raw" / f"serve-{variant}.log"
            servers[variant] = Server(cmd, env, ports[variant], log, f"vllm serve ({variant})", 300)
            servers[variant].start()
            data["startup"][variant] = servers[variant].wait_healthy()
        for repeat in range(3 if bench else 0):
            for variant in variants if repeat % 2 == 0 else variants[::-1]:
                keep = _bench_round(out, variant, ports[variant], repeat)
                data["rounds"].append({"repeat": repeat, "variant": variant, **keep})
                say(f"serve-bench: {variant} r{repeat}: {keep['output_throughput']:.0f} out tok/s")
        if bench:
            a = [r["output_throughput"] for r in data["rounds"] if r["variant"] == "pristine"]
            b = [r["output_throughput"] for r in data["rounds"] if r["variant"] == "patched"]
            data["summary"] = {"output_throughput_patched_over_pristine": ratio_ci(a, b)}
            write_json(out / f"{step}.json", data)
        if gsm8k:
            data["gsm8k"] = _gsm8k_identity(ports, gsm8k)
            write_json(out / f"{step}.json", data)
        if gsm8k and lmeval_site:
            try:
                data["lm_eval"] = _lm_eval(
                    ports, out, lmeval_site.resolve(), gsm8k.parent.resolve(), limit=64
                )
            except Exception as exc:  # keep the bench and identity results
                data["lm_eval"] = {"error": str(exc)[-3000:]}
                say(f"serve-bench: lm_eval FAILED: {exc}")
    finally:
        for srv in servers.values():
            srv.stop(grace=30)
    return data


def _gsm8k_identity(ports: dict[str, int], path: Path, count: int = 64) -> dict:
    """Greedy gsm8k completions (zero-shot, 256 tokens) from both servers, twice: all prompts in
    flight at once (batch composition, and so float rounding, may differ between servers) and
    one prompt at a time (batch of one on both sides, nothing left to differ but the code).
    Per-sample identity and strict-match accuracy (~0 with random weights)."""
    from concurrent.futures import ThreadPoolExecutor

    prompts = _gsm8k_prompts(path, count)
    pattern = re.compile(r"#### (\-?[0-9\.\,]+)")

    def score(texts: list[str]) -> float:
        hits = 0
        for text, (_, gold) in zip(texts, prompts, strict=True):
            match = pattern.search(text)
            hits += bool(
                match and match.group(1).replace(",", "").rstrip(".") == gold.replace(",", "")
            )
        return hits / len(texts)

    data: dict = {"samples": len(prompts)}
    for mode, workers in (("concurrent", count), ("sequential", 1)):
        answers: dict[str, list[str]] = {}
        for variant, port in ports.items():  # one server at a time
            with ThreadPoolExecutor(max_workers=workers) as pool:
                answers[variant] = list(
                    pool.map(lambda p, port=port: _complete(port, p[0], 256), prompts)
                )
        same = sum(a == b for a, b in zip(answers["pristine"], answers["patched"], strict=True))
        data[mode] = {
            "in_flight": workers,
            "identical_responses": same,
            "differing": [
                i
                for i, (a, b) in enumerate(
                    zip(answers["pristine"], answers["patched"], strict=True)
                )
                if a != b
            ],
            "accuracy": {v: score(t) for v, t in answers.items()},
            "responses_hash": {v: digest(t) for v, t in answers.items()},
        }
        say(f"serve-bench: gsm8k {mode}: {same}/{len(prompts)} identical")
    data["identical_responses"] = data["sequential"]["identical_responses"]
    data["note"] = (
        "greedy /v1/completions, zero-shot 'Question: ...\\nAnswer:' prompts, 256 tokens; random "
        "weights, so accuracy is ~0 by construction"
    )
    return data


def _lm_eval(ports: dict[str, int], out: Path, site: Path, data_dir: Path, limit: int) -> dict:
    """gsm8k through lm_eval local-completions (the CPU tier's task YAML: 5-shot, strict and
    flexible filters) against each server, one request at a time; per-sample identity."""
    from verify.e2e.accuracy import _load, differing_docs, lm_eval_argv, write_task

    tasks = write_task(out / "raw" / "lm_eval-tasks", 256, data=data_dir)
    results, samples, commands = {}, {}, {}
    for variant, port in ports.items():
        target = out / "raw" / f"lm_eval-{variant}"
        url = f"http://127.0.0.1:{port}"
        cmd = lm_eval_argv(sys.executable, url, str(MODEL), MODEL, tasks, target, limit, 1)
        env = dict(
            os.environ,
            PYTHONPATH=f"{site}:{BUNDLE}",
            HF_DATASETS_CACHE=str(out / "raw" / "hf-datasets"),
            HF_DATASETS_OFFLINE="1",
            HF_HUB_OFFLINE="1",
        )
        t0 = time.perf_counter()
        with open(out / "raw" / f"lm_eval-{variant}.log", "w") as log:
            proc = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=420, cwd=out / "raw"
            )
        if proc.returncode:
            tail = (out / "raw" / f"lm_eval-{variant}.log").read_text()[-2000:]
            raise RuntimeError(f"lm_eval ({variant}) rc {proc.returncode}:\n{tail}")
        commands[variant] = " ".join(cmd[1:])
        results[variant], samples[variant] = _load(target)
        say(f"serve-bench: lm_eval {variant} done in {time.perf_counter() - t0:.0f} s")
    differing = sorted(set(differing_docs(samples["pristine"], samples["patched"])))
    docs = {row["doc_id"] for row in samples["pristine"]}
    return {
        "limit": limit,
        "n_samples": len(docs),
        "n_rows": len(samples["pristine"]),  # one per document and filter
        "scores": {v: {k: r[k] for k in r if "exact_match" in k} for v, r in results.items()},
        "differing_doc_ids": differing,
        "identical_responses": len(docs) - len(differing),
        "commands": commands,
        "note": "lm_eval 0.4.13 local-completions, num_concurrent=1; random weights: a score of ~0 "
        "is expected, the per-sample identity is what this proves",
    }
