"""Fixtures for pristine-vs-patched equivalence tests.

Run with `--pin VERSION`; a test module declares the pins it covers with
``pytestmark = pytest.mark.pins("0.22.0", ...)`` and is skipped for other pins. A pin ported
from one of those (pins.toml's `ported_from`) is covered too where it carries a patch whose
registry entry names the module as a harness of its steps on that pin: a ported pin gets its
equivalence tests from data, without editing the modules.
"""

from __future__ import annotations

import os

import pytest

from verify import pins
from verify.equivalence.roots import ImportRoot, roots
from verify.versions import MAIN


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pin",
        default=os.environ.get("PATCHBENCH_PIN", MAIN),
        help="pinned vLLM version whose build tree provides the pristine and patched roots",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    pin = config.getoption("--pin")
    for item in items:
        marker = item.get_closest_marker("pins")
        if marker is None:
            item.add_marker(pytest.mark.skip(reason="equivalence test without a pins(...) marker"))
        elif pin not in marker.args and not _covered_by_port(item, pin, marker.args):
            item.add_marker(pytest.mark.skip(reason=f"covers {marker.args}, not vLLM {pin}"))


def _covered_by_port(item: pytest.Item, pin: str, covered: tuple[str, ...]) -> bool:
    """Whether `pin` was ported from a pin the module covers and carries a patch whose registry
    steps on `pin` name the module."""
    if pins.entry(pin).get("ported_from") not in covered:
        return False
    from verify import registry

    module = item.path.relative_to(item.config.rootpath).as_posix()
    return any(
        pin in entry.pins and any(module in step.harness for step in entry.steps_on(pin))
        for entry in registry.load().values()
    )


@pytest.fixture(scope="session")
def pin(pytestconfig: pytest.Config) -> str:
    return pytestconfig.getoption("--pin")


@pytest.fixture(scope="session")
def _roots(pin: str) -> tuple[ImportRoot, ImportRoot]:
    return roots(pin)


@pytest.fixture(scope="session")
def pristine(_roots: tuple[ImportRoot, ImportRoot]) -> ImportRoot:
    return _roots[0]


@pytest.fixture(scope="session")
def patched(_roots: tuple[ImportRoot, ImportRoot]) -> ImportRoot:
    return _roots[1]
