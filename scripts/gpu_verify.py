#!/usr/bin/env python3
"""GPU verification tier (issue 8), run ON the lent GPU machine with the offline vLLM bundle.

Needs only torch, transformers/tokenizers and the bundle (``PYTHONPATH=/tmp/vllm-bundle/site``);
the series' changed files travel in an overlay folder made here by
``python -m verify.gpu_overlay 0.22.0`` (``.gpu/overlay/<version>/{pristine,patched}/...``).

    python3 scripts/gpu_verify.py --version 0.22.0 --overlay .gpu/overlay/0.22.0 \
        --steps penalties-v1,mrv2 --out $OUT

Each step runs pristine and patched in separate worker processes, interleaved (A B A B ...),
and writes ``<out>/<step>.json`` with the exact command, GPU, versions and numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BUNDLE = Path("/tmp/vllm-bundle/site")
MODEL = Path("/tmp/pb-model")
PATCHED_SITE = Path("/tmp/pb-patched-site")


# ---------------------------------------------------------------------------------------------
# setup
def build_model(path: Path = MODEL) -> Path:
    """Random-weight Qwen3-0.6B-shaped model + small byte-level BPE tokenizer (no hub)."""
    if (path / "config.json").exists():
        return path
    import glob

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    sources = sorted(glob.glob(f"{os.path.dirname(os.__file__)}/*.py"))[:200]
    texts = [open(f, errors="ignore").read() for f in sources]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=8192, tie_word_embeddings=True, eos_token_id=2, bos_token_id=0,
    )  # fmt: skip
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    return path


def build_patched_site(overlay: Path) -> dict[str, object]:
    """Copy the bundle's site-packages and overlay the series' files; check pristine first."""
    mismatched = []
    files = sorted(
        str(p.relative_to(overlay / "patched"))
        for p in (overlay / "patched").rglob("*")
        if p.is_file()
    )
    for rel in files:
        pristine = overlay / "pristine" / rel
        bundled = BUNDLE / rel
        if pristine.exists() and (
            not bundled.exists() or bundled.read_bytes() != pristine.read_bytes()
        ):
            mismatched.append(rel)
    if mismatched:
        raise SystemExit(f"bundle files differ from the pristine sdist: {mismatched}")
    if PATCHED_SITE.exists():
        shutil.rmtree(PATCHED_SITE)
    shutil.copytree(BUNDLE, PATCHED_SITE, symlinks=True)
    for rel in files:
        target = PATCHED_SITE / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(overlay / "patched" / rel, target)
    return {"overlaid_files": files}


def site_of(variant: str) -> Path:
    return BUNDLE if variant == "pristine" else PATCHED_SITE


# ---------------------------------------------------------------------------------------------
# statistics
def ratio_ci(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of b/a (paired by repeat) with a normal 95% CI; a, b are throughputs or times."""
    ratios = [y / x for x, y in zip(a, b, strict=True) if x]
    mean = statistics.fmean(ratios)
    half = (
        1.96 * statistics.stdev(ratios) / math.sqrt(len(ratios))
        if len(ratios) > 1
        else float("nan")
    )
    return {"ratio": mean, "ci95_low": mean - half, "ci95_high": mean + half, "n": len(ratios)}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


# ---------------------------------------------------------------------------------------------
# worker (runs in a child process with PYTHONPATH = one variant's site)
def worker(args: argparse.Namespace) -> None:
    import random

    from vllm import LLM, SamplingParams

    spec = json.loads(args.spec)
    rng = random.Random(0)
    prompts = [
        {"prompt_token_ids": [rng.randrange(10, 4000) for _ in range(spec["input_len"])]}
        for _ in range(spec["batch"])
    ]
    t0 = time.perf_counter()
    llm = LLM(
        model=str(MODEL), seed=0, max_model_len=spec["input_len"] + spec["output_len"] + 16,
        gpu_memory_utilization=0.6, max_num_seqs=spec["batch"],
    )  # fmt: skip
    startup = time.perf_counter() - t0
    results = {"startup_s": startup, "configs": {}}
    for name, params in spec["configs"].items():
        sampling = [
            SamplingParams(max_tokens=spec["output_len"], ignore_eos=True, seed=1000 + i, **params)
            for i in range(len(prompts))
        ]
        llm.generate(prompts[:4], [SamplingParams(max_tokens=8, **params)] * 4, use_tqdm=False)
        _reset_timers()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, sampling, use_tqdm=False)
        elapsed = time.perf_counter() - t0
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        results["configs"][name] = {
            "elapsed_s": elapsed,
            "output_tokens": sum(len(t) for t in tokens),
            "tok_per_s": sum(len(t) for t in tokens) / elapsed,
            "token_ids_hash": _hash(tokens),
            "timers": _timers(),
        }
    Path(args.result).write_text(json.dumps(results))


def _hash(tokens: list[list[int]]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()


def _timers_module():
    try:
        from vllm.v1.worker import sample_tokens_timing

        return sample_tokens_timing if sample_tokens_timing.ENABLED else None
    except ImportError:
        return None


def _reset_timers() -> None:
    module = _timers_module()
    if module:
        module.reset()


def _timers() -> dict[str, object] | None:
    module = _timers_module()
    return module.snapshot() if module else None


# ---------------------------------------------------------------------------------------------
# steps
PENALTIES = {"presence_penalty": 1.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}
STEPS = {
    # step 2 (+5): V1 runner, plain vs penalties, long generations
    "penalties-v1": {
        "env": {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "spec": {
            "batch": 64, "input_len": 32, "output_len": 4096,
            "configs": {"plain": {"top_p": 0.95}, "penalties": {"top_p": 0.95, **PENALTIES}},
        },
        "repeats": 1,
    },
    # step 3: MRV2 runner, a batch where no request needs logits processing
    "mrv2": {
        "env": {"VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "spec": {
            "batch": 128, "input_len": 2, "output_len": 512,
            "configs": {"plain": {"temperature": 1.0}, "greedy": {"temperature": 0.0}},
        },
        "repeats": 2,
    },
}  # fmt: skip


def run_step(name: str, args: argparse.Namespace, out: Path) -> dict[str, object]:
    step = STEPS[name]
    runs: dict[str, list[dict]] = {"pristine": [], "patched": []}
    for repeat in range(step["repeats"]):
        order = ("pristine", "patched") if repeat % 2 == 0 else ("patched", "pristine")
        for variant in order:
            result_file = out / f"{name}-{variant}-{repeat}.json"
            env = dict(os.environ, PYTHONPATH=str(site_of(variant)), **step["env"])
            env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_SAMPLE_TOKENS_TIMING="1")
            cmd = [
                sys.executable, __file__, "_worker", "--spec", json.dumps(step["spec"]),
                "--result", str(result_file),
            ]  # fmt: skip
            print(f"[gpu_verify] {name} {variant} repeat {repeat}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                (out / f"{name}-{variant}-{repeat}.log").write_text(proc.stdout + proc.stderr)
                raise SystemExit(f"{name} {variant} failed:\n{proc.stderr[-3000:]}")
            data = json.loads(result_file.read_text())
            data["wall_s"] = time.perf_counter() - t0
            runs[variant].append(data)
    summary: dict[str, object] = {}
    for config in step["spec"]["configs"]:
        a = [r["configs"][config]["tok_per_s"] for r in runs["pristine"]]
        b = [r["configs"][config]["tok_per_s"] for r in runs["patched"]]
        hashes = {v: {r["configs"][config]["token_ids_hash"] for r in runs[v]} for v in runs}
        summary[config] = {
            "pristine_tok_s": a,
            "patched_tok_s": b,
            "throughput_ratio_patched_over_pristine": ratio_ci(a, b),
            "tokens_identical": hashes["pristine"] == hashes["patched"]
            and len(hashes["patched"]) == 1,
            "attribution": _attribution(runs["patched"][0]["configs"][config].get("timers")),
        }
    return {"runs": runs, "summary": summary}


def _attribution(timers: dict | None) -> dict[str, float] | None:
    """p50/p99 of sample_tokens split into readiness wait and compute (004's timers), plus the
    readiness wait paid later in get_output."""
    if not timers or not timers.get("steps"):
        return None
    rows = [dict(zip(timers["step_fields"], row, strict=True)) for row in timers["steps"]]
    out: dict[str, float] = {"steps": len(rows), "waited_steps": sum(r["waited"] for r in rows)}
    for key in ("sample_tokens_s", "ready_wait_s", "compute_s"):
        values = [r[key] * 1e3 for r in rows]
        out[f"{key[:-2]}_p50_ms"] = percentile(values, 50)
        out[f"{key[:-2]}_p99_ms"] = percentile(values, 99)
    waits = [row[0] * 1e3 for row in timers.get("get_output", [])]
    out["get_output_wait_p50_ms"] = percentile(waits, 50)
    out["get_output_wait_p99_ms"] = percentile(waits, 99)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    w = sub.add_parser("_worker")
    w.add_argument("--spec", required=True)
    w.add_argument("--result", required=True)
    parser.add_argument("--version", default="0.22.0")
    parser.add_argument("--overlay", type=Path)
    parser.add_argument("--steps", default="penalties-v1")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/pb-out")))
    args = parser.parse_args()
    if args.cmd == "_worker":
        worker(args)
        return 0
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    overlay_info = build_patched_site(args.overlay)
    build_model()
    meta = {
        "command": " ".join(sys.argv),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "vllm_version": args.version,
        "series_hash": (args.overlay / "SERIES_HASH").read_text().strip()
        if (args.overlay / "SERIES_HASH").exists()
        else "unknown",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **overlay_info,
    }
    for name in args.steps.split(","):
        t0 = time.perf_counter()
        data = run_step(name, args, args.out)
        data.update(meta, step=name, step_wall_s=time.perf_counter() - t0)
        (args.out / f"{name}.json").write_text(json.dumps(data, indent=2))
        print(json.dumps({name: data["summary"]}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
