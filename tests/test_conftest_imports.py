"""The equivalence sessions load `tests/conftest.py` in a venv that has torch and pytest but not
the tool's own dependencies (nox installs the project with `--no-deps`): the conftest must
import without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Installed by `pip install -e .` but not by the equivalence sessions.
TOOL_ONLY = ("scipy", "yaml")


@pytest.mark.parametrize("conftest", ["tests/conftest.py", "tests/equivalence/conftest.py"])
def test_conftest_imports_without_the_tools_dependencies(conftest: str):
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in TOOL_ONLY)
    script = (
        f"import sys, importlib.util\n{blocked}"
        f"spec = importlib.util.spec_from_file_location('conftest_under_test', {conftest!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
