"""The slow CPU-tier tests need the real runtime venv (~6 GB, minutes to build) and run vLLM:
they run only when asked for (`-m slow`, or PATCHBENCH_SLOW=1, as the e2e nox session does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    asked = "slow" in (config.getoption("-m") or "") or os.environ.get("PATCHBENCH_SLOW") == "1"
    if asked:
        return
    skip = pytest.mark.skip(reason="slow CPU-tier test: run with -m slow or PATCHBENCH_SLOW=1")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents and "slow" in item.keywords:
            item.add_marker(skip)
