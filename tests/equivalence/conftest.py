"""Fixtures for pristine-vs-patched equivalence tests.

Run with `--pin VERSION`. A module runs for a pin where a registry entry carried on that pin
names it in the `harness` of one of its steps there (a ported pin's entries included, see
`registry.load`); everywhere else its tests are skipped with the reason. Which pins a module
covers is data in patches/registry/, not a marker in the module.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from verify.equivalence.record import modules_named_on
from verify.equivalence.roots import ImportRoot, roots
from verify.versions import MAIN


def _interpret_triton_without_a_gpu() -> None:
    """Triton decides at its first import whether its own @jit helpers (tl.max, ...) are
    interpreter functions, and the test modules are imported by name before any test runs:
    without a GPU, where the interpreter is the only way a kernel runs, turn it on here."""
    if "triton" in sys.modules or importlib.util.find_spec("torch") is None:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_interpret_triton_without_a_gpu()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pin",
        default=os.environ.get("PATCHBENCH_PIN", MAIN),
        help="pinned vLLM version whose build tree provides the pristine and patched roots",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    pin = config.getoption("--pin")
    named = modules_named_on(pin)
    for item in items:
        module = item.path.relative_to(config.rootpath).as_posix()
        if module not in named:
            reason = f"no registry step on vLLM {pin} names {module} in its harness"
            item.add_marker(pytest.mark.skip(reason=reason))


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
