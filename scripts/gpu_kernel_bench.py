#!/usr/bin/env python3
"""Recovered-token kernels of the rejection sampler, timed the way vLLM launches them.

GPU machine, torch + triton only (no vLLM). Every variant is lifted from a
``vllm/v1/sample/rejection_sampler.py`` that ``python -m verify.gpu_overlay`` packed from a
build tree (``pristine/``: the pin's own kernel, ``patched/``: the series, ``at-NNNN/``: the
series through patch NNNN), carried to the machine:

* ``NAME=FILE:KERNEL``: the ``@triton.jit`` function ``KERNEL`` of FILE, launched as that
  release's ``sample_recovered_tokens`` does (grid (batch, max_spec_len), BLOCK_SIZE 8192);
* ``NAME=FILE``: a patched FILE (patch 0.22.0/0006, 0.33.0/0003): its split-path block,
  from the ``sample_recovered_tokens_split_kernel`` definition to the end of the file,
  run through its own ``_launch_sample_recovered_tokens`` (vLLM's ``num_compute_units``
  replaced by a cached torch query; everything else verbatim).

vLLM 0.33.0 launches its kernel through ``triton_kernel_dispatcher_with_warmup``; that
dispatcher's own host work is not reproduced (the kernel is launched directly with the
dispatcher's arguments), so 0.33.0's host and eager figures here are lower bounds.

Per shape (vocab x requests x draft tokens, uniform or ragged, with and without draft
probs), every variant's token ids are compared with the float32 reference of
``verify/equivalence/recovered_tokens_ref.py`` (lowest index among the maxima) on
random, forced-tie (few distinct values, q == 1) and NaN-row inputs; then
``--rounds`` rounds, the variant order rotated each round, each round storing per
variant the median of

* ``graph_us``: a CUDA graph of back-to-back calls over rotating input sets larger than
  L2, replayed ``--replays`` times (GPU time only, every call reads DRAM);
* ``eager_us``: one eager call from an idle GPU with L2 flushed: write a 256 MB buffer,
  synchronize, record a start event, call, record an end event; the events span the
  host's issue time of the call and the GPU time after it (the latency a step sees
  when the host is the bottleneck, as at small batch); median of ``--eager-samples``
  samples, the variants alternating sample by sample;
* ``queued_us``: the same eager call issued behind a sleep kernel (L2 flushed, the start
  event recorded after the sleep): the GPU time of one launch outside a graph, without
  the host's issue time (so ``eager_us - queued_us`` is what the host adds eagerly);
  median of ``--eager-samples`` samples, the variants alternating sample by sample;
* ``host_us``: CPU time to issue one call: the GPU is kept busy by a sleep kernel
  (``torch.cuda._sleep``) so that launches never wait, then back-to-back calls are
  timed with ``time.perf_counter_ns`` and divided; median of 5 batches of
  ``--host-calls`` / 5 calls, the variants alternating batch by batch.

Writes ``<name>.json`` (raw format below, partial file while running) and ``<name>.md``.
JSON: ``machine`` {python, gpu, cpu, torch, triton, cuda}, ``command``, ``date``,
``method``, ``variants`` {name: {source, sha256}}, ``checks`` (fp64 Gumbel noise), and
``rows``: {variant, baseline, vocab, requests, draft_tokens (int, or the list per request
when ragged), draft_probs, identical, checks, graph_us, eager_us, queued_us, host_us}.

Variants are named as the registry's kernel steps read them: ``{pin}`` for the pin's own
kernel, ``{pin}+{number}`` for a patch. Usage (GPU machine, repo root, overlay unpacked at
/tmp/pb-overlay; docs/gpu-runbook.md):
  O=/tmp/pb-overlay/0.22.0; F=vllm/v1/sample/rejection_sampler.py
  python3 scripts/gpu_kernel_bench.py --out-dir $OUT --name kernel-0.22.0 \\
      --variant 0.22.0=$O/pristine/$F:sample_recovered_tokens_kernel \\
      --variant 0.22.0+0006=$O/patched/$F
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import functools
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from verify.equivalence import recovered_tokens_ref as ref  # noqa: E402
from verify.gpu.kernel_timers import (  # noqa: E402  (also the penalty-state benches' timers)
    capture,
    sleep_cycles_per_us,
    time_eager,
    time_graph,
    time_host,
)
from verify.results import cpu_model  # noqa: E402

DEFAULT_SHAPES = "1x1,1x4,4x4,16x1,8x4,16x4,32x4,64x4,128x4,256x4,r16,r220,r900"
#: ragged layouts: name -> (requests, max draft tokens); lengths drawn in 0..max, seeded
RAGGED = {"r16": (8, 4), "r220": (64, 7), "r900": (256, 7)}
SPLIT_BLOCK_MARKER = "sample_recovered_tokens_split_kernel"


# --------------------------------------------------------------------------- loading
def _module_from_source(source: str, name: str) -> ModuleType:
    mod = ModuleType(name)
    mod.__dict__.update(torch=torch, triton=triton, tl=tl, functools=functools)
    # Triton reads a @triton.jit function's source through inspect: give it a file.
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"kbench_{name}.py"
    path.write_text(
        "import functools\nimport torch\nimport triton\nimport triton.language as tl\n\n" + source
    )
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    return mod


def extract_kernel(path: Path, name: str, tag: str):
    """The top-level @triton.jit function `name` of `path`, in a module of its own."""
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            mod = _module_from_source("\n".join(lines[first - 1 : node.end_lineno]), tag)
            return getattr(mod, name)
    raise SystemExit(f"{path}: no top-level function {name}")


@functools.cache
def _torch_num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _num_sms(device: torch.device) -> int:
    """vLLM's cached ``num_compute_units`` for CUDA, 132 (an H100) elsewhere."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _torch_num_sms(index)
    return 132


def extract_split_path(path: Path, tag: str) -> ModuleType:
    """The patch's block (split kernel to end of file) of a patched rejection_sampler.py."""
    text = path.read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == SPLIT_BLOCK_MARKER:
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            break
    else:
        raise SystemExit(f"{path}: no {SPLIT_BLOCK_MARKER} (not a patched file?)")
    mod = _module_from_source("\n".join(lines[first - 1 :]), tag)
    mod._num_sms = _num_sms
    for name in ("_launch_sample_recovered_tokens", "recovered_tokens_launch_config"):
        if not hasattr(mod, name):
            raise SystemExit(f"{path}: the split block has no {name}")
    return mod


class Variant:
    def __init__(self, spec: str):
        self.name, rest = spec.split("=", 1)
        path, _, kname = rest.partition(":") if ":" in rest else (rest, "", "")
        self.path = Path(path)
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()
        tag = "".join(c if c.isalnum() else "_" for c in self.name)
        self.kernel = extract_kernel(self.path, kname, tag) if kname else None
        self.module = None if kname else extract_split_path(self.path, tag)
        params = list(self.kernel.arg_names) if self.kernel else []
        self.fp64_flag = "USE_FP64_GUMBEL" in params
        self.source = f"{path}{':' + kname if kname else ''}"

    @property
    def supports_fp64(self) -> bool:
        return self.fp64_flag or (self.module is not None and "0.33" in str(self.path))

    def launcher(self, inp, out=None):
        """A no-argument callable: one call of this variant on `inp`."""
        out = inp["out"][self.name] if out is None else out
        cu, ids, dp, tp, iq = (inp[k] for k in ("cu", "ids", "draft", "target", "inv_q"))
        if self.kernel is None:
            launch = self.module._launch_sample_recovered_tokens
            k = inp["max_spec_len"]
            return lambda: launch(out, cu, ids, dp, tp, iq, k)
        grid, vocab, kernel = (inp["batch"], inp["max_spec_len"]), inp["vocab"], self.kernel
        if self.fp64_flag:  # 0.33.0: vLLM's dispatcher passes these as keywords
            fp64 = iq.dtype == torch.float64
            return lambda: kernel[grid](
                out, cu, ids, dp, tp, iq, vocab_size=vocab, BLOCK_SIZE=8192,
                NO_DRAFT_PROBS=dp is None, USE_FP64_GUMBEL=fp64,
            )  # fmt: skip
        return lambda: kernel[grid](
            out, cu, ids, dp, tp, iq, vocab, 8192, NO_DRAFT_PROBS=dp is None
        )


# --------------------------------------------------------------------------- inputs
def draft_counts(shape: str, seed: int) -> list[int]:
    """Draft tokens per request: "BxK" (uniform) or a RAGGED name (seeded lengths)."""
    if shape in RAGGED:
        requests, most = RAGGED[shape]
        g = torch.Generator().manual_seed(1000 + requests)
        counts = torch.randint(0, most + 1, (requests,), generator=g).tolist()
        counts[0] = max(counts[0], 1)
        return counts
    b, k = (int(x) for x in shape.split("x"))
    return [k] * b


def make_inputs(counts, vocab, with_draft, seed, device, names, kind="random", fp64=False):
    """Inputs of one call; `kind`: random, ties (few values, q == 1) or nan (q == 0 in
    the last tile of every other request, so zero probs score 0 * inf = NaN there)."""
    g = torch.Generator(device=device).manual_seed(seed)
    tokens, batch = sum(counts), len(counts)
    if kind == "ties":
        target = torch.randint(0, 4, (tokens, vocab), generator=g, device=device).float() / 8
        draft = torch.randint(0, 4, (tokens, vocab), generator=g, device=device).float() / 16
        q = torch.ones(batch, vocab, device=device)
    else:
        target = torch.softmax(torch.randn(tokens, vocab, generator=g, device=device) * 3, -1)
        draft = torch.softmax(torch.randn(tokens, vocab, generator=g, device=device) * 3, -1)
        q = torch.empty(batch, vocab, device=device).exponential_(generator=g)
    if kind == "nan":
        tail = (vocab - 1) // 1024 * 1024
        target[:, tail:] = 0.0
        draft[:, tail:] = 0.0
        q[::2, tail:] = 0.0
    if fp64:
        q = q.double()
    ids = torch.randint(0, vocab, (tokens,), generator=g, device=device, dtype=torch.int32)
    cu = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
    return dict(
        batch=batch, max_spec_len=max(counts), vocab=vocab, cu=cu, ids=ids,
        draft=draft if with_draft else None, target=target, inv_q=q.reciprocal(),
        out={n: torch.full((tokens,), -1, dtype=torch.int32, device=device) for n in names},
    )  # fmt: skip


def reference_ids(inp) -> torch.Tensor:
    return ref.recovered_token_ids(
        inp["cu"], inp["ids"], inp["draft"], inp["target"], inv_q=inp["inv_q"]
    )


def check_variants(variants, counts, vocab, with_draft, seed, device) -> dict[str, dict]:
    """Per variant: ids == reference on random, tie and NaN inputs (all written, in vocab),
    on two calls each (the first call of a shape may take another launch path than the
    repeated calls that are timed, e.g. a JIT launch before a cached one): both must hold."""
    names = [v.name for v in variants]
    result = {n: {} for n in names}
    for i, kind in enumerate(("random", "ties", "nan")):
        inp = make_inputs(counts, vocab, with_draft, seed * 3 + i, device, names, kind)
        expected = reference_ids(inp)
        calls = []
        for _ in range(2):
            for v in variants:
                inp["out"][v.name].fill_(-1)
                v.launcher(inp)()
            if device.type == "cuda":
                torch.cuda.synchronize()
            calls.append({n: inp["out"][n].clone() for n in names})
        for n in names:
            result[n][kind] = all(bool(torch.equal(c[n], expected)) for c in calls)
            result[n][f"{kind}_in_vocab"] = all(
                bool(((c[n] >= 0) & (c[n] < vocab)).all()) for c in calls
            )
        del inp
    return result


def check_fp64(variants, device) -> list[dict]:
    """0.33.0 with float64 Gumbel noise: each variant that takes it against the first."""
    takers = [v for v in variants if v.supports_fp64]
    rows = []
    for counts, vocab, with_draft in (([1], 151936, False), ([3, 1, 4], 32000, True)):
        names = [v.name for v in takers]
        inp = make_inputs(counts, vocab, with_draft, 77, device, names, fp64=True)
        errors = {}
        for v in takers:
            try:
                v.launcher(inp)()
                if device.type == "cuda":
                    torch.cuda.synchronize()
            except Exception as e:  # a kernel that does not compile for float64 scores
                errors[v.name] = f"{type(e).__name__}: {str(e)[:300]}"
        first = inp["out"][takers[0].name] if takers else None
        for v in takers:
            rows.append(dict(
                variant=v.name, against=takers[0].name, counts=counts, vocab=vocab,
                draft_probs=with_draft, error=errors.get(v.name),
                identical=v.name not in errors and bool(torch.equal(inp["out"][v.name], first)),
            ))  # fmt: skip
    return rows


# --------------------------------------------------------------------------- timing
def n_input_sets(counts, vocab, with_draft, total_bytes=150e6, cap=512) -> int:
    """Input sets to rotate through in a graph so one pass reads ~3x the H100's L2."""
    tokens = sum(counts)
    per_set = 4 * vocab * (tokens * (2 if with_draft else 1) + len(counts))
    return max(1, min(cap, math.ceil(total_bytes / per_set)))


# --------------------------------------------------------------------------- main
def machine() -> dict:
    return dict(
        python=platform.python_version(), gpu=torch.cuda.get_device_name(), cpu=cpu_model(),
        torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
        num_sms=_torch_num_sms(torch.cuda.current_device()),
    )  # fmt: skip


def time_shape(variants, counts, vocab, with_draft, seed, device, args, flush, cyc):
    """{variant: {graph_us, eager_us, host_us}}: per-round medians, order rotated."""
    names = [v.name for v in variants]
    nsets = n_input_sets(counts, vocab, with_draft)
    sets = [make_inputs(counts, vocab, with_draft, seed * 1000 + i, device, names)
            for i in range(nsets)]  # fmt: skip
    calls = nsets * max(1, math.ceil(args.min_calls / nsets))
    graphs = {v.name: capture([v.launcher(s) for s in sets], calls) for v in variants}
    fns = {v.name: v.launcher(sets[0]) for v in variants}
    out = {n: dict(graph_us=[], eager_us=[], queued_us=[], host_us=[]) for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            out[n]["graph_us"].append(round(time_graph(graphs[n], calls, args.replays), 2))
        eager = time_eager(fns, order, flush, args.eager_samples)
        queued = time_eager(fns, order, flush, args.eager_samples, sleep=int(300 * cyc))
        host = time_host(fns, order, args.host_calls, cyc)
        for n in order:
            out[n]["eager_us"].append(round(eager[n], 2))
            out[n]["queued_us"].append(round(queued[n], 2))
            out[n]["host_us"].append(round(host[n], 2))
    del graphs, sets, fns
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def forced_config(variant, config):
    """Context: the module variant's launch config forced to (splits, block, warps)."""
    mod = variant.module

    @contextlib.contextmanager
    def ctx():
        saved = mod.recovered_tokens_launch_config
        mod.recovered_tokens_launch_config = lambda *a: config
        plan = getattr(mod, "_recovered_tokens_launch_plan", None)
        if plan is not None:
            plan.cache_clear()
        try:
            yield
        finally:
            mod.recovered_tokens_launch_config = saved
            if plan is not None:
                plan.cache_clear()

    return ctx()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--variant", action="append", required=True, help="see above")
    ap.add_argument("--baseline", default="0.22.0")
    ap.add_argument("--vocab", default="32000,128256,151936,262144")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="BxK or " + "/".join(RAGGED))
    ap.add_argument("--draft-probs", default="no,yes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--min-calls", type=int, default=16, help="calls per graph (at least)")
    ap.add_argument("--eager-samples", type=int, default=25)
    ap.add_argument("--host-calls", type=int, default=40)
    ap.add_argument("--sweep", default="", help="module variant whose configs to sweep")
    ap.add_argument("--sweep-shapes", default="64x4,128x4")
    ap.add_argument("--sweep-configs", default="", help="splits:block:warps,...")
    ap.add_argument("--sweep-draft-probs", default="yes", help="sweep with these: no,yes")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--name", default="kernel_recovered")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: CPU tensors under TRITON_INTERPRET=1, every timer makes one call "
        "and reports 0 (checks the harness, measures nothing)",
    )
    return ap.parse_args(argv)


def _use_dry_timers() -> None:
    """--dry-run: the timers call once and return 0; no CUDA anywhere."""
    g = globals()

    def once(fns, order, *_a, **_k):
        return {n: fns[n]() or 0.0 for n in order}

    g["capture"] = lambda fns, calls: [f() for f in fns]
    g["n_input_sets"] = lambda *_a: 2
    g["time_graph"] = lambda graph, calls, replays: 0.0
    g["time_eager"] = once
    g["time_host"] = once
    g["sleep_cycles_per_us"] = lambda: 0.0
    g["machine"] = lambda: dict(
        python=platform.python_version(),
        gpu=None,
        cpu="dry run",
        torch=torch.__version__,
        triton=triton.__version__,
        cuda=None,
    )


def method(args) -> dict:
    return dict(
        graph_us="CUDA graph of back-to-back calls over rotating input sets (>= 150 MB), "
        f"median of {args.replays} replays / calls",
        eager_us="flush L2 (zero a 256 MB buffer), synchronize, start event, call, end "
        f"event; median of {args.eager_samples} samples, variants alternating per sample",
        queued_us="as eager_us, but the call issued behind a ~300 us sleep kernel and the "
        "start event recorded after it: GPU time of one launch outside a graph, host issue "
        "hidden",
        host_us=f"perf_counter_ns over back-to-back calls / calls, median of 5 batches of "
        f"{args.host_calls // 5} calls, variants alternating per batch, issued while a "
        "torch.cuda._sleep kernel keeps the GPU busy",
        rounds=args.rounds, order="variants rotated every round; lists hold per-round medians",
        identical="ids == verify/equivalence/recovered_tokens_ref (float32, lowest index "
        "among maxima, NaN never wins) on random and forced-tie inputs; checks adds NaN rows",
    )  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("--dry-run needs TRITON_INTERPRET=1 in the environment")
        _use_dry_timers()
    device = torch.device("cpu" if args.dry_run else "cuda")
    variants = [Variant(s) for s in args.variant]
    names = [v.name for v in variants]
    if args.baseline not in names:
        raise SystemExit(f"--baseline {args.baseline} is not a variant ({names})")
    flush = torch.empty(0 if args.dry_run else int(256e6 // 4), dtype=torch.int32, device=device)
    cyc = sleep_cycles_per_us()
    result = dict(
        machine=machine(), command=" ".join(["python3"] + sys.argv),
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), method=method(args),
        variants={v.name: dict(source=v.source, sha256=v.sha256) for v in variants},
        checks=dict(fp64=check_fp64(variants, device)), rows=[], sweep=[],
    )  # fmt: skip
    print("#", result["machine"], flush=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"{args.name}.partial.json"
    t0, seed = time.time(), 0
    for vocab in (int(x) for x in args.vocab.split(",")):
        for with_draft in (m == "yes" for m in args.draft_probs.split(",")):
            for shape in args.shapes.split(","):
                seed += 1
                counts = draft_counts(shape, seed)
                checks = check_variants(variants, counts, vocab, with_draft, seed, device)
                times = time_shape(variants, counts, vocab, with_draft, seed, device, args,
                                   flush, cyc)  # fmt: skip
                uniform = len(set(counts)) == 1
                for v in variants:
                    c = checks[v.name]
                    result["rows"].append(dict(
                        variant=v.name, baseline=args.baseline, vocab=vocab,
                        requests=len(counts), draft_tokens=counts[0] if uniform else counts,
                        draft_probs=with_draft,
                        identical=c["random"] and c["ties"] and c["random_in_vocab"],
                        checks=c, **times[v.name],
                    ))  # fmt: skip
                print(progress_line(result["rows"][-len(variants) :], shape, t0), flush=True)
                partial.write_text(json.dumps(result))
            if args.sweep and ("yes" if with_draft else "no") in args.sweep_draft_probs:
                result["sweep"] += sweep(variants, args, vocab, with_draft, device, flush, cyc)
    (out_dir / f"{args.name}.json").write_text(json.dumps(result, separators=(",", ":")))
    partial.unlink(missing_ok=True)
    (out_dir / f"{args.name}.md").write_text(render_md(result))
    print(render_md(result))
    bad = [r for r in result["rows"] if not r["identical"]]
    print(f"rows not identical to the reference: {len(bad)}")
    return 0


def sweep(variants, args, vocab, with_draft, device, flush, cyc) -> list[dict]:
    """Forced launch configs of one module variant against the baseline (graph, eager)."""
    target = next(v for v in variants if v.name == args.sweep)
    base = next(v for v in variants if v.name == args.baseline)
    rows = []
    for shape in args.sweep_shapes.split(","):
        counts = draft_counts(shape, 0)
        for cfg in args.sweep_configs.split(","):
            config = tuple(int(x) for x in cfg.split(":"))
            with forced_config(target, config):
                ok = check_variants([base, target], counts, vocab, with_draft, 5, device)
                t = time_shape([base, target], counts, vocab, with_draft, 9, device, args,
                               flush, cyc)  # fmt: skip
            rows.append(dict(
                variant=target.name, config=config, vocab=vocab, draft_tokens=counts,
                draft_probs=with_draft, identical=ok[target.name]["random"]
                and ok[target.name]["ties"], **{k: t[target.name][k] for k in t[target.name]},
                baseline={k: t[base.name][k] for k in t[base.name]},
            ))  # fmt: skip
            print(f"  sweep {vocab} {shape} dp={with_draft} {config}: graph "
                  f"{statistics.median(t[target.name]['graph_us']):.1f} vs "
                  f"{statistics.median(t[base.name]['graph_us']):.1f}", flush=True)  # fmt: skip
    return rows


def _median_or_nan(row, key) -> float:
    values = row.get(key) or []
    return statistics.median(values) if values else math.nan


def progress_line(rows, shape, t0) -> str:
    r0 = rows[0]
    head = f"V={r0['vocab']:6d} {shape:>5s} dp={'y' if r0['draft_probs'] else 'n'}"
    cells = [
        f"{r['variant']}={statistics.median(r['eager_us']):.1f}/"
        f"{_median_or_nan(r, 'queued_us'):.1f}/"
        f"{statistics.median(r['host_us']):.1f}/{statistics.median(r['graph_us']):.1f}"
        f"{'' if r['identical'] else '!'}"
        for r in rows
    ]
    return f"{head} eager/queued/host/graph us: {' '.join(cells)} [{time.time() - t0:.0f}s]"


def shape_label(row) -> str:
    k = row["draft_tokens"]
    if isinstance(k, list):
        return f"ragged {row['requests']} req, {sum(k)} tok"
    return f"{row['requests']}x{k}"


def render_md(result) -> str:
    """Eager / host / graph medians (of per-round medians) per shape and variant."""
    rows = result["rows"]
    names = list(result["variants"])
    m = result["machine"]
    out = [
        "# Recovered-token kernels: eager / queued / host / graph (us, median of rounds)",
        "",
        f"- {m['gpu']}, {m['cpu']}; torch {m['torch']}, triton {m['triton']}, "
        f"CUDA {m['cuda']}, Python {m['python']}; {result['date']}",
        f"- command: `{result['command']}`",
        "- variants: " + "; ".join(f"{n} = {v['source']}" for n, v in result["variants"].items()),
        "- cells: eager / queued / host / graph; `!` = not identical to the reference",
        "",
        "| vocab | shape | draft probs | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for i in range(0, len(rows), len(names)):
        group = rows[i : i + len(names)]
        r0 = group[0]
        cells = [
            f"{statistics.median(r['eager_us']):.1f} / {_median_or_nan(r, 'queued_us'):.1f}"
            f" / {statistics.median(r['host_us']):.1f}"
            f" / {statistics.median(r['graph_us']):.1f}{'' if r['identical'] else ' !'}"
            for r in group
        ]
        dp = "yes" if r0["draft_probs"] else "no"
        out.append(f"| {r0['vocab']} | {shape_label(r0)} | {dp} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
