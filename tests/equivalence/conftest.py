"""Fixtures for pristine-vs-patched equivalence tests.

Run with `--pin VERSION`; a test module declares the pins it covers with
``pytestmark = pytest.mark.pins("0.22.0", ...)`` and is skipped for other pins.
"""

from __future__ import annotations

import os

import pytest

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
        elif pin not in marker.args:
            item.add_marker(pytest.mark.skip(reason=f"covers {marker.args}, not vLLM {pin}"))


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
