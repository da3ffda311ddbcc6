#!/usr/bin/env python3
"""Microbenchmark on vLLM 0.18.1: pooling prompt token ids, pristine vs patched.

Patch ``patches/0.18.1/0001`` (backport of vLLM PR #38139) adds
``PoolingMetadata.prompt_token_ids_cpu`` / ``get_prompt_token_ids_cpu()``. Pristine 0.18.1
builds the padded ``[num_reqs, max_prompt_len]`` int64 ids on the host in
``InputBatch._make_sampling_metadata()`` (run by ``refresh_metadata()`` when the batch
changed), copies them to the device there, and ``get_pooling_metadata()`` hands out that device
tensor; GritLM's instruction search reads it back per request (``token_ids.cpu().numpy()``: one
device->host copy and sync each). Patched, ``get_pooling_metadata()`` also builds the host
tensor itself and GritLM reads ``token_ids.numpy()`` of the host views. Measured per
(batch, prompt length), host wall time per call (``time.perf_counter``), both trees interleaved
in one process:

- ``md``: ``get_pooling_metadata()`` alone (patched does more host work here: the extra host
  tensor; pristine only references the device tensor built at refresh);
- ``md_read``: ``get_pooling_metadata()`` + the ids read as each tree's ``gritlm.py`` reads them
  + ``torch.cuda.synchronize()``;
- ``step``: ``batch.sampling_metadata = batch._make_sampling_metadata()`` (what
  ``refresh_metadata()`` does after a batch change: the host build + host->device copy, same in
  both trees) + ``md_read``: the per-step cost when every step brings new requests.

Every request has ``PoolingParams(task="embed")`` with ``requires_token_ids=True``; prompt
lengths are uniform in ``[L/2, L]`` (one request exactly ``L``), random ids below vocab 32000,
``max_model_len`` 2048. Per (shape, measure): warmup calls also calibrate the call count (same
for both trees); rounds alternate the order pristine/patched; the round's value is the median
call. Reported: median of round medians (µs) per tree and speedup = pristine/patched, mean of
the per-round ratios with a Student-t 95% CI. The token ids the pooler gets (per request, as
numpy arrays) are compared with ``torch.equal`` between the trees and against the prompts; a
mismatch marks the shape failed, the timings are still written. The JSON is rewritten after
every shape, so a run cut short keeps what it measured.

How vLLM 0.18.1 is loaded: ``scripts/pack_pooling_bench_roots.py`` (run on the dev machine) packs
``.gpu/roots-0.18.1/`` (pristine ``vllm/`` + ``vllm.egg-info`` as ``pristine.tar.xz``, the series'
changed files as ``overlay/``, ``SERIES_HASH``, ``MANIFEST.json``); this script unpacks it to
``<work>/pristine`` and ``<work>/patched`` (= pristine + overlay; reused when unchanged). Both roots
are imported side by side as ``tests/equivalence`` does, with ``ImportRoot``
(verify.equivalence.roots, no gitpython needed): while a root is active its directory is
``sys.path[0]`` and ``sys.modules`` holds its ``vllm`` modules only; every vLLM call runs inside
``active()``. The roots are pure Python: ``vllm/platforms/cuda.py`` does ``import vllm._C``, so
platform detection must never run: before anything else from vLLM is imported,
``vllm.platforms._current_platform`` is preset in each root to ``UnspecifiedPlatform()`` (``--device
cuda``: no custom ops, ``is_pin_memory_available()`` True) or ``CpuPlatform()`` (``--device cpu``,
as the CPU equivalence tests), and ``InputBatch`` gets ``device`` and ``pin_memory`` (True on CUDA)
explicitly. Two other process-wide registrations are made idempotent
(``verify.equivalence.registrations``) so the second root can import: torch opaque types (torch >=
2.11, ``vllm.utils.torch_utils.ModuleName``) and ``direct_register_custom_op``. Nothing here calls
custom ops or torch.compile. A vLLM bundle (e.g. 0.22.0 at ``/tmp/vllm-bundle/site``) may stay on
``sys.path``/``PYTHONPATH`` for third-party packages: the active root comes first, and every loaded
``vllm`` module is checked to come from its root (the run fails otherwise).

Third-party modules the 0.18.1 import chain here pulls in (``pooling_params`` -> ``vllm.config``
-> ``transformers_utils``; ``gpu_input_batch``; the platform), all in the GPU image or the 0.22.0
bundle (0.18.1's requirements/common.txt is a subset of 0.22.0's): torch, numpy, transformers
(+ tokenizers, sentencepiece, jinja2, pillow, psutil), huggingface_hub (+ httpx, pyyaml),
safetensors, gguf (+ mistral_common, opencv-python-headless, tiktoken, requests, jsonschema),
pydantic, msgspec, cbor2, cloudpickle, regex, cachetools, pybase64, aiohttp, pyzmq,
prometheus_client, py-cpuinfo, typing_extensions, packaging, filelock, tqdm; triton where
installed (optional). ``setup.importable_third_party`` in the JSON lists what was loaded. A
missing one stops the run with a message naming it.

CPU smoke tests: ``--device cpu`` (CpuPlatform, as the equivalence tests) and ``--device cpu
--platform unspecified`` (the platform object the CUDA run uses).

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

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from verify import stats  # noqa: E402
from verify.equivalence import roots as _roots  # noqa: E402
from verify.equivalence.registrations import custom_ops_once, opaque_types_once  # noqa: E402

STEP = "micro-002"
VLLM_VERSION = "0.18.1"
DEFAULT_ROOTS = REPO / ".gpu" / f"roots-{VLLM_VERSION}"
DEFAULT_WORK = Path("/tmp/pb-018")
PACK_HINT = (
    "run `python scripts/pack_pooling_bench_roots.py` on the dev machine (repo root) and carry "
    "`.gpu/roots-0.18.1` with the device run"
)
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
    "pristine": (
        "self._get_instruction_len(token_ids.cpu().numpy())",
        "for token_ids in pooling_metadata.get_prompt_token_ids()\n",
    ),
    "patched": (
        "self._get_instruction_len(token_ids.numpy())",
        "for token_ids in pooling_metadata.get_prompt_token_ids_cpu()\n",
    ),
}

#: Measurement settings per (device, quick).
SETTINGS: dict[tuple[str, bool], dict[str, Any]] = {
    ("cuda", False): {
        "batches": [1, 8, 64, 256],
        "lengths": [128, 1024],
        "rounds": 6,
        "warmup": 10,
        "target_s": 0.08,
        "min_iters": 20,
        "max_iters": 2000,
        "budget_s": 75.0,
    },
    ("cuda", True): {
        "batches": [1, 64],
        "lengths": [128],
        "rounds": 3,
        "warmup": 5,
        "target_s": 0.02,
        "min_iters": 10,
        "max_iters": 500,
        "budget_s": 60.0,
    },
    ("cpu", False): {
        "batches": [1, 8, 64, 256],
        "lengths": [128, 1024],
        "rounds": 4,
        "warmup": 3,
        "target_s": 0.05,
        "min_iters": 5,
        "max_iters": 1000,
        "budget_s": 600.0,
    },
    ("cpu", True): {
        "batches": [1, 8, 64],
        "lengths": [128],
        "rounds": 3,
        "warmup": 2,
        "target_s": 0.01,
        "min_iters": 5,
        "max_iters": 200,
        "budget_s": 90.0,
    },
}


class SetupError(RuntimeError):
    """A problem with the inputs or the environment; the message says what to do."""


def say(message: str) -> None:
    print(f"[{STEP} {time.strftime('%H:%M:%S')}] {message}", flush=True)


# =============================================================================================
# import roots


_is_vllm = _roots._is_vllm


class ImportRoot(_roots.ImportRoot):
    """``verify.equivalence.roots.ImportRoot`` with this script's setup error and check."""

    def __init__(self, path: Path, label: str) -> None:
        if not (path / "vllm" / "__init__.py").exists():
            raise SetupError(f"{label} import root {path} has no vllm/__init__.py; {PACK_HINT}")
        super().__init__(path, label)

    def foreign_modules(self) -> list[str]:
        """Loaded ``vllm`` modules of this root whose file lies outside it (should be none)."""
        root = str(self.path.resolve())
        bad = []
        for name, module in self._modules.items():
            file = getattr(module, "__file__", None)
            if file and not str(Path(file).resolve()).startswith(root + os.sep):
                bad.append(f"{name}: {file}")
        return bad


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpack_roots(roots: Path, work: Path) -> tuple[dict[str, Any], Path, Path]:
    """(manifest, pristine, patched): unpack the packed roots into `work` (reused if current)."""
    tarball = roots / "pristine.tar.xz"
    manifest_path = roots / "MANIFEST.json"
    if not roots.is_dir() or not tarball.is_file() or not manifest_path.is_file():
        raise SetupError(f"{roots} does not hold pristine.tar.xz and MANIFEST.json; {PACK_HINT}")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("version") != VLLM_VERSION:
        raise SetupError(f"{roots} packs vLLM {manifest.get('version')}, not {VLLM_VERSION}")
    overlay_files = list(manifest.get("overlay", []))
    digest = hashlib.sha256(_sha256(tarball).encode())
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
    with tarfile.open(tarball, mode="r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(pristine, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tar.extractall(pristine)  # noqa: S202
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

    def __init__(self, name: str, root: ImportRoot, platform_name: str) -> None:
        import torch

        self.name = name
        self.root = root
        with root.active():
            platforms = importlib.import_module("vllm.platforms")
            if platforms._current_platform is None:
                if platform_name == "cpu":
                    from vllm.platforms.cpu import CpuPlatform

                    platforms._current_platform = CpuPlatform()
                else:
                    from vllm.platforms.interface import UnspecifiedPlatform

                    platforms._current_platform = UnspecifiedPlatform()
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
            max_num_reqs=len(prompts),
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN * len(prompts),
            device=device,
            pin_memory=pin_memory,
            vocab_size=VOCAB,
            block_sizes=[16],
            kernel_block_sizes=[16],
            is_pooling_model=True,
        )
        for i, prompt in enumerate(prompts):
            params = self.pooling_params.PoolingParams(task="embed")
            params.requires_token_ids = True
            batch.add_request(
                ib.CachedRequestState(
                    req_id=f"r{i}",
                    prompt_token_ids=prompt,
                    mm_features=[],
                    sampling_params=None,
                    pooling_params=params,
                    generator=None,
                    block_ids=([],),
                    num_computed_tokens=0,
                    output_token_ids=[],
                )
            )
        batch.refresh_metadata()
        return batch


def _third_party_modules() -> list[str]:
    """Top-level non-stdlib modules loaded so far (what the import chain needed)."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    names = {name.split(".")[0] for name in sys.modules}
    skip = {"vllm", "__main__", "_distutils_hack", "sitecustomize", "usercustomize"}
    return sorted(n for n in names if n not in stdlib and n not in skip and not n.startswith("_"))


# =============================================================================================
# measurement


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
    dev_p = mds["pristine"].prompt_token_ids
    host_q = mds["patched"].prompt_token_ids_cpu
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
        "ok": not problems,
        "problems": problems[:20],
        "padded_equal": full_equal,
        "pristine_device": None if dev_p is None else str(dev_p.device),
        "patched_host_device": None if host_q is None else str(host_q.device),
        "shape": None if host_q is None else list(host_q.shape),
    }


def _time_calls(fn: Callable[[], Any], n: int) -> list[float]:
    """Seconds per call of `n` calls, garbage collection off."""
    pc = time.perf_counter
    out = [0.0] * n
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
    ratios = [p / q for p, q in zip(p_meds, q_meds, strict=True) if q > 0]
    out: dict[str, Any] = {
        "median_us": {
            "pristine": statistics.median(p_meds) * 1e6,
            "patched": statistics.median(q_meds) * 1e6,
        },
        "round_median_us": {
            "pristine": [x * 1e6 for x in p_meds],
            "patched": [x * 1e6 for x in q_meds],
        },
        "ratios": ratios,
        "speedup": None,
        "ci95": None,
    }
    if ratios:  # verify.stats: geometric mean, log-scale 95% interval, MDE
        r = stats.ratio_of_ratios(ratios)
        out.update(speedup=r.ratio, mde=r.mde)
        out["ci95"] = [r.low, r.high] if r.low is not None else None
    return out


def measure_shape(
    trees: dict[str, Tree],
    batch_size: int,
    length: int,
    device: Any,
    cfg: dict[str, Any],
    deadline: float,
) -> dict[str, Any]:
    """Contents check and the three measures for one (batch, prompt length)."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    prompts = _prompts(batch_size, length, cfg["seed"])
    result: dict[str, Any] = {
        "batch": batch_size,
        "prompt_len": length,
        "lengths": {
            "min": min(map(len, prompts)),
            "max": max(map(len, prompts)),
            "total": sum(map(len, prompts)),
        },
        "contents": None,
        "measures": {},
        "error": None,
    }
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
            continue
        per_call = []
        for name, tree in trees.items():
            with tree.root.active():
                times = _time_calls(ops[name][measure], cfg["warmup"] + CALIB_CALLS)
            per_call.append(statistics.median(times[cfg["warmup"] :]))
        iters = int(cfg["target_s"] / max(max(per_call), 1e-7))
        iters = max(cfg["min_iters"], min(cfg["max_iters"], iters))
        meds: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for r in range(cfg["rounds"]):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for name in order:
                with trees[name].root.active():
                    meds[name].append(statistics.median(_time_calls(ops[name][measure], iters)))
        entry = _paired(meds["pristine"], meds["patched"])
        entry["iters"] = iters
        entry["rounds"] = cfg["rounds"]
        result["measures"][measure] = entry
    return result


# =============================================================================================
# output


def _fmt_ci(entry: dict[str, Any]) -> str:
    ci = entry.get("ci95")
    return "n/a" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


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
            lines.append(
                f"{res['batch']:>5} {res['prompt_len']:>5} {measure:<8} "
                f"{e['median_us']['pristine']:>12.1f} {e['median_us']['patched']:>11.1f} "
                f"{e['speedup']:>8.2f} {_fmt_ci(e):>14} {e['iters']:>6}  {ok}"
            )
    lines.append("speedup = pristine / patched (mean of per-round ratios); measures:")
    lines += [f"  {k}: {v}" for k, v in MEASURES.items()]
    return "\n".join(lines)


def write_json(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, path)


# =============================================================================================
# main


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
        "--platform",
        choices=("auto", "cpu", "unspecified"),
        default="auto",
        help="platform object preset in vllm.platforms (auto: cpu for --device cpu, else "
        "unspecified); `--device cpu --platform unspecified` smoke-tests the CUDA run's path",
    )
    args = parser.parse_args(argv)
    for length in args.lengths or []:
        if not 1 <= length < MAX_MODEL_LEN:
            parser.error(f"--lengths: {length} not in [1, {MAX_MODEL_LEN})")
    if args.rounds is not None and args.rounds < 2:
        parser.error("--rounds must be >= 2 for a confidence interval")
    return args


def run(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """Fill `record` (written after every shape)."""
    t_start = time.monotonic()
    device_type = args.device
    cfg = dict(SETTINGS[(device_type, args.quick)])
    for key in ("batches", "lengths", "rounds", "budget_s"):
        value = getattr(args, key)
        if value is not None:
            cfg[key] = value
    cfg["seed"] = args.seed
    cfg["pin_memory"] = device_type == "cuda"
    platform_name = args.platform
    if platform_name == "auto":
        platform_name = "cpu" if device_type == "cpu" else "unspecified"
    record["params"] = {
        **cfg,
        "vocab_size": VOCAB,
        "max_model_len": MAX_MODEL_LEN,
        "requires_token_ids": True,
        "task": "embed",
        "prompt_lengths": "uniform in [L/2, L], request 0 exactly L",
        "timer": "time.perf_counter per call; round value = median call; gc disabled",
        "order": "rounds alternate pristine-first / patched-first",
        "warmup_note": (
            f"{cfg['warmup']} untimed calls per tree and measure, then {CALIB_CALLS} timed "
            "calls whose median picks iters (the same for both trees)"
        ),
        "gc": "gc.freeze() after the imports; per timed block gc.collect() then disabled",
        "platform": platform_name,
    }
    record["measures"] = MEASURES
    manifest, pristine_dir, patched_dir = unpack_roots(args.roots.resolve(), args.work)

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise SetupError(f"{exc}: this benchmark needs torch (and numpy)") from exc
    device = torch.device(device_type)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SetupError("--device cuda, but torch sees no CUDA device (use --device cpu)")
    record["torch"] = torch.__version__
    record["torch_cuda"] = torch.version.cuda
    record["gpu"] = torch.cuda.get_device_name(0) if device.type == "cuda" else None

    series = args.series_hash
    source = "argument"
    hash_file = args.roots / "SERIES_HASH"
    packed_hash = hash_file.read_text().strip() if hash_file.is_file() else None
    if series is None:
        series, source = packed_hash, f"{hash_file}"
    record["series_hash"] = series
    record["series_hash_source"] = source
    record["packed_series_hash"] = packed_hash
    if packed_hash and series != packed_hash:
        say(f"warning: --series-hash {series} differs from the packed roots' {packed_hash}")
    record["roots_manifest"] = manifest

    shadowing = [p for p in sys.path if p and (Path(p) / "vllm" / "__init__.py").exists()]
    stale = sorted(n for n in sys.modules if _is_vllm(n))
    for name in stale:  # a sitecustomize may have imported another vLLM: keep it out
        del sys.modules[name]
    setup: dict[str, Any] = {
        "work": str(args.work),
        "sys_path_vllm_elsewhere": shadowing,
        "vllm_modules_dropped_at_start": stale[:10],
        "opaque_types": opaque_types_once(),
    }
    record["setup"] = setup
    say(f"importing vLLM {VLLM_VERSION} from {pristine_dir} and {patched_dir}")
    trees: dict[str, Tree] = {}
    for name, path in (("pristine", pristine_dir), ("patched", patched_dir)):
        try:
            trees[name] = Tree(name, ImportRoot(path, f"{name} {VLLM_VERSION}"), platform_name)
        except ModuleNotFoundError as exc:
            if exc.name and _is_vllm(exc.name):
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
        if tree.version["metadata"] != VLLM_VERSION or not tree.version[
            "vllm.__version__"
        ].startswith(VLLM_VERSION):
            raise SetupError(f"{name} root reports vLLM {tree.version}, not {VLLM_VERSION}")
        if foreign[name]:
            raise SetupError(f"{name} root loaded vllm modules from elsewhere: {foreign[name]}")
    if not all(c["ok"] for c in setup["gritlm_read"].values()):
        say("warning: gritlm.py does not read the ids as this script does (see setup)")
    gc.collect()
    gc.freeze()  # the imported modules: a full collection would cost ~0.4 s per timed block
    write_json(args.out, record)

    deadline = t_start + cfg["budget_s"]
    for batch_size in cfg["batches"]:
        for length in cfg["lengths"]:
            say(f"batch {batch_size}, prompt length {length}")
            if time.monotonic() > deadline:
                res: dict[str, Any] = {
                    "batch": batch_size,
                    "prompt_len": length,
                    "contents": None,
                    "measures": {m: {"skipped": "time budget spent"} for m in MEASURES},
                    "error": None,
                }
            else:
                try:
                    res = measure_shape(trees, batch_size, length, device, cfg, deadline)
                except Exception as exc:  # keep the other shapes
                    res = {
                        "batch": batch_size,
                        "prompt_len": length,
                        "contents": None,
                        "measures": {},
                        "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    }
                    say(res["traceback"])
            record["results"].append(res)
            record["elapsed_s"] = round(time.monotonic() - t_start, 2)
            write_json(args.out, record)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record: dict[str, Any] = {
        "step": STEP,
        "status": "running",
        "command": shlex.join([sys.executable, *sys.argv]),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "vllm_version": VLLM_VERSION,
        "device": args.device,
        "quick": args.quick,
        "results": [],
    }
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
