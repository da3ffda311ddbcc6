"""The `dev` extra holds every module a tooling test skips without, except a vLLM runtime's."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What only a vLLM runtime has (the `equivalence` extra installs its part): skipping is right.
RUNTIME = {"vllm"}


def _skipped_for() -> set[str]:
    """Top-level modules named by `pytest.importorskip` calls in the tooling tests (calls in
    their code, not in the text of test files that pytester writes)."""
    found = set()
    for path in ROOT.glob("tests/test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "importorskip"
                and isinstance(node.args[0], ast.Constant)
            ):
                found.add(node.args[0].value.split(".")[0])
    return found


def test_dev_extra_installs_what_the_tooling_tests_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] for r in extras["dev"]}
    allowed = named | set(extras["equivalence"]) | RUNTIME
    assert {"tokenizers", "transformers", "torch"} <= _skipped_for()
    assert _skipped_for() - allowed == set()
