#!/usr/bin/env python3
"""Microbenchmark on vLLM 0.18.1: pooling prompt token ids, pristine vs patched.

Patch ``patches/0.18.1/0001`` (backport of vLLM PR #38139) adds
``PoolingMetadata.get_prompt_token_ids_cpu()``. Pristine copies the padded ``[num_reqs,
max_prompt_len]`` int64 ids, built on the host by ``InputBatch._make_sampling_metadata()``, to the
device, and GritLM reads each request's ids back (``token_ids.cpu().numpy()``: a copy and sync
each); patched, ``get_pooling_metadata()`` also builds the host tensor and GritLM reads
``token_ids.numpy()``. Host wall time per call (``time.perf_counter``), per (batch, prompt
length), of ``md`` = ``get_pooling_metadata()``, ``md_read`` = ``md`` + the ids read as each
tree's ``gritlm.py`` reads them + ``torch.cuda.synchronize()``, and ``step`` =
``_make_sampling_metadata()`` (the same in both trees) + ``md_read``: the cost when every step
brings new requests. Both trees run in one process; warmup calls pick the call count, rounds
alternate which tree goes first, a round's value is its median call. Speedup = pristine/patched,
the geometric mean of the per-round ratios with a log-scale 95% CI (``verify.stats``). The ids
the pooler gets are compared between the trees and with the prompts (a mismatch fails the shape).
The JSON (``params``: the workload) is rewritten after every shape.

``scripts/pack_pooling_bench_roots.py`` packs the roots on the dev machine; they are unpacked to
``<work>/pristine`` and ``<work>/patched`` and imported side by side (``verify.equivalence.roots``,
no gitpython), each with its platform object preset (``--platform``) so that platform detection
never imports ``vllm._C``, and with torch registrations made once
(``verify.equivalence.registrations``). Every loaded ``vllm`` module must come from its root;
third-party packages come from the GPU image or a vLLM bundle on ``PYTHONPATH``.

    python scripts/pack_pooling_bench_roots.py         # here: writes .gpu/roots-0.18.1
    python3 scripts/gpu_pooling_prompt_ids_bench.py --roots .gpu/roots-0.18.1 \\
        --out $OUT/gpu/micro-002.json
    python scripts/gpu_pooling_prompt_ids_bench.py --device cpu --roots .gpu/roots-0.18.1 \\
        --out /tmp/m002.json --quick                             # CPU smoke test (< 2 min)
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import importlib
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verify import stats  # noqa: E402
from verify.ab.rounds import round_orders  # noqa: E402
from verify.equivalence import roots as _roots  # noqa: E402
from verify.equivalence.registrations import custom_ops_once, opaque_types_once  # noqa: E402

STEP = "micro-002"
VLLM_VERSION = "0.18.1"
DEFAULT_ROOTS = REPO / ".gpu" / f"roots-{VLLM_VERSION}"
DEFAULT_WORK = Path("/tmp/pb-018")
PACK_HINT = ("run `python scripts/pack_pooling_bench_roots.py` on the dev machine (repo root) "
             "and carry `.gpu/roots-0.18.1` with the device run")  # fmt: skip
VARIANTS = ("pristine", "patched")
MEASURES = {
    "md": "get_pooling_metadata()",
    "md_read": "get_pooling_metadata() + GritLM's read of the ids + sync",
    "step": "_make_sampling_metadata() + get_pooling_metadata() + GritLM read + sync",
}
VOCAB = 32000
MAX_MODEL_LEN = 2048
SEED = 1234
CALIB_CALLS = 5  # timed calls after the warmup that pick the call count per round

#: How each tree's GritLMMeanPool.forward reads the ids (checked against the roots' source).
GRITLM_SOURCE = {
    "pristine": ("self._get_instruction_len(token_ids.cpu().numpy())",
                 "for token_ids in pooling_metadata.get_prompt_token_ids()\n"),
    "patched": ("self._get_instruction_len(token_ids.numpy())",
                "for token_ids in pooling_metadata.get_prompt_token_ids_cpu()\n"),
}  # fmt: skip
#: The platform object preset in each root, per --platform (module, class).
PLATFORMS = {"cpu": ("vllm.platforms.cpu", "CpuPlatform"),
             "unspecified": ("vllm.platforms.interface", "UnspecifiedPlatform")}  # fmt: skip

#: Measurement settings per (device, quick); target_s: a round's seconds (picks the call count).
_SETTING_KEYS = "batches lengths rounds warmup target_s min_iters max_iters budget_s".split()
SETTINGS: dict[tuple[str, bool], dict[str, Any]] = {
    key: dict(zip(_SETTING_KEYS, values, strict=True))
    for key, values in {
        ("cuda", False): ([1, 8, 64, 256], [128, 1024], 6, 10, 0.08, 20, 2000, 75.0),
        ("cuda", True): ([1, 64], [128], 3, 5, 0.02, 10, 500, 60.0),
        ("cpu", False): ([1, 8, 64, 256], [128, 1024], 4, 3, 0.05, 5, 1000, 600.0),
        ("cpu", True): ([1, 8, 64], [128], 3, 2, 0.01, 5, 200, 90.0),
    }.items()
}


class SetupError(RuntimeError):
    """A problem with the inputs or the environment; the message says what to do."""


def say(message: str) -> None:
    print(f"[{STEP} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def unpack_roots(roots: Path, work: Path) -> tuple[dict[str, Any], Path, Path]:
    """(manifest, pristine, patched): unpack the packed roots into `work` (reused if current)."""
    tarball, manifest_path = roots / "pristine.tar.xz", roots / "MANIFEST.json"
    if not roots.is_dir() or not tarball.is_file() or not manifest_path.is_file():
        raise SetupError(f"{roots} does not hold pristine.tar.xz and MANIFEST.json; {PACK_HINT}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("version") != VLLM_VERSION:
        raise SetupError(f"{roots} packs vLLM {manifest.get('version')}, not {VLLM_VERSION}")
    overlay_files = list(manifest.get("overlay", []))
    digest = hashlib.sha256(hashlib.sha256(tarball.read_bytes()).hexdigest().encode())
    for name in overlay_files:
        source = roots / "overlay" / name
        if not source.is_file():
            raise SetupError(f"{roots}: overlay file {name} is missing; {PACK_HINT}")
        digest.update(name.encode() + b"\0" + source.read_bytes())
    digest.update(json.dumps(manifest.get("deleted", [])).encode())
    key = digest.hexdigest()
    pristine, patched, stamp = work / "pristine", work / "patched", work / ".stamp"
    if stamp.is_file() and stamp.read_text().strip() == key:
        return manifest, pristine, patched
    say(f"unpacking {tarball} into {work}")
    if work.exists():
        shutil.rmtree(work)
    pristine.mkdir(parents=True)
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
    with tarfile.open(tarball, mode="r:xz") as tar:
        tar.extractall(pristine, **safe)  # noqa: S202
    shutil.copytree(pristine, patched, symlinks=True)
    for name in overlay_files:
        target = patched / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(roots / "overlay" / name, target)
    for name in manifest.get("deleted", []):
        (patched / name).unlink(missing_ok=True)
    stamp.write_text(key + "\n")
    return manifest, pristine, patched


class Tree:
    """One tree's loaded modules and the GritLM read of its pooling metadata."""

    def __init__(self, name: str, root: _roots.ImportRoot, platform_name: str) -> None:
        import torch

        self.name, self.root = name, root
        with root.active():
            platforms = importlib.import_module("vllm.platforms")
            if platforms._current_platform is None:
                module, cls = PLATFORMS[platform_name]
                platforms._current_platform = getattr(importlib.import_module(module), cls)()
            self.platform = type(platforms._current_platform).__name__
            custom_ops_once(importlib.import_module("vllm.utils.torch_utils"), torch.ops)
            vllm = importlib.import_module("vllm")
            self.pooling_params = importlib.import_module("vllm.pooling_params")
            self.metadata = importlib.import_module("vllm.v1.pool.metadata")
            self.input_batch = importlib.import_module("vllm.v1.worker.gpu_input_batch")
            from importlib.metadata import version

            self.version = {"vllm.__version__": vllm.__version__, "metadata": version("vllm")}
            self.vllm_file = vllm.__file__
        has_cpu = hasattr(self.metadata.PoolingMetadata, "get_prompt_token_ids_cpu")
        if has_cpu != (name == "patched"):
            raise SetupError(
                f"{name} root {root.path}: PoolingMetadata.get_prompt_token_ids_cpu "
                f"{'exists' if has_cpu else 'is missing'}; the roots are not pristine/patched "
                f"0.18.1 with the pooling patch; {PACK_HINT}"
            )

    def gritlm_source_check(self) -> dict[str, Any]:
        """Whether this root's gritlm.py reads the ids as `read()` does."""
        path = self.root.path / "vllm" / "model_executor" / "models" / "gritlm.py"
        text = path.read_text()
        found = {snippet.strip(): snippet in text for snippet in GRITLM_SOURCE[self.name]}
        return {"file": str(path), "ok": all(found.values()), "snippets": found}

    def read(self, md: Any) -> list[Any]:
        """The ids as this tree's ``GritLMMeanPool.forward`` reads them (numpy, per request)."""
        if self.name == "pristine":
            return [token_ids.cpu().numpy() for token_ids in md.get_prompt_token_ids()]
        return [token_ids.numpy() for token_ids in md.get_prompt_token_ids_cpu()]

    def build_batch(self, prompts: list[list[int]], device: Any, pin_memory: bool) -> Any:
        """A refreshed pooling-model ``InputBatch`` holding one request per prompt."""
        ib = self.input_batch
        batch = ib.InputBatch(
            max_num_reqs=len(prompts), max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN * len(prompts), device=device,
            pin_memory=pin_memory, vocab_size=VOCAB, block_sizes=[16], kernel_block_sizes=[16],
            is_pooling_model=True,
        )  # fmt: skip
        for i, prompt in enumerate(prompts):
            params = self.pooling_params.PoolingParams(task="embed")
            params.requires_token_ids = True
            batch.add_request(ib.CachedRequestState(
                req_id=f"r{i}", prompt_token_ids=prompt, mm_features=[], sampling_params=None,
                pooling_params=params, generator=None, block_ids=([],), num_computed_tokens=0,
                output_token_ids=[],
            ))  # fmt: skip
        batch.refresh_metadata()
        return batch


def _third_party_modules() -> list[str]:
    """Top-level non-stdlib modules loaded so far (what the import chain needed)."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    names = {name.split(".")[0] for name in sys.modules}
    skip = {"vllm", "__main__", "_distutils_hack", "sitecustomize", "usercustomize"}
    return sorted(n for n in names if n not in stdlib and n not in skip and not n.startswith("_"))


def _prompts(batch: int, length: int, seed: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng([seed, batch, length])
    lens = rng.integers(max(1, length // 2), length + 1, size=batch)
    lens[0] = length
    return [rng.integers(0, VOCAB, size=int(n)).tolist() for n in lens]


def _check_contents(
    trees: dict[str, Tree], mds: dict[str, Any], prompts: list[list[int]], device: str
) -> dict[str, Any]:
    """Compare what GritLM gets in both trees (torch.equal on CPU copies) and vs the prompts."""
    import torch

    problems: list[str] = []
    seen = {}
    for name, tree in trees.items():
        with tree.root.active():
            seen[name] = [torch.from_numpy(a.copy()) for a in tree.read(mds[name])]
    p, q = seen["pristine"], seen["patched"]
    if not (len(p) == len(q) == len(prompts)):
        problems.append(f"request counts {len(p)} / {len(q)} / {len(prompts)}")
    for i, (a, b, prompt) in enumerate(zip(p, q, prompts, strict=False)):
        if not torch.equal(a, b):
            problems.append(f"request {i}: pristine and patched ids differ")
        if not torch.equal(b, torch.tensor(prompt, dtype=b.dtype)):
            problems.append(f"request {i}: patched ids differ from the prompt")
    dev_p, host_q = mds["pristine"].prompt_token_ids, mds["patched"].prompt_token_ids_cpu
    full_equal = None
    if dev_p is None or host_q is None:
        problems.append("a padded id tensor is missing")
    else:
        full_equal = torch.equal(dev_p.cpu(), host_q)
        if not full_equal:
            problems.append("padded tensors differ (pristine device vs patched host)")
        if host_q.device.type != "cpu":
            problems.append(f"patched prompt_token_ids_cpu is on {host_q.device}")
        if dev_p.device.type != device:
            problems.append(f"pristine prompt_token_ids is on {dev_p.device}, not {device}")
    return {
        "ok": not problems, "problems": problems[:20], "padded_equal": full_equal,
        "pristine_device": None if dev_p is None else str(dev_p.device),
        "patched_host_device": None if host_q is None else str(host_q.device),
        "shape": None if host_q is None else list(host_q.shape),
    }  # fmt: skip


def _time_calls(fn: Callable[[], Any], n: int) -> list[float]:
    """Seconds per call of `n` calls, garbage collection off."""
    pc, out = time.perf_counter, [0.0] * n
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            t0 = pc()
            fn()
            out[i] = pc() - t0
    finally:
        gc.enable()
    return out


def _ops(tree: Tree, batch: Any, sync: Callable[[], None]) -> dict[str, Callable[[], Any]]:
    read = tree.read

    def md() -> Any:
        return batch.get_pooling_metadata()

    def md_read() -> Any:
        ids = read(batch.get_pooling_metadata())
        sync()
        return ids

    def step() -> Any:
        batch.sampling_metadata = batch._make_sampling_metadata()
        ids = read(batch.get_pooling_metadata())
        sync()
        return ids

    return {"md": md, "md_read": md_read, "step": step}


def _paired(p_meds: list[float], q_meds: list[float]) -> dict[str, Any]:
    """Per-tree medians (µs) of the round medians (s) and the speedup pristine/patched."""
    ratios = [p / q for p, q in zip(p_meds, q_meds, strict=True) if q > 0]
    meds = {"pristine": p_meds, "patched": q_meds}
    out: dict[str, Any] = {
        "median_us": {k: statistics.median(v) * 1e6 for k, v in meds.items()},
        "round_median_us": {k: [x * 1e6 for x in v] for k, v in meds.items()},
        "ratios": ratios, "speedup": None, "ci95": None,
    }  # fmt: skip
    if ratios:  # verify.stats: geometric mean, log-scale 95% interval, MDE
        r = stats.ratio_of_ratios(ratios)
        out.update(speedup=r.ratio, mde=r.mde)
        out["ci95"] = [r.low, r.high] if r.low is not None else None
    return out


def _measure(trees: dict[str, Tree], ops: dict, measure: str, cfg: dict[str, Any]) -> dict:
    """One measure of one shape: calibrate the call count, then the paired rounds."""
    per_call = []
    for name, tree in trees.items():
        with tree.root.active():
            times = _time_calls(ops[name][measure], cfg["warmup"] + CALIB_CALLS)
        per_call.append(statistics.median(times[cfg["warmup"] :]))
    iters = int(cfg["target_s"] / max(max(per_call), 1e-7))
    iters = max(cfg["min_iters"], min(cfg["max_iters"], iters))
    meds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for order in round_orders(VARIANTS, cfg["rounds"]):  # pristine first, then alternating
        for name in order:
            with trees[name].root.active():
                meds[name].append(statistics.median(_time_calls(ops[name][measure], iters)))
    return {**_paired(meds["pristine"], meds["patched"]), "iters": iters, "rounds": cfg["rounds"]}


def measure_shape(trees: dict[str, Tree], batch_size: int, length: int, device: Any,
                  cfg: dict[str, Any], deadline: float) -> dict[str, Any]:  # fmt: skip
    """Contents check and the three measures for one (batch, prompt length)."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prompts = _prompts(batch_size, length, cfg["seed"])
    lens = [len(p) for p in prompts]
    result: dict[str, Any] = {
        "batch": batch_size, "prompt_len": length,
        "lengths": {"min": min(lens), "max": max(lens), "total": sum(lens)},
        "contents": None, "measures": {}, "error": None,
    }  # fmt: skip
    batches, ops, mds = {}, {}, {}
    for name, tree in trees.items():
        with tree.root.active():
            batches[name] = tree.build_batch(prompts, device, cfg["pin_memory"])
            ops[name] = _ops(tree, batches[name], sync)
            mds[name] = batches[name].get_pooling_metadata()
    sync()
    try:
        result["contents"] = _check_contents(trees, mds, prompts, device.type)
    except Exception as exc:  # a broken read still leaves the timings to measure
        result["contents"] = {"ok": False, "problems": [f"{type(exc).__name__}: {exc}"]}
    del mds
    for measure in MEASURES:
        if time.monotonic() > deadline:
            result["measures"][measure] = {"skipped": "time budget spent"}
        else:
            result["measures"][measure] = _measure(trees, ops, measure, cfg)
    return result


def table(record: dict[str, Any]) -> str:
    head = (
        f"{'batch':>5} {'len':>5} {'measure':<8} {'pristine us':>12} {'patched us':>11} "
        f"{'speedup':>8} {'95% CI':>14} {'iters':>6}  contents"
    )
    lines = [head, "-" * len(head)]
    for res in record["results"]:
        contents = res.get("contents") or {}
        ok = "ok" if contents.get("ok") else "FAILED" if contents else "n/a"
        if res.get("error"):
            lines.append(f"{res['batch']:>5} {res['prompt_len']:>5} error: {res['error']}")
            continue
        for measure, e in res["measures"].items():
            if "skipped" in e:
                lines.append(f"{res['batch']:>5} {res['prompt_len']:>5} {measure:<8} skipped")
                continue
            ci = "n/a" if not e.get("ci95") else f"[{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}]"
            lines.append(
                f"{res['batch']:>5} {res['prompt_len']:>5} {measure:<8} "
                f"{e['median_us']['pristine']:>12.1f} {e['median_us']['patched']:>11.1f} "
                f"{e['speedup']:>8.2f} {ci:>14} {e['iters']:>6}  {ok}"
            )
    lines.append("speedup = pristine / patched (mean of per-round ratios); measures:")
    lines += [f"  {k}: {v}" for k, v in MEASURES.items()]
    return "\n".join(lines)


def write_json(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--roots", type=Path, default=DEFAULT_ROOTS, help="packed roots folder")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where to unpack them")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="few shapes and calls")
    parser.add_argument("--series-hash", help="recorded as is (default: <roots>/SERIES_HASH)")
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (override)")
    parser.add_argument("--lengths", type=int, nargs="+", help="prompt lengths (override)")
    parser.add_argument("--rounds", type=int, help="paired rounds per measure (override, >= 2)")
    parser.add_argument("--budget-s", type=float, help="stop measuring after this (override)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--platform", choices=("auto", "cpu", "unspecified"), default="auto",
        help="platform object preset in vllm.platforms (auto: cpu for --device cpu, else "
        "unspecified); `--device cpu --platform unspecified` smoke-tests the CUDA run's path",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for length in args.lengths or []:
        if not 1 <= length < MAX_MODEL_LEN:
            parser.error(f"--lengths: {length} not in [1, {MAX_MODEL_LEN})")
    if args.rounds is not None and args.rounds < 2:
        parser.error("--rounds must be >= 2 for a confidence interval")
    return args


def _torch_device(device_type: str, record: dict[str, Any]) -> Any:
    """The torch device to measure on; records the torch and GPU versions."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise SetupError(f"{exc}: this benchmark needs torch (and numpy)") from exc
    device = torch.device(device_type)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SetupError("--device cuda, but torch sees no CUDA device (use --device cpu)")
    record["torch"], record["torch_cuda"] = torch.__version__, torch.version.cuda
    record["gpu"] = torch.cuda.get_device_name(0) if device.type == "cuda" else None
    return device


def _import_trees(args: argparse.Namespace, record: dict[str, Any], dirs: dict[str, Path],
                  platform_name: str, t_start: float) -> dict[str, Tree]:  # fmt: skip
    """Both roots imported side by side and checked; what the imports found goes to ``setup``."""
    shadowing = [p for p in sys.path if p and (Path(p) / "vllm" / "__init__.py").exists()]
    stale = sorted(n for n in sys.modules if _roots._is_vllm(n))
    for name in stale:  # a sitecustomize may have imported another vLLM: keep it out
        del sys.modules[name]
    setup: dict[str, Any] = {
        "work": str(args.work), "sys_path_vllm_elsewhere": shadowing,
        "vllm_modules_dropped_at_start": stale[:10], "opaque_types": opaque_types_once(),
    }  # fmt: skip
    record["setup"] = setup
    say(f"importing vLLM {VLLM_VERSION} from {dirs['pristine']} and {dirs['patched']}")
    trees: dict[str, Tree] = {}
    for name, path in dirs.items():
        label = f"{name} {VLLM_VERSION}"
        if not (path / "vllm" / "__init__.py").exists():  # else ImportRoot raises, without hint
            raise SetupError(f"{label} import root {path} has no vllm/__init__.py; {PACK_HINT}")
        try:
            trees[name] = Tree(name, _roots.ImportRoot(path, label), platform_name)
        except ModuleNotFoundError as exc:
            if exc.name and _roots._is_vllm(exc.name):
                raise
            raise SetupError(
                f"vLLM {VLLM_VERSION} ({name}) needs the third-party module {exc.name!r}, "
                "which is not importable: on the GPU machine install the vLLM bundle "
                "(../shared/gpu/README.md) and `export PYTHONPATH=/tmp/vllm-bundle/site`"
            ) from exc
    setup["platform_object"] = {n: t.platform for n, t in trees.items()}
    setup["vllm_version_seen"] = {n: t.version for n, t in trees.items()}
    setup["vllm_file"] = {n: t.vllm_file for n, t in trees.items()}
    setup["gritlm_read"] = {n: t.gritlm_source_check() for n, t in trees.items()}
    setup["importable_third_party"] = _third_party_modules()
    foreign = {n: t.root.foreign_modules() for n, t in trees.items()}
    setup["foreign_vllm_modules"] = foreign
    setup["import_s"] = round(time.monotonic() - t_start, 2)
    for name, tree in trees.items():
        reported = tree.version["vllm.__version__"]
        if tree.version["metadata"] != VLLM_VERSION or not reported.startswith(VLLM_VERSION):
            raise SetupError(f"{name} root reports vLLM {tree.version}, not {VLLM_VERSION}")
        if foreign[name]:
            raise SetupError(f"{name} root loaded vllm modules from elsewhere: {foreign[name]}")
    if not all(c["ok"] for c in setup["gritlm_read"].values()):
        say("warning: gritlm.py does not read the ids as this script does (see setup)")
    return trees


def _shape_stub(batch_size: int, length: int, measures: dict, error: str | None) -> dict:
    """A shape's result without measurements (time budget spent, or an error)."""
    return dict(batch=batch_size, prompt_len=length, contents=None, measures=measures, error=error)


def _measure_shapes(args: argparse.Namespace, record: dict[str, Any], trees: dict[str, Tree],
                    device: Any, cfg: dict[str, Any], t_start: float) -> None:  # fmt: skip
    """Every (batch, prompt length) in turn, the JSON rewritten after each."""
    deadline = t_start + cfg["budget_s"]
    for batch_size in cfg["batches"]:
        for length in cfg["lengths"]:
            say(f"batch {batch_size}, prompt length {length}")
            if time.monotonic() > deadline:
                skipped = {m: {"skipped": "time budget spent"} for m in MEASURES}
                res = _shape_stub(batch_size, length, skipped, None)
            else:
                try:
                    res = measure_shape(trees, batch_size, length, device, cfg, deadline)
                except Exception as exc:  # keep the other shapes
                    res = _shape_stub(batch_size, length, {}, f"{type(exc).__name__}: {exc}")
                    res["traceback"] = traceback.format_exc()
                    say(res["traceback"])
            record["results"].append(res)
            record["elapsed_s"] = round(time.monotonic() - t_start, 2)
            write_json(args.out, record)


def run(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """Fill `record` (written after every shape)."""
    t_start = time.monotonic()
    cfg = dict(SETTINGS[(args.device, args.quick)])
    for key in ("batches", "lengths", "rounds", "budget_s"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    cfg["seed"] = args.seed
    cfg["pin_memory"] = args.device == "cuda"
    platform_name = args.platform
    if platform_name == "auto":
        platform_name = "cpu" if args.device == "cpu" else "unspecified"
    record["params"] = {
        **cfg, "vocab_size": VOCAB, "max_model_len": MAX_MODEL_LEN, "requires_token_ids": True,
        "task": "embed", "prompt_lengths": "uniform in [L/2, L], request 0 exactly L",
        "timer": "time.perf_counter per call; round value = median call; gc disabled",
        "order": "rounds alternate pristine-first / patched-first",
        "warmup_note": f"{cfg['warmup']} untimed calls per tree and measure, then {CALIB_CALLS} "
        "timed calls whose median picks iters (the same for both trees)",
        "gc": "gc.freeze() after the imports; per timed block gc.collect() then disabled",
        "platform": platform_name,
    }  # fmt: skip
    record["measures"] = MEASURES
    manifest, pristine_dir, patched_dir = unpack_roots(args.roots.resolve(), args.work)
    device = _torch_device(args.device, record)
    series, source = args.series_hash, "argument"
    hash_file = args.roots / "SERIES_HASH"
    packed_hash = hash_file.read_text().strip() if hash_file.is_file() else None
    if series is None:
        series, source = packed_hash, f"{hash_file}"
    record["series_hash"], record["series_hash_source"] = series, source
    record["packed_series_hash"] = packed_hash
    if packed_hash and series != packed_hash:
        say(f"warning: --series-hash {series} differs from the packed roots' {packed_hash}")
    record["roots_manifest"] = manifest
    dirs = {"pristine": pristine_dir, "patched": patched_dir}
    trees = _import_trees(args, record, dirs, platform_name, t_start)
    gc.collect()
    gc.freeze()  # the imported modules: a full collection would cost ~0.4 s per timed block
    write_json(args.out, record)
    _measure_shapes(args, record, trees, device, cfg, t_start)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record: dict[str, Any] = {
        "step": STEP, "status": "running", "command": shlex.join([sys.executable, *sys.argv]),
        "argv": sys.argv, "cwd": os.getcwd(),
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "python": sys.version.split()[0], "vllm_version": VLLM_VERSION,
        "device": args.device, "quick": args.quick, "results": [],
    }  # fmt: skip
    code = 0
    try:
        run(args, record)
    except SetupError as exc:
        record["status"], record["error"] = "error", str(exc)
        say(f"error: {exc}")
        code = 2
    except Exception as exc:
        record["status"], record["error"] = "error", f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc()
        say(record["traceback"])
        code = 1
    finally:
        gc.unfreeze()  # let interpreter shutdown free the modules (quiet nanobind leak check)
    if record["status"] == "running":
        results = record["results"]
        contents_ok = all((r.get("contents") or {}).get("ok") for r in results)
        errors = [r for r in results if r.get("error")]
        record["contents_ok"] = contents_ok and bool(results)
        record["status"] = "ok" if record["contents_ok"] and not errors else "failed"
        code = 0 if record["status"] == "ok" else 1
        print(table(record), flush=True)
    write_json(args.out, record)
    say(f"{record['status']}: wrote {args.out}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
