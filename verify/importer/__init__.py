"""The one record route: raw measurement files -> records (verify.results schema 2).

    python -m verify.importer [--version 0.22.0 ...]

Reads every pin's raw files under `paths.results_root()` (the CPU tier's in ``cpu/<pin>/``, the
GPU tier's in ``gpu/<pin>/``), judges each with its rule from verify.verdicts and rewrites the
records beside them. Nothing is re-measured: a GPU step is never re-run from here.
`missing_data` lists what a record lacks that its rule needs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from verify import results
from verify.errors import PatchbenchError
from verify.importer import (
    cpu,
    gpu,
    gpu_engine_ab,
    gpu_engine_resolution,
    gpu_kernels,
    gpu_penalty_check,
    loop,
)
from verify.locks import pin_lock
from verify.versions import PINNED


def import_version(version: str) -> list[tuple[str, Path, dict[str, Any]]]:
    """(tier, path, record) of every record written for `version`."""
    written = []
    tier_records, markers = cpu.tier_records(version)
    read = {name for _, step in loop.planned(version) for name in step.records}
    tier_records = [r for r in tier_records if r["step"] not in read]  # the loop's: judged once
    for record in [*cpu.bench_records(version), *tier_records]:
        written.append(("cpu", results.write(record, "cpu", record["step"]), record))
    for path in markers:
        path.unlink()
    engine = [
        *gpu_engine_ab.records(version),
        *gpu_engine_resolution.records(version),
        *gpu_kernels.kernels(version),
        *gpu_penalty_check.history_records(version),
    ]
    tiered = [*[("gpu", r) for r in [*gpu.records(version), *engine]], *loop.tiered(version)]
    tiered += loop.frozen(version)
    for tier, record in tiered:
        written.append((tier, results.write(record, tier, record["step"]), record))
    return written


def missing_data(record: dict[str, Any]) -> list[str]:
    """What a record lacks that the current rules need (empty: nothing)."""
    gaps = []
    machine = record.get("machine", {})
    gaps += [f"machine {k}" for k, v in machine.items() if v == results.UNKNOWN]
    reason = record.get("reason", "")
    if "no pristine-vs-pristine control" in reason or "no pristine-vs-pristine control" in str(
        record.get("outcome")
    ):
        gaps.append("pristine-vs-pristine control")
    if "not recorded" in reason and record["step"].startswith("kernel"):
        gaps.append("host time per call (and eager time in the contract format)")
    if re.search(r"\bn=1\b", reason) or "no interval" in reason:
        gaps.append("more than one paired round")
    return gaps


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="append", choices=PINNED)
    args = parser.parse_args(argv)
    imported = {}
    try:
        for version in args.version or PINNED:
            with pin_lock(version):
                imported[version] = import_version(version)
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for version, written in imported.items():
        for tier, path, record in written:
            gaps = missing_data(record)
            print(
                f"{tier}/{version}/{path.name}: {record['outcome']}"
                + (f"  [lacks: {', '.join(gaps)}]" if gaps else "")
            )
    return 0
