"""GPU tier, kernel records: the kernel benchmarks' raw data contract (scripts/gpu_kernel_bench.py,
GPU time in a CUDA graph, eager time with L2 flushed, host time per call) -> one record per
kernel step of the registry (verify.verdicts.kernel, the step's threshold and claim)."""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

from verify import paths, registry, results, stats
from verify.importer import gpu as gpu_tier
from verify.series import read_series
from verify.verdicts import kernel


def is_contract(data: object) -> bool:
    rows = data.get("rows") if isinstance(data, dict) else None
    return bool(isinstance(data, dict) and "machine" in data and rows and "variant" in rows[0])


def kernel_file(
    version: str, variant: str, files: tuple[str, ...] = ()
) -> tuple[Path | None, bool]:
    """The strongest kernel file in the raw-data contract that measured `variant` (step folders
    and their raw/ folders of every pin): one that measured the patch as it is now
    (`variant_is_current` over `files`) before one that did not, then the one of more rounds,
    then the newest, so a shorter re-run does not displace a longer run of the same code; None
    where none did. With it, whether that file measured the patch as it is."""
    contract = []
    for path in [*gpu_tier.gpu_root().glob("*/*.json"), *gpu_tier.gpu_root().glob("*/raw/*.json")]:
        data = results.read_json(path)
        if is_contract(data) and any(r.get("variant") == variant for r in data["rows"]):
            current = bool(files) and variant_is_current(data, variant, version, files)
            rounds = (data.get("method") or {}).get("rounds") or 0
            contract.append((current, rounds, str(data.get("date", "")), path))
    if not contract:
        return None, False
    current, *_, path = max(contract)
    return path, current


def patch_number(version: str, subject: str) -> str:
    """The series number (``0006``) of the patch with `subject` on `version`, or ``""``."""
    for patch in read_series(version):
        if patch.subject == subject:
            return patch.name.split("-", 1)[0]
    return ""


def rebased_rows(rows: list[dict], variant: str, pin: str) -> list[dict]:
    """`rows` with `variant`'s baseline set to the pin's own kernel where the run measured it at
    the same shape (a run may compare every variant with one pin's kernel)."""
    measured = {kernel.shape_key(r) for r in rows if r["variant"] == pin}
    return [
        {**r, "baseline": pin} if r["variant"] == variant and kernel.shape_key(r) in measured else r
        for r in rows
    ]


def variant_is_current(data: dict, variant: str, version: str, files: tuple[str, ...]) -> bool:
    """True when the run recorded the sha256 of `variant`'s source and it equals one of the
    patch's files in the applied build tree of `version` (the run measured this patch as it is
    now); False when either is missing or they differ."""
    recorded = (data.get("variants") or {}).get(variant, {})
    sha = recorded.get("sha256") if isinstance(recorded, dict) else None
    tree = paths.build_root() / version
    if not sha or not tree.is_dir():
        return False
    for rel in files:
        path = tree / rel
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha:
            return True
    return False


def kernel_rows(data: dict) -> tuple[list[dict], dict, str, str]:
    """(contract rows, machine, command, date) of a kernel file of the raw-data contract."""
    machine = {
        k: data["machine"].get(k, results.UNKNOWN)
        for k in ("python", "gpu", "cpu", "torch", "triton", "cuda")
    }
    return data["rows"], machine, data.get("command", ""), data.get("date", "")


def _kernel_table(rows: list[dict], variant: str) -> str:
    by = {(r["variant"], kernel.shape_key(r)): r for r in rows}
    lines = [
        "| shape | identical | graph ratio | eager ratio (95% CI) | host ratio "
        "| median µs, baseline -> variant: graph / eager / host |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = by.get((r["baseline"], kernel.shape_key(r)))
        if r["variant"] != variant or base is None:
            continue
        cells, medians = [], []
        for key in ("graph_us", "eager_us", "host_us"):
            n = min(len(r.get(key) or []), len(base.get(key) or []))
            if not n:
                cells.append("not recorded")
                medians.append("-")
                continue
            a, b = base[key][:n], r[key][:n]
            cells.append(stats.paired_ratio(a, b).text(2))
            medians.append(f"{statistics.median(a):.1f} -> {statistics.median(b):.1f}")
        lines.append(
            f"| {kernel.shape_name(r)} | {r['identical']} | {' | '.join(cells)} "
            f"| {' / '.join(medians)} |"
        )
    return "\n".join(lines)


def kernel_headline(rows: list[dict], variant: str, shape: str, gpu: str, reason: str) -> str:
    """The headline of a kernel record: eager time (L2 flushed) of the pin's kernel and of
    `variant` at `shape`, their paired ratio, the GPU and the verdict over every shape; ""
    where the run did not measure that shape eagerly."""
    by = {(r["variant"], kernel.shape_key(r)): r for r in rows}
    row = next((r for r in rows if r["variant"] == variant and kernel.shape_name(r) == shape), None)
    base = by.get((row["baseline"], kernel.shape_key(row))) if row else None
    n = min(len((row or {}).get("eager_us") or []), len((base or {}).get("eager_us") or []))
    if not n:
        return ""
    a, b = base["eager_us"][:n], row["eager_us"][:n]
    ratio = stats.paired_ratio(a, b).text(2)
    where = str(gpu).removeprefix("NVIDIA ")
    pin = row["baseline"]
    return (
        f"kernel eager time (L2 flushed) v{pin} {statistics.median(a):.1f} us -> this PR "
        f"{statistics.median(b):.1f} us ({ratio}, this PR / v{pin}) at {shape} ({where}, "
        f"kernel alone, no model runner); {reason.split(': ', 1)[-1]}"
    )


def kernels(version: str) -> list[dict]:
    """One record per registry kernel step with a variant on `version` (ratios variant/baseline:
    below 1 is faster)."""
    out = []
    for entry in registry.load().values():
        for step in entry.steps_on(version):
            if step.rule != "kernel" or not step.variant or version not in entry.pins:
                continue
            number = patch_number(version, entry.pins[version])
            variant = step.variant.format(pin=version, number=number)
            patch = next(p for p in read_series(version) if p.name.startswith(number))
            path, current = kernel_file(version, variant, tuple(patch.files))
            if path is None:
                continue
            data = results.read_json(path)
            all_rows, machine, command, date = kernel_rows(data)
            rows = rebased_rows(all_rows, variant, version)
            verdict = kernel.judge(rows, variant, step.threshold, step.claim)
            numbers = {
                **verdict.numbers,
                "variant": variant,
                "source": path.name,
                "ratios": "variant/baseline time; below 1 is faster",
            }
            for name in step.records:
                record = results.make(
                    name,
                    "kernel",
                    version,
                    verdict.outcome,
                    numbers,
                    reason=verdict.reason,
                    command=command,
                    tables=[_kernel_table(rows, variant)],
                    machine=machine,
                    date=date,
                    patches=[entry.slug],
                )
                headline = step.headline_shape and kernel_headline(
                    rows, variant, step.headline_shape, machine.get("gpu", ""), verdict.reason
                )
                if headline:
                    record["headline"] = headline
                results.restamp(record, results.series_hash(version) if current else "unknown")
                out.append(record)
    return out
