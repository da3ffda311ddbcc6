"""Where the project reads and writes: one function per location, each overridable by an
environment variable so tests and CI can point every write at a temporary folder.

| function        | variable                 | default                         |
|-----------------|--------------------------|---------------------------------|
| `build_root`    | `PATCHBENCH_BUILD_DIR`   | `<repo>/build`                  |
| `cache_dir`     | `PATCHBENCH_CACHE_DIR`   | `~/.cache/vllm-patchbench`      |
| `results_root`  | `PATCHBENCH_RESULTS_DIR` | `<repo>/results`                |
| `reports_root`  | `PATCHBENCH_REPORTS_DIR` | `<repo>/reports`                |
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _from_env(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value) if value else default


def build_root() -> Path:
    return _from_env("PATCHBENCH_BUILD_DIR", REPO / "build")


def cache_dir() -> Path:
    return _from_env("PATCHBENCH_CACHE_DIR", Path.home() / ".cache" / "vllm-patchbench")


def results_root() -> Path:
    return _from_env("PATCHBENCH_RESULTS_DIR", REPO / "results")


def reports_root() -> Path:
    return _from_env("PATCHBENCH_REPORTS_DIR", REPO / "reports")
