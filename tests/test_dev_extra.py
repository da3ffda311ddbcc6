"""The `dev` extra holds every module a tooling test skips without, except a vLLM runtime's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What only a vLLM runtime has (the `equivalence` extra installs its part): skipping is right.
RUNTIME = {"vllm"}


def _skipped_for() -> set[str]:
    """Top-level modules named by `pytest.importorskip` in the tooling tests."""
    found = set()
    for path in ROOT.glob("tests/test_*.py"):
        found |= set(re.findall(r'importorskip\("([A-Za-z0-9_]+)', path.read_text()))
    return found


def test_dev_extra_installs_what_the_tooling_tests_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] for r in extras["dev"]}
    allowed = named | set(extras["equivalence"]) | RUNTIME
    assert {"tokenizers", "transformers", "torch"} <= _skipped_for()
    assert _skipped_for() - allowed == set()
