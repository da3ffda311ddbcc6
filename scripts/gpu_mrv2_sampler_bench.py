#!/usr/bin/env python3
"""Microbenchmark of the Model Runner V2 ``Sampler.__call__``, pristine vs patched.

Patch 0001 makes ``Sampler.apply_sampling_params`` (``vllm/v1/worker/gpu/sample/sampler.py``)
return the input logits unchanged, skipping an FP32 copy of ``[num_tokens, vocab]``, when no
request in the batch needs logits processing. This times the whole ``sampler(logits,
input_batch)`` call the way ``GPUModelRunner.sample`` makes it (real ``RequestState``,
``Sampler``, ``InputBatch`` and ``vllm.SamplingParams``; bf16 logits, decode step: one logit
per request) for three batch kinds: ``random`` (temperature 1.0, nothing else: the patched
path skips the copy), ``greedy`` (temperature 0: skips too) and ``top_p`` (every request
top_p=0.95: both copy, the ratio should be ~1), plus the copy alone
(``torch.empty_like(logits, dtype=torch.float32).copy_(logits)``: what the patch can save).

Both import roots hold the same compiled ``vllm._C`` and register the same torch ops, so
each variant lives in its own worker process (``scripts/mrv2_sampler_worker.py`` with
``PYTHONPATH=<root>``), started once and driven by JSON lines on stdin; it answers JSON lines
on a private copy of its stdout (vLLM's logging goes to the log file). Rounds alternate the
pristine/patched order; every round's result is written to the JSON at once, so a run cut
short keeps what it measured.

    python3 scripts/gpu_mrv2_sampler_bench.py --out $OUT/micro-000.json   # on the GPU machine
    python scripts/gpu_mrv2_sampler_bench.py --device cpu --quick \\
        --pristine-root P --patched-root Q --out /tmp/m000.json            # CPU smoke test

As a ``scripts/gpu_verify.py`` step: ``run(out_dir, meta, {"pristine": p, "patched": q})``
writes ``<out_dir>/micro-000.json`` (worker logs under ``<out_dir>/raw/``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(REPO))
from mrv2_sampler_worker import Worker, WorkerError  # noqa: E402  (the worker and its handle)

STEP = "micro-000"
VARIANTS = ("pristine", "patched")
VLLM_VERSION = "0.22.0"
DEFAULT_PRISTINE = Path("/tmp/vllm-bundle/site")
DEFAULT_PATCHED = Path("/tmp/pb-sites/patched")
DEFAULT_OVERLAY = REPO / ".gpu" / "overlay" / VLLM_VERSION

#: Batch kinds: the SamplingParams keyword arguments of every request in the batch.
CONFIGS: dict[str, dict[str, float]] = {
    "random": {"temperature": 1.0},
    "greedy": {"temperature": 0.0},
    "top_p": {"temperature": 1.0, "top_p": 0.95},
}
#: What the patched sampler is expected to do per batch kind.
EXPECT_SKIP = {"random": True, "greedy": True, "top_p": False}

#: Measurement settings per (device, quick).
SETTINGS: dict[tuple[str, bool], dict[str, Any]] = {
    ("cuda", False): {
        "vocab": 151936,
        "batches": [1, 8, 32, 128, 256],
        "rounds": 5,
        "iters": 200,
        "warmup": 20,
        "budget_s": 110.0,
    },
    ("cuda", True): {
        "vocab": 151936,
        "batches": [1, 8, 32, 128, 256],
        "rounds": 2,
        "iters": 30,
        "warmup": 5,
        "budget_s": 110.0,
    },
    ("cpu", False): {
        "vocab": 1024,
        "batches": [1, 8, 32],
        "rounds": 3,
        "iters": 5,
        "warmup": 1,
        "budget_s": 600.0,
    },
    ("cpu", True): {
        "vocab": 1024,
        "batches": [1, 8, 32],
        "rounds": 2,
        "iters": 2,
        "warmup": 1,
        "budget_s": 170.0,
    },
}
CALL_TIMEOUT_S = 90.0  # one command to a worker (first calls compile Triton kernels)
STARTUP_TIMEOUT_S = 150.0  # importing vLLM and building the sampler
CLOSE_MARGIN_S = 8.0  # kept back from the budget to stop the workers and write the JSON


def say(message: str) -> None:
    print(f"[gpu_mrv2_sampler_bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# =============================================================================================
# driver side


def _round_call(worker: Worker, op: str, deadline: float, settings: dict, **kwargs: Any) -> dict:
    """One timed call in a round: the worker's reply without the protocol fields, or the error
    (recorded, not raised: the other shapes and variants go on)."""
    try:
        msg = worker.call(
            op,
            min(deadline, time.monotonic() + CALL_TIMEOUT_S),
            iters=settings["iters"],
            warmup=settings["warmup"],
            **kwargs,
        )
    except WorkerError as exc:
        msg = {"ok": False, "error": str(exc)[-4000:]}
    msg.pop("seq", None)
    msg.pop("op", None)
    return msg


def _gpu_verify() -> Any:
    """scripts/gpu_verify.py as a module (only the standard library at import time)."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    import gpu_verify

    return gpu_verify


def _shape_key(config: str, batch: int) -> str:
    return f"{config}/b{batch}"


def summarize(data: dict) -> dict:
    """Per shape: per-variant median over round medians, pristine/patched speedup with a
    Student-t 95% CI over paired rounds, sampled-id identity, copy reference."""
    ratio_ci = _gpu_verify().ratio_ci
    params = data["params"]
    results: dict[str, dict] = {}
    for config in params["configs"]:
        for batch in params["batches"]:
            key = _shape_key(config, batch)
            rows = [r for r in data["rounds"] if r.get("shape") == key]
            entry: dict[str, Any] = {"config": config, "batch": batch}
            by_round: dict[str, dict[int, dict]] = {v: {} for v in VARIANTS}
            for r in rows:
                if r.get("ok"):
                    by_round[r["variant"]][r["round"]] = r
            for v in VARIANTS:
                setup = data["setup"].get(key, {}).get(v, {})
                ok = list(by_round[v].values())
                entry[v] = {
                    "us_median": statistics.median([r["wall_us"] for r in ok]) if ok else None,
                    "us_rounds": [round(r["wall_us"], 3) for r in ok],
                    "gpu_us_median": (
                        statistics.median([r["gpu_us"] for r in ok])
                        if ok and all("gpu_us" in r for r in ok)
                        else None
                    ),
                    "copy_skipped": setup.get("copy_skipped"),
                    "ids_hash": setup.get("ids_hash"),
                    "first_ids": setup.get("first_ids"),
                    "ids_stable_across_calls": (
                        all(r["ids_hash"] == setup.get("ids_hash") for r in ok) if ok else None
                    ),
                }
            paired = sorted(set(by_round["pristine"]) & set(by_round["patched"]))
            pri = [by_round["pristine"][i] for i in paired]
            pat = [by_round["patched"][i] for i in paired]
            # ratio_ci(a, b) = mean of b/a: a = patched, b = pristine -> pristine/patched.
            entry["speedup"] = ratio_ci([r["wall_us"] for r in pat], [r["wall_us"] for r in pri])
            if pri and all("gpu_us" in r for r in pri + pat):
                entry["speedup_gpu"] = ratio_ci(
                    [r["gpu_us"] for r in pat], [r["gpu_us"] for r in pri]
                )
            hashes = [entry[v]["ids_hash"] for v in VARIANTS]
            entry["ids_identical"] = hashes[0] == hashes[1] if all(hashes) else None
            entry["patched_skips_as_expected"] = (
                entry["patched"]["copy_skipped"] == EXPECT_SKIP[config]
                if entry["patched"]["copy_skipped"] is not None and config in EXPECT_SKIP
                else None
            )
            copies = [
                r["wall_us"] for r in data["copy_ref"] if r.get("batch") == batch and r.get("ok")
            ]
            entry["copy_ref_us"] = statistics.median(copies) if copies else None
            gcopies = [
                r["gpu_us"]
                for r in data["copy_ref"]
                if r.get("batch") == batch and r.get("ok") and "gpu_us" in r
            ]
            entry["copy_ref_gpu_us"] = statistics.median(gcopies) if gcopies else None
            entry["errors"] = [
                f"{r['variant']} r{r['round']}: {r['error']}" for r in rows if not r.get("ok")
            ] + [
                f"{v} setup: {s['error']}"
                for v, s in data["setup"].get(key, {}).items()
                if not s.get("ok")
            ]
            results[key] = entry
    return results


def brief(results: dict) -> dict:
    """Per shape: medians, speedup and CI, identity (what gpu_verify prints for a step)."""
    out = {}
    for key, e in results.items():
        s = e["speedup"]
        out[key] = {
            "pristine_us": e["pristine"]["us_median"],
            "patched_us": e["patched"]["us_median"],
            "speedup": s.get("ratio"),
            "ci95": [s["ci95_low"], s["ci95_high"]] if "ci95_low" in s else None,
            "copy_us": e["copy_ref_us"],
            "ids_identical": e["ids_identical"],
            "patched_skips": e["patched"]["copy_skipped"],
            "errors": len(e["errors"]),
        }
    return out


def table(results: dict) -> str:
    def num(x: float | None, fmt: str = "{:.1f}") -> str:
        return "-" if x is None else fmt.format(x)

    head = (
        f"{'config':7} {'batch':>5} {'pristine us':>11} {'patched us':>10} "
        f"{'speedup [95% CI]':>22} {'copy us':>8} {'ids same':>8} {'skip pri/pat':>12}"
    )
    lines = [head, "-" * len(head)]
    for e in results.values():
        s = e["speedup"]
        if s.get("n"):
            ci = f"[{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]" if "ci95_low" in s else "[n=1]"
            speed = f"{s['ratio']:.3f} {ci}"
        else:
            speed = "-"
        skip = f"{e['pristine']['copy_skipped']}/{e['patched']['copy_skipped']}"
        lines.append(
            f"{e['config']:7} {e['batch']:>5} {num(e['pristine']['us_median']):>11} "
            f"{num(e['patched']['us_median']):>10} {speed:>22} {num(e['copy_ref_us']):>8} "
            f"{str(e['ids_identical']):>8} {skip:>12}"
            + (f"  ERRORS: {len(e['errors'])}" if e["errors"] else "")
        )
    return "\n".join(lines)


def _paths(out: Path) -> tuple[Path, Path]:
    """(json file, raw folder): ``out`` is the JSON file if it ends in .json, else a folder."""
    if out.suffix == ".json":
        return out, out.parent / f"{out.stem}-raw"
    return out / f"{STEP}.json", out / "raw"


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def _settings(device: str, quick: bool, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The run's settings: CONFIGS, the (device, quick) row of SETTINGS, then ``overrides``;
    batch sizes sorted."""
    settings = {"configs": CONFIGS, **SETTINGS[(device, quick)], **(overrides or {})}
    settings["batches"] = sorted(settings["batches"])
    return settings


def _new_record(
    meta: dict, sites: dict[str, Path], settings: dict[str, Any], device: str, quick: bool
) -> dict[str, Any]:
    """The JSON before anything is measured: ``meta``, the parameters, empty result parts."""
    return {
        **meta,
        "step": STEP,
        "seed": "000",
        "patch": "0001 (Sampler.apply_sampling_params skips the FP32 logits copy)",
        "params": {
            "device": device,
            "quick": quick,
            "vocab": settings["vocab"],
            "logits_dtype": "bfloat16",
            "batches": settings["batches"],
            "configs": settings["configs"],
            "rounds": settings["rounds"],
            "iters_per_round": settings["iters"],
            "warmup_per_round": settings["warmup"],
            "budget_s": settings["budget_s"],
            "request_seeds": "1000 + i",
            "positions": "16 + (7 i) % 64 (decode step after the prompt)",
            "timing": "per call: perf_counter around sampler(logits, input_batch) + synchronize "
            "(wall_us) and CUDA events (gpu_us); median per round; rounds alternate the order",
            "speedup": "pristine / patched (mean over paired rounds, Student-t 95% CI)",
            "patched_root_note": "patched = the whole series; only 0001 touches "
            "vllm/v1/worker/gpu/sample/sampler.py",
        },
        "sites": {v: str(sites[v]) for v in VARIANTS},
        "startup": {},
        "setup": {},
        "rounds": [],
        "copy_ref": [],
        "errors": [],
        "notes": [],
        "results": {},
    }


def _save(data: dict[str, Any], json_path: Path, t_start: float) -> None:
    """Summarize what is measured so far (a failing summary is recorded) and rewrite the JSON."""
    try:
        data["results"] = summarize(data)
        data["summary"] = brief(data["results"])
    except Exception:
        data["summary_error"] = traceback.format_exc()[-2000:]
    data["wall_s"] = time.monotonic() - t_start
    _write(json_path, data)


def _start_workers(
    data: dict[str, Any],
    workers: dict[str, Worker],
    sites: dict[str, Path],
    raw: Path,
    device: str,
    settings: dict[str, Any],
    deadline: float,
) -> None:
    """Start both workers at once into ``workers`` (the imports dominate; nothing is timed
    yet), record each one's start-up, and gpu / torch / vLLM from the first that is ready."""
    sizes = (settings["vocab"], settings["batches"][-1], len(settings["configs"]))
    for v in VARIANTS:
        workers[v] = Worker(v, sites[v], raw / f"{STEP}-{v}.log", device, *sizes)
    for v in VARIANTS:
        try:
            ready = workers[v].wait_ready(min(deadline, time.monotonic() + STARTUP_TIMEOUT_S))
            data["startup"][v] = ready
            say(f"{v} worker ready in {ready['startup_s']:.1f} s ({ready['sampler_file']})")
        except WorkerError as exc:
            data["startup"][v] = {"ok": False, "error": str(exc)[-4000:]}
            data["errors"].append(f"{v} startup: {str(exc)[-4000:]}")
            say(f"{v} worker FAILED to start: {str(exc)[:300]}")
    first = next((data["startup"][v] for v in VARIANTS if data["startup"][v].get("ok")), {})
    if data.get("gpu") in (None, "") and first:
        data["gpu"] = first.get("device")
    if data.get("torch") in (None, "") and first:
        data["torch"] = first.get("torch")
    if first:
        data["vllm_reported"] = first.get("vllm")


def _setup_shapes(
    data: dict[str, Any],
    workers: dict[str, Worker],
    live: list[str],
    settings: dict[str, Any],
    deadline: float,
) -> None:
    """The first call per shape (Triton compiles), both workers in parallel; stops at the
    deadline."""
    configs: dict[str, dict] = settings["configs"]
    for config, batch in [(c, b) for c in configs for b in settings["batches"]]:
        if time.monotonic() > deadline:
            data["notes"].append("budget: setup stopped early")
            break
        key = _shape_key(config, batch)
        data["setup"][key] = {}
        sent = {}
        for v in live:
            if workers[v].dead:
                continue
            try:
                sent[v] = workers[v].send(
                    "setup", config=config, batch=batch, params=configs[config]
                )
            except WorkerError as exc:
                data["setup"][key][v] = {"ok": False, "error": str(exc)[-4000:]}
        for v, seq in sent.items():
            try:
                msg = workers[v].receive(min(deadline, time.monotonic() + CALL_TIMEOUT_S), seq)
            except WorkerError as exc:
                msg = {"ok": False, "error": str(exc)[-4000:]}
            data["setup"][key][v] = msg
            if not msg.get("ok"):
                say(f"setup {key} {v} FAILED: {msg.get('error', '')[-300:]}")


def _setup_ok(data: dict[str, Any], key: str, v: str) -> bool:
    """Whether variant ``v``'s setup call for shape ``key`` succeeded."""
    return bool(data["setup"].get(key, {}).get(v, {}).get("ok"))


def _measure_round(
    data: dict[str, Any],
    workers: dict[str, Worker],
    settings: dict[str, Any],
    rnd: int,
    deadline: float,
) -> None:
    """One round: every set-up shape, then the copy reference per batch size, on each live
    worker; the pristine/patched order alternates from shape to shape and round to round."""
    from verify.ab.rounds import round_orders  # verify.stats: loaded by the first save already

    orders = round_orders(VARIANTS, 2)
    batches = settings["batches"]
    for ci, config in enumerate(settings["configs"]):
        for bi, batch in enumerate(batches):
            key = _shape_key(config, batch)
            order = list(orders[(rnd + ci + bi) % 2])
            for v in order:
                if not _setup_ok(data, key, v) or workers[v].dead:
                    continue
                row = {"round": rnd, "shape": key, "variant": v, "order": order}
                msg = _round_call(
                    workers[v], "measure", deadline, settings, config=config, batch=batch
                )
                data["rounds"].append({**row, **msg})
    for bi, batch in enumerate(batches):
        for v in orders[(rnd + bi) % 2]:
            if workers[v].dead:
                continue
            msg = _round_call(workers[v], "copy", deadline, settings, batch=batch)
            data["copy_ref"].append({"round": rnd, "batch": batch, "variant": v, **msg})


def _run_rounds(
    data: dict[str, Any],
    workers: dict[str, Worker],
    settings: dict[str, Any],
    deadline: float,
    save: Callable[[], None],
) -> None:
    """The measured rounds, saving after each; stops before a round that would not fit the
    deadline (judged by the last round's time, at least 5 s)."""
    round_s = 0.0
    for rnd in range(settings["rounds"]):
        t_round = time.monotonic()
        if t_round + max(1.2 * round_s, 5.0) > deadline:
            data["notes"].append(f"budget: stopped before round {rnd}")
            say(f"budget reached: stopping before round {rnd}")
            break
        _measure_round(data, workers, settings, rnd, deadline)
        round_s = time.monotonic() - t_round
        save()
        say(f"round {rnd} done in {round_s:.1f} s")


def _close_workers(data: dict[str, Any], workers: dict[str, Worker]) -> None:
    """Stop every worker; a worker that started and then died is recorded as an error."""
    for w in workers.values():
        with contextlib.suppress(Exception):
            w.close()
    for v, w in workers.items():
        if w.dead and data["startup"].get(v, {}).get("ok"):
            data["errors"].append(f"{v} worker: {w.dead}")


def run(
    out: Path,
    meta: dict,
    sites: dict[str, Path],
    *,
    device: str = "cuda",
    quick: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict:
    """Measure pristine vs patched ``Sampler.__call__``; write and return the result dict.

    ``out``: a folder (writes ``<out>/micro-000.json``) or a ``.json`` path; ``meta``: what
    gpu_verify records (command, gpu, torch, vllm_version, series_hash, date); ``sites``:
    ``{"pristine": root, "patched": root}``. Never raises for a failing shape or worker: the
    error text goes into the JSON, which is rewritten after every round."""
    t_start = time.monotonic()
    settings = _settings(device, quick, overrides)
    deadline = t_start + settings["budget_s"] - CLOSE_MARGIN_S
    json_path, raw = _paths(Path(out))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    raw.mkdir(parents=True, exist_ok=True)
    data = _new_record(meta, sites, settings, device, quick)

    def save() -> None:
        _save(data, json_path, t_start)

    save()
    workers: dict[str, Worker] = {}
    try:
        _start_workers(data, workers, sites, raw, device, settings, deadline)
        save()
        live = [v for v in VARIANTS if not workers[v].dead]
        _setup_shapes(data, workers, live, settings, deadline)
        save()
        say(f"setup done at {time.monotonic() - t_start:.1f} s")
        _run_rounds(data, workers, settings, deadline, save)
    except Exception:
        data["errors"].append(f"driver: {traceback.format_exc()[-4000:]}")
        say(f"driver error: {traceback.format_exc()[-1000:]}")
    finally:
        _close_workers(data, workers)
        save()
    print(table(data["results"]), flush=True)
    say(f"wrote {json_path} ({data['wall_s']:.1f} s)")
    return data


# =============================================================================================
def _cli_meta(args: argparse.Namespace) -> dict:
    series = args.overlay / "SERIES_HASH" if args.overlay else None
    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "gpu": None,  # filled in from the workers (the driver does not import torch)
        "torch": None,
        "vllm_version": VLLM_VERSION,
        "series_hash": series.read_text().strip() if series and series.exists() else None,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pristine-root", type=Path, default=DEFAULT_PRISTINE)
    parser.add_argument("--patched-root", type=Path, default=DEFAULT_PATCHED)
    parser.add_argument(
        "--overlay",
        type=Path,
        default=DEFAULT_OVERLAY,
        help="gpu_overlay folder: SERIES_HASH; builds --patched-root if missing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "/tmp/pb-out")),
        help="JSON file (*.json) or folder (writes micro-000.json)",
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--batches", help="comma-separated batch sizes (default per device)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--iters", type=int)
    parser.add_argument("--budget-s", type=float, help="wall-clock budget of the whole run")
    args = parser.parse_args()
    meta = _cli_meta(args)
    if (
        args.device == "cuda"
        and args.patched_root == DEFAULT_PATCHED
        and not (args.patched_root / "vllm" / "__init__.py").exists()
        and (args.overlay / "patched").is_dir()
    ):
        say(f"building {args.patched_root} from {args.overlay} (gpu_verify.build_sites)")
        meta.update(_gpu_verify().build_sites(args.overlay, {"pristine", "patched"}))
    overrides: dict[str, Any] = {}
    if args.batches:
        overrides["batches"] = [int(b) for b in args.batches.split(",")]
    for name in ("rounds", "iters", "budget_s"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    sites = {"pristine": args.pristine_root, "patched": args.patched_root}
    data = run(args.out, meta, sites, device=args.device, quick=args.quick, overrides=overrides)
    return 0 if data["results"] and not data["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
