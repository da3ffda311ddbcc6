"""Result files: every verification step writes one JSON that reports are built from.

Schema (``schema: 1``)::

    step        e.g. "equivalence", "microbench-003", "e2e-token-identity", "kernel-001"
    seed        which patch it covers: "000".."004", "010" (matches test_<seed>_* in the
                patch's Verify trailer), or "series" for whole-series steps
    vllm_version, series_hash, machine {cpu, gpu}, date (UTC ISO), command (exact)
    outcome     "pass" | "fail" | "not run" | "n/a"      reason: why (required unless pass)
    numbers     free-form measurements; tables: optional list of markdown tables
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from verify import paths
from verify.series import series_hash

OUTCOMES = ("pass", "fail", "not run", "n/a")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def make(
    step: str,
    seed: str,
    version: str,
    outcome: str,
    numbers: dict[str, Any] | None = None,
    *,
    reason: str = "",
    command: str | None = None,
    gpu: str | None = None,
    tables: list[str] | None = None,
) -> dict[str, Any]:
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
    if outcome != "pass" and not reason:
        raise ValueError(f"a {outcome!r} result needs a reason")
    return {
        "schema": 1,
        "step": step,
        "seed": seed,
        "vllm_version": version,
        "series_hash": series_hash(version),
        "machine": {"cpu": cpu_model(), "gpu": gpu, "python": platform.python_version()},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command or shlex.join([Path(sys.executable).name, *sys.argv]),
        "outcome": outcome,
        "reason": reason,
        "numbers": numbers or {},
        "tables": tables or [],
    }


def write(result: dict[str, Any], tier: str, name: str, root: Path | None = None) -> Path:
    """Write `result` to ``results/<tier>/<version>/<name>.json`` atomically."""
    path = (root or paths.results_root()) / tier / result["vllm_version"] / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def load_all(version: str, root: Path | None = None) -> list[dict[str, Any]]:
    """Every result file of `version` under results/ (any tier), with its path added."""
    found = []
    for path in sorted((root or paths.results_root()).glob(f"*/{version}/*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        data["_path"] = str(path)
        found.append(data)
    return found
