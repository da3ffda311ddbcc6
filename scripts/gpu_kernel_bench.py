#!/usr/bin/env python3
"""GPU microbenchmark of ``sample_recovered_tokens_kernel`` variants (issue 8 step 1, issue 10).

Runs with torch + triton only (no vLLM): each upstream kernel is extracted
from a copy of vLLM's ``rejection_sampler.py`` with ``ast`` (the ``@triton.jit``
function and its decorator, nothing else) into a temporary module that imports
only triton/tl/torch; a candidate kernel file that defines a Python launcher
``sample_recovered_tokens(...)`` (scripts/kernels/split_recovered.py) is imported as is.

For each shape (vocab x requests x draft tokens, with and without draft probs):
  * correctness: every variant's output (poisoned with -1 before the call) is
    compared token for token with a float32 PyTorch reference
    (lowest argmax of prob * inv_q; 0.16.0's kernel divides by q instead, so it
    is also compared with a prob / q reference) and with the 0.22.0 kernel;
    extra tie-heavy inputs (quantized probs, inv_q == 1) are checked too;
  * timing: triton.testing.do_bench median (L2 flushed before each call),
    ``--rounds`` rounds with the variant order rotated every round; the
    per-round ratio t(baseline) / t(variant) gives a mean and 95% CI;
  * roofline: bytes the kernel must read (target [+ draft] probs for every token,
    inv_q once per request) / measured device-to-device copy bandwidth.

Usage (GPU machine, repo root):
  python3 scripts/gpu_kernel_bench.py --out-dir $OUT
Writes kernel_001.json and kernel_001.md into --out-dir.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import importlib.util
import inspect
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl  # noqa: F401  (used by extracted kernels)

HERE = Path(__file__).resolve().parent
KDIR = HERE / "kernels"
DEFAULT_VARIANTS = [
    f"0.16.0={KDIR / 'upstream' / 'rejection_sampler_0.16.0.py'}:sample_recovered_tokens_kernel",
    f"0.22.0={KDIR / 'upstream' / 'rejection_sampler_0.22.0.py'}:sample_recovered_tokens_kernel",
    f"0.22.0+001={KDIR / 'upstream' / 'rejection_sampler_0.22.0+001.py'}:sample_recovered_tokens_kernel",
    f"0.33.0={KDIR / 'upstream' / 'rejection_sampler_0.33.0.py'}:sample_recovered_tokens_kernel",
    f"split={KDIR / 'split_recovered.py'}",
]
DEFAULT_SHAPES = "1x1,1x2,1x4,2x4,4x1,4x4,8x1,8x4,16x4,32x4,64x4,128x4,256x4"
# two-sided 97.5% Student t quantiles, df = 1..30
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


# --------------------------------------------------------------------------- loading
def extract_kernel(path: Path, name: str, tag: str):
    """Extract the @triton.jit function `name` from `path` into its own module."""
    src = path.read_text()
    tree = ast.parse(src)
    lines = src.splitlines()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            body = "\n".join(lines[first - 1 : node.end_lineno])
            break
    else:
        raise SystemExit(f"{path}: no top-level function {name}")
    header = (
        f"# extracted from {path} ({name})\n"
        "import torch\nimport triton\nimport triton.language as tl\n\n"
    )
    tmp = Path(tempfile.mkdtemp(prefix="kbench_")) / f"k_{tag.replace('.', '_')}.py"
    tmp.write_text(header + body + "\n")
    spec = importlib.util.spec_from_file_location(tmp.stem, tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def import_module(path: Path, tag: str):
    spec = importlib.util.spec_from_file_location(f"cand_{tag.replace('.', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Variant:
    def __init__(self, spec: str):
        self.name, rest = spec.split("=", 1)
        if ":" in rest:
            path, kname = rest.rsplit(":", 1)
            self.path = Path(path)
            self.kernel = extract_kernel(self.path, kname, self.name)
            self.module = None
            argnames = list(inspect.signature(self.kernel.fn).parameters)
            self.uses_q = "q_ptr" in argnames  # 0.16.0 divides by q
            self.padded = "PADDED_VOCAB_SIZE" in argnames
            self.fp64_flag = "USE_FP64_GUMBEL" in argnames
        else:
            self.path = Path(rest)
            self.module = import_module(self.path, self.name)
            self.kernel = None
            self.uses_q = False
        self.source_sha = __import__("hashlib").sha256(self.path.read_bytes()).hexdigest()

    def launcher(self, inp, opts=None):
        out = inp["out"][self.name]
        q_or_inv = inp["q"] if self.uses_q else inp["inv_q"]
        B, K, V = inp["B"], inp["K"], inp["V"]
        if self.module is not None:
            m = self.module
            kw = dict(opts or {})

            def fn():
                m.sample_recovered_tokens(
                    out,
                    inp["cu"],
                    inp["draft_ids"],
                    inp["draft_probs"],
                    inp["target_probs"],
                    q_or_inv,
                    K,
                    **kw,
                )

            return fn
        k = self.kernel
        extra = {}
        if self.fp64_flag:
            extra["USE_FP64_GUMBEL"] = False
        size_arg = triton.next_power_of_2(V) if self.padded else 8192

        def fn():
            k[(B, K)](
                out,
                inp["cu"],
                inp["draft_ids"],
                inp["draft_probs"],
                inp["target_probs"],
                q_or_inv,
                V,
                size_arg,
                NO_DRAFT_PROBS=inp["draft_probs"] is None,
                **extra,
            )

        return fn


# --------------------------------------------------------------------------- inputs
def make_inputs(B, K, V, with_draft, seed, device, variants, ties=False):
    g = torch.Generator(device=device).manual_seed(seed)
    T = B * K
    if ties:
        # few distinct values -> many equal scores; inv_q == 1 keeps them equal
        target = torch.randint(0, 4, (T, V), generator=g, device=device).float() / 8
        draft = (
            torch.randint(0, 4, (T, V), generator=g, device=device).float() / 16
            if with_draft
            else None
        )
        q = torch.ones(B, V, device=device)
    else:
        target = torch.softmax(torch.randn(T, V, generator=g, device=device) * 3, dim=-1)
        draft = (
            torch.softmax(torch.randn(T, V, generator=g, device=device) * 3, dim=-1)
            if with_draft
            else None
        )
        q = torch.empty(B, V, device=device).exponential_(generator=g)
    inv_q = q.reciprocal()
    draft_ids = torch.randint(0, V, (T,), generator=g, device=device, dtype=torch.int32)
    cu = torch.arange(1, B + 1, device=device, dtype=torch.int32) * K
    out = {v.name: torch.full((T,), -1, dtype=torch.int32, device=device) for v in variants}
    return dict(
        B=B,
        K=K,
        V=V,
        T=T,
        target_probs=target,
        draft_probs=draft,
        q=q,
        inv_q=inv_q,
        draft_ids=draft_ids,
        cu=cu,
        out=out,
    )


def reference(inp, divide=False):
    B, K = inp["B"], inp["K"]
    target, draft = inp["target_probs"], inp["draft_probs"]
    if draft is None:
        prob = target.clone()
        prob[torch.arange(inp["T"], device=target.device), inp["draft_ids"].long()] = 0.0
    else:
        prob = torch.clamp_min(target - draft, 0.0)
    req = torch.arange(B, device=target.device).repeat_interleave(K)
    score = prob / inp["q"][req] if divide else prob * inp["inv_q"][req]
    # torch.argmax returns the first (lowest) index among maxima
    return score.argmax(dim=-1).to(torch.int32)


def roofline_bytes(B, K, V, with_draft):
    T = B * K
    return 4 * V * (T * (2 if with_draft else 1) + B) + 4 * (2 * T + B)


# --------------------------------------------------------------------------- stats
def ratio_ci(base, var):
    r = [b / v for b, v in zip(base, var, strict=True)]
    n = len(r)
    mean = sum(r) / n
    if n < 2:
        return mean, float("nan"), float("nan")
    sd = math.sqrt(sum((x - mean) ** 2 for x in r) / (n - 1))
    h = _T975[min(n - 2, len(_T975) - 1)] * sd / math.sqrt(n)
    return mean, mean - h, mean + h


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def copy_bandwidth(device):
    n = 256 * 1024 * 1024  # 1 GiB of float32
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")
    src = dst = None  # free the 2 GiB before timing kernels
    torch.cuda.empty_cache()
    return 2 * n * 4 / (t * 1e-3)  # bytes read + written per second


def n_input_sets(B, K, V, with_draft, l2_multiple_bytes=150e6, cap=512):
    """Input sets to rotate through so one pass over them is ~3x the H100's L2."""
    return max(1, min(cap, math.ceil(l2_multiple_bytes / roofline_bytes(B, K, V, with_draft))))


def capture(fns, calls):
    """CUDA graph that calls fns[0], fns[1], ... round robin `calls` times."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fns[i % len(fns)]()
    g.replay()
    torch.cuda.synchronize()
    return g


def time_graph(g, calls, replays):
    ts = []
    for _ in range(replays):
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        g.replay()
        en.record()
        en.synchronize()
        ts.append(st.elapsed_time(en) * 1e3 / calls)
    return median(ts)


# --------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--variant", action="append", help="NAME=FILE:KERNEL (extract) or NAME=FILE (module)"
    )
    ap.add_argument("--baseline", default="0.22.0")
    ap.add_argument("--vocab", default="32000,128256,151936")
    ap.add_argument(
        "--shapes", default=DEFAULT_SHAPES, help="requests x draft tokens, comma separated"
    )
    ap.add_argument("--draft-probs", default="no,yes")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=5)
    ap.add_argument("--rep-ms", type=float, default=25)
    ap.add_argument(
        "--replays", type=int, default=5, help="graph replays per timing sample (median)"
    )
    ap.add_argument(
        "--min-calls", type=int, default=16, help="kernel calls per graph replay (at least)"
    )
    ap.add_argument("--no-eager", action="store_true", help="skip the eager do_bench column")
    ap.add_argument(
        "--sweep", default="", help="candidate variant whose split configs to sweep, e.g. split"
    )
    ap.add_argument(
        "--sweep-configs",
        default="1024:4,2048:4,4096:4,4096:8,8192:8",
        help="split_block_size:num_warps list for --sweep",
    )
    ap.add_argument("--sweep-min-tokens", type=int, default=0)
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--name", default="kernel_001")
    ap.add_argument("--series-hash", default=os.environ.get("SERIES_HASH", "unknown"))
    ap.add_argument("--note", default="")
    args = ap.parse_args()

    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    variants = [Variant(s) for s in (args.variant or DEFAULT_VARIANTS)]
    names = [v.name for v in variants]
    assert args.baseline in names, "baseline must be one of the variants"
    props = torch.cuda.get_device_properties(device)
    bw = copy_bandwidth(device)
    print(
        f"# {props.name}, {props.multi_processor_count} SMs, copy bandwidth {bw / 1e12:.3f} TB/s",
        flush=True,
    )

    meta = dict(
        command=" ".join([os.path.basename(sys.executable)] + sys.argv),
        gpu=props.name,
        num_sms=props.multi_processor_count,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
        cuda=torch.version.cuda,
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        series_hash=args.series_hash,
        copy_bandwidth_Bps=bw,
        baseline=args.baseline,
        variants={
            v.name: dict(
                path=str(v.path.relative_to(HERE.parent))
                if v.path.is_relative_to(HERE.parent)
                else str(v.path),
                sha256=v.source_sha,
            )
            for v in variants
        },
        timing=dict(
            main="CUDA graph replay of back-to-back calls over rotating input sets (>= ~150 MB, 3x L2), "
            "median of --replays replays / calls",
            replays=args.replays,
            min_calls=args.min_calls,
            eager="triton.testing.do_bench median, L2 flushed before every call",
            warmup_ms=args.warmup_ms,
            rep_ms=args.rep_ms,
            rounds=args.rounds,
            order="rotated each round",
        ),
        note=args.note,
    )
    rows, sweep_rows, failures = [], [], []
    vocabs = [int(x) for x in args.vocab.split(",")]
    shapes = [tuple(int(y) for y in s.split("x")) for s in args.shapes.split(",")]
    modes = [m == "yes" for m in args.draft_probs.split(",")]
    seed = 0
    t0 = time.time()
    for V in vocabs:
        for wd in modes:
            for B, K in shapes:
                seed += 1
                # ---- correctness (random + tie-heavy inputs)
                exact = {}
                for ties in (False, True):
                    inp = make_inputs(B, K, V, wd, seed * 2 + ties, device, variants, ties=ties)
                    ref_mul, ref_div = reference(inp), reference(inp, divide=True)
                    outs = {}
                    for v in variants:
                        v.launcher(inp)()
                        outs[v.name] = inp["out"][v.name]
                    torch.cuda.synchronize()
                    for v in variants:
                        o = outs[v.name]
                        key = v.name + (":ties" if ties else "")
                        d = dict(
                            unwritten=int((o < 0).sum()),
                            out_of_vocab=int((o >= V).sum()),
                            mismatch_vs_ref_mul=int((o != ref_mul).sum()),
                            mismatch_vs_ref_div=int((o != ref_div).sum()),
                            mismatch_vs_baseline=int((o != outs[args.baseline]).sum()),
                        )
                        exact[key] = d
                        own_ref = "mismatch_vs_ref_div" if v.uses_q else "mismatch_vs_ref_mul"
                        if d["unwritten"] or d["out_of_vocab"] or d[own_ref]:
                            failures.append(dict(V=V, B=B, K=K, draft_probs=wd, variant=key, **d))
                    del inp
                # ---- timing: CUDA graph of back-to-back calls over rotating input
                # sets (> L2 in total, so every call reads from DRAM), launch
                # overhead excluded; plus eager do_bench (L2 flushed) for reference
                nsets = n_input_sets(B, K, V, wd)
                sets = [
                    make_inputs(B, K, V, wd, seed * 1000 + 7 + i, device, variants)
                    for i in range(nsets)
                ]
                calls = nsets * max(1, math.ceil(args.min_calls / nsets))
                graphs = {v.name: capture([v.launcher(x) for x in sets], calls) for v in variants}
                inp = sets[0]
                fns = {v.name: v.launcher(inp) for v in variants}
                times = {n: [] for n in names}
                eager = {n: [] for n in names}
                for r in range(args.rounds):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for n in order:
                        times[n].append(time_graph(graphs[n], calls, args.replays))
                        if not args.no_eager:
                            eager[n].append(
                                triton.testing.do_bench(
                                    fns[n],
                                    warmup=args.warmup_ms,
                                    rep=args.rep_ms,
                                    return_mode="median",
                                )
                                * 1e3
                            )
                del graphs
                rb = roofline_bytes(B, K, V, wd)
                roof_us = rb / bw * 1e6
                row = dict(
                    vocab=V,
                    requests=B,
                    draft_tokens=K,
                    num_tokens=B * K,
                    draft_probs=wd,
                    input_sets=nsets,
                    calls_per_replay=calls,
                    roofline_bytes=rb,
                    roofline_us=roof_us,
                    correctness=exact,
                    variants={},
                )
                for n in names:
                    m, lo, hi = ratio_ci(times[args.baseline], times[n])
                    row["variants"][n] = dict(
                        times_us=times[n],
                        median_us=median(times[n]),
                        eager_times_us=eager[n],
                        eager_median_us=median(eager[n]) if eager[n] else None,
                        x_roofline=median(times[n]) / roof_us,
                        speedup_vs_baseline=m,
                        speedup_ci95=[lo, hi],
                    )
                cand = next((v for v in variants if v.module is not None), None)
                if cand is not None and hasattr(cand.module, "choose_config"):
                    row["auto_config"] = cand.module.choose_config(
                        B * K, V, props.multi_processor_count
                    )
                elif cand is not None and hasattr(cand.module, "choose_num_splits"):
                    row["auto_num_splits"] = cand.module.choose_num_splits(
                        B * K, V, props.multi_processor_count
                    )
                rows.append(row)
                line = (
                    f"V={V:6d} {B:3d}x{K} dp={'y' if wd else 'n'} roof={roof_us:7.2f}us "
                    + " ".join(f"{n}={row['variants'][n]['median_us']:8.2f}" for n in names)
                )
                print(line, f"[{time.time() - t0:.0f}s]", flush=True)
                # ---- optional sweep of split configurations
                if args.sweep and B * K >= args.sweep_min_tokens:
                    sv = next(v for v in variants if v.name == args.sweep)
                    for cfg in args.sweep_configs.split(","):
                        blk, nw = (int(x) for x in cfg.split(":"))
                        tiles = triton.cdiv(V, blk)
                        for s in (1, 2, 4, 8, 16, 32, 64, 128):
                            if s > tiles or (
                                s > 1 and B * K * s > 16 * props.multi_processor_count
                            ):
                                continue
                            opts = dict(num_splits=s, split_block_size=blk, split_num_warps=nw)
                            inp["out"][sv.name].fill_(-1)
                            sv.launcher(inp, opts)()
                            torch.cuda.synchronize()
                            ok = bool((inp["out"][sv.name] == inp["out"][args.baseline]).all())
                            g = capture([sv.launcher(x, opts) for x in sets], calls)
                            t = time_graph(g, calls, args.replays)
                            del g
                            sweep_rows.append(
                                dict(
                                    vocab=V,
                                    requests=B,
                                    draft_tokens=K,
                                    draft_probs=wd,
                                    block=blk,
                                    num_warps=nw,
                                    num_splits=s,
                                    median_us=t,
                                    equal_to_baseline=ok,
                                    baseline_us=row["variants"][args.baseline]["median_us"],
                                    roofline_us=roof_us,
                                )
                            )
                del inp, fns, sets
                torch.cuda.empty_cache()
                # partial results survive a timeout
                Path(args.out_dir).mkdir(parents=True, exist_ok=True)
                (Path(args.out_dir) / f"{args.name}.partial.json").write_text(
                    json.dumps(dict(meta=meta, rows=rows, sweep=sweep_rows, failures=failures))
                )

    result = dict(meta=meta, rows=rows, sweep=sweep_rows, failures=failures)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.name}.json").write_text(json.dumps(result, indent=1))
    (out_dir / f"{args.name}.partial.json").unlink(missing_ok=True)
    try:
        (out_dir / f"{args.name}.md").write_text(render_md(result))
        print(render_md(result, short=True))
    except Exception as e:  # keep the JSON even if rendering breaks
        print("render_md failed:", repr(e))
    print(f"failures: {len(failures)}")
    return 1 if failures else 0


def render_md(res, short=False):
    meta, rows = res["meta"], res["rows"]
    names = list(meta["variants"])
    base = meta["baseline"]
    out = []
    if not short:
        out += [
            f"# {res.get('title', 'sample_recovered_tokens kernel benchmark')}",
            "",
            f"- command: `{meta['command']}`",
            f"- GPU: {meta['gpu']} ({meta['num_sms']} SMs); torch {meta['torch']}, triton {meta['triton']}, "
            f"CUDA {meta['cuda']}, Python {meta['python']}",
            f"- date: {meta['date']}; series hash: {meta['series_hash']}",
            f"- measured copy bandwidth (read+write): {meta['copy_bandwidth_Bps'] / 1e12:.3f} TB/s",
            "- roofline = bytes that must be read (target [+draft] probs per token, inv_q per request) / copy bandwidth",
            f"- timing (main columns): CUDA graph of back-to-back calls over rotating input sets larger than L2 "
            f"(launch overhead excluded, every call reads DRAM), median of replays; {meta['timing']['rounds']} rounds, "
            f"variant order rotated; 'eager' columns: triton.testing.do_bench median with L2 flush (includes "
            f"host launch overhead when that exceeds the flush time); "
            f"speedup = t({base}) / t(variant), mean over rounds with 95% CI (Student t)",
            "- variants: " + ", ".join(f"{n} = `{v['path']}`" for n, v in meta["variants"].items()),
            f"- correctness failures (unwritten, out of vocab, or != own reference): {len(res['failures'])}",
            "",
        ]
        if meta.get("note"):
            out += [meta["note"], ""]
    hdr = (
        "| vocab | req x draft | draft probs | roofline µs | "
        + " | ".join(f"{n} µs (x roof)" for n in names)
        + " | "
        + " | ".join(f"{n} eager µs" for n in names)
        + " | "
        + " | ".join(f"{n} vs {base} (95% CI)" for n in names if n != base)
        + " | exact vs ref |"
    )
    out += [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for r in rows:
        cells = [
            str(r["vocab"]),
            f"{r['requests']}x{r['draft_tokens']}",
            "yes" if r["draft_probs"] else "no",
            f"{r['roofline_us']:.2f}",
        ]
        cells += [
            f"{r['variants'][n]['median_us']:.1f} ({r['variants'][n]['x_roofline']:.2f})"
            for n in names
        ]
        cells += [
            f"{r['variants'][n]['eager_median_us']:.1f}"
            if r["variants"][n].get("eager_median_us")
            else "-"
            for n in names
        ]
        for n in names:
            if n == base:
                continue
            v = r["variants"][n]
            cells.append(
                f"{v['speedup_vs_baseline']:.2f} [{v['speedup_ci95'][0]:.2f}, {v['speedup_ci95'][1]:.2f}]"
            )
        ex = []
        for n in names:
            c = r["correctness"].get(n, {})
            ct = r["correctness"].get(n + ":ties", {})
            mm = c.get("mismatch_vs_ref_mul", -1) + ct.get("mismatch_vs_ref_mul", -1)
            ex.append(f"{n}:{'=' if mm == 0 else mm}")
        cells.append(" ".join(ex))
        out.append("| " + " | ".join(cells) + " |")
    if res.get("sweep") and not short:
        out += [
            "",
            "## Split sweep (candidate, forced configuration)",
            "",
            "| vocab | req x draft | draft probs | block | warps | splits | µs | baseline µs | roofline µs | equal |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in res["sweep"]:
            out.append(
                f"| {s['vocab']} | {s['requests']}x{s['draft_tokens']} | {'yes' if s['draft_probs'] else 'no'} | "
                f"{s['block']} | {s['num_warps']} | {s['num_splits']} | {s['median_us']:.1f} | "
                f"{s['baseline_us']:.1f} | {s['roofline_us']:.2f} | {s['equal_to_baseline']} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
