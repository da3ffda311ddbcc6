"""Convert result files written before the shared schema (verify/results.py) into schema files.

    python scripts/import_results.py

Reads results/cpu/0.22.0/bench_003.json (scripts/bench_003_cpu.py),
results/cpu/0.22.0/bench_penalties_apply.json (scripts/bench_penalties_apply.py) and
results/gpu/0.22.0/kernel_001.{json,md} (scripts/gpu_kernel_bench.py) and writes
microbench-003.json, microbench-003-apply.json, kernel-001.json and kernel-010.json beside
them. Numbers, command, machine and date are copied from the originals, never recomputed; so is
the series hash, so a run made before the patches were integrated shows as "stale" in reports
until it is repeated. The 003
verdict follows verify.growth (pristine cost grows with L, patched stays flat).
"""

from __future__ import annotations

import json
from pathlib import Path

from verify import build_ab, results, sparse_penalties
from verify.verdicts import growth
from verify.verdicts.growth import length_growth

ROOT = Path(__file__).resolve().parent.parent / "results"


def bench_003() -> None:
    src = ROOT / "cpu" / "0.22.0" / "bench_003.json"
    data = json.loads(src.read_text())
    rows = data["results"]
    header = (
        "| L | penalties pristine ms | patched ms | ratio "
        "| think pristine ms | patched ms | ratio |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['L']} | {r['penalties_pristine_ms']:.2f} | {r['penalties_patched_ms']:.2f} | "
            f"{r['penalties_ratio']:.1f}x | {r['think_pristine_ms']:.2f} | "
            f"{r['think_patched_ms']:.2f} | {r['think_ratio']:.0f}x |"
        )
    xs = [r["L"] for r in rows]
    plot = {
        "x": xs,
        "series": {
            "penalties pristine": [r["penalties_pristine_ms"] for r in rows],
            "penalties patched": [r["penalties_patched_ms"] for r in rows],
            "think scan pristine": [r["think_pristine_ms"] for r in rows],
            "think scan patched": [r["think_patched_ms"] for r in rows],
        },
        "xlabel": "generated length L (B=128)",
        "ylabel": "ms per step (median)",
        "logx": True,
        "title": "per-step CPU cost vs generated length",
    }
    judged = growth.judge(rows)
    ok, reason = judged.outcome == "pass", judged.reason
    numbers = {
        "batch": data["params"]["batch"],
        "growth_shortest_to_longest_L": length_growth(rows),
        "plot": plot,
        "source": src.name,
    }
    result = results.make(
        "microbench-003", "003", "0.22.0", "pass" if ok else "fail", numbers,
        command=data["command"], reason=reason, tables=["\n".join(lines)],
    )  # fmt: skip
    # Provenance of the run: its series ("none": measured before the series was integrated).
    result.update(
        date=data["date"], machine=data["machine"], series_hash=data.get("series_hash", "none")
    )
    results.write(result, "cpu", "microbench-003")


def _bench_record(step: str, src: Path, verdict, numbers, table) -> None:
    """results/cpu/0.22.0/<step>.json from a benchmark file (skipped when it is absent):
    `verdict(params, rows)`, `numbers(params, rows)` and `table(rows)` make its content; date,
    series and the run's machine fields come from the file."""
    if not src.exists():
        return
    data = json.loads(src.read_text())
    params, rows = data["params"], data["results"]
    ok, reason = verdict(params, rows)
    result = results.make(
        step, "003", "0.22.0", "pass" if ok else "fail",
        {**numbers(params, rows), "source": src.name},
        command=data["command"], reason=reason, tables=[table(rows)],
    )  # fmt: skip
    result.update(date=data["date"], series_hash=data["series_hash"] or "none")
    result["machine"].update(data["machine"])  # this machine's CPU model + the run's own fields
    results.write(result, "cpu", step)


def bench_penalties_apply() -> None:
    """0008's dense vs sparse penalty math on this machine's CPU -> microbench-003-apply."""
    _bench_record(
        "microbench-003-apply",
        ROOT / "cpu" / "0.22.0" / "bench_penalties_apply.json",
        sparse_penalties.verdict,
        sparse_penalties.numbers,
        sparse_penalties.table,
    )


def bench_003_build_ab() -> None:
    """0009's staging fill vs the per-row loop on this machine's CPU -> microbench-003-build."""
    _bench_record(
        "microbench-003-build",
        ROOT / "cpu" / "0.22.0" / "bench_003_build_ab.json",
        lambda _params, rows: build_ab.verdict(rows),
        build_ab.numbers,
        build_ab.table,
    )


def kernels() -> None:
    src = ROOT / "gpu" / "0.22.0" / "kernel_001.json"  # run 9: see kernel_notes.md
    data = json.loads(src.read_text())
    meta = data["meta"]
    table = [
        line for line in (src.with_suffix(".md")).read_text().splitlines() if line.startswith("|")
    ]
    failures = data.get("failures", [])
    numbers = {
        "shapes": len(data["rows"]),
        "correctness_failures": len(failures),
        "copy_bandwidth_TBps": meta["copy_bandwidth_Bps"] / 1e12,
        "source": src.name,
    }
    for seed in ("001", "010"):
        outcome = "fail" if failures else "pass"
        result = results.make(
            f"kernel-{seed}", seed, "0.22.0", outcome, numbers, command=meta["command"],
            gpu=meta["gpu"], reason=f"{len(failures)} correctness failures" if failures else "",
            tables=["\n".join(table)],
        )  # fmt: skip
        result["date"] = meta["date"]
        result["series_hash"] = _kernel_series_hash(meta)
        results.write(result, "gpu", f"kernel-{seed}")


def _kernel_series_hash(meta: dict) -> str:
    """The current series hash if the benchmarked patch-010 kernel file is byte-identical to
    what scripts/kernels/extract_patch_kernels.py extracts from the current build tree (the
    series' later message-only or test-only changes do not touch it); else the run's own."""
    import subprocess
    import sys
    import tempfile

    from verify.series import series_hash

    variant = meta["variants"].get("0.22.0+010")
    tree = ROOT.parent / "build" / "0.22.0" / "vllm" / "v1" / "sample" / "rejection_sampler.py"
    if variant and tree.exists():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "k.py"
            extract = ROOT.parent / "scripts" / "kernels" / "extract_patch_kernels.py"
            subprocess.run([sys.executable, str(extract), str(tree), str(out)], check=True)
            text = out.read_bytes().split(b"\n", 1)[1]  # first line names the source path
        bench = (ROOT.parent / variant["path"]).read_bytes().split(b"\n", 1)[1]
        if text == bench:
            return series_hash("0.22.0")
    return meta.get("series_hash") or "unknown"


if __name__ == "__main__":
    bench_003()
    bench_penalties_apply()
    bench_003_build_ab()
    kernels()
