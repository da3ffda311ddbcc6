"""(slow) Every upstream pytest command of every committed PR body selects at least one test
of the pin's tests when collected (`pytest --collect-only -q`) in the pin's build tree, on the
patched code: through the CPU runtime where the pin has a recipe, else the source roots."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from verify import upstream_tests, versions
from verify.buildtree import BuildTree

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [
    (path.parent.name, command, path.name[:4])
    for path in sorted((REPO / "reports").glob("*/0*.md"))
    if not path.name.endswith("-appendix.md")
    for command in upstream_tests.body_pytest_commands(path.read_text())
]
PINS = sorted({pin for pin, _, _ in COMMANDS}, key=versions.version_key)


def test_the_bodies_hold_upstream_pytest_commands() -> None:
    assert COMMANDS and "0.22.0" in PINS


@pytest.fixture(scope="module", params=PINS)
def collected(request) -> dict[str, tuple[int, str]]:
    """{command: (tests selected, output tail)} of one pin's bodies, in its build tree."""
    version = request.param
    tree = BuildTree(version)
    tree.apply()
    found = {}
    with tempfile.TemporaryDirectory(prefix="body-commands-") as tmp:
        launcher = upstream_tests.launcher_for(version, tree, Path(tmp))
        tree.export_tree("HEAD", Path(tmp) / "tests-root", ["tests", "pyproject.toml"])
        for command in dict.fromkeys(c for pin, c, _ in COMMANDS if pin == version):
            found[command] = upstream_tests.collect(
                version, command, launcher, Path(tmp) / "tests-root"
            )
    return {"version": version, **found}


@pytest.mark.slow
@pytest.mark.network
def test_every_upstream_pytest_command_selects_a_test(collected) -> None:
    version = collected.pop("version")
    empty = {
        f"{number}: {command}": tail
        for pin, command, number in COMMANDS
        if pin == version
        for selected, tail in [collected[command]]
        if selected < 1
    }
    assert not empty, empty
