"""A test passes only if it checked something: it ran at least one `assert` of a rewritten module
(the test modules and conftest files: helpers there count), or called `pytest.raises` or
`pytest.warns`, or is marked `@pytest.mark.no_assert("why")`.

Passed asserts are counted by pytest's `pytest_assertion_pass` hook, which needs
`enable_assertion_pass_hook = true` (`nox -s tests` passes `-o enable_assertion_pass_hook=true`;
not in the ini file, where it doubled the equivalence suites' time); without it the check is
off. The option only takes effect in modules rewritten after it was set: a `__pycache__`
written before it holds asserts that report nothing (delete it)."""

from __future__ import annotations

import functools

import pytest

CHECKS = pytest.StashKey[int]()
_running: list[pytest.Item] = []


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getini("enable_assertion_pass_hook"))


def _counting(func):
    """`func` (pytest.raises or pytest.warns) counting one check for the running test."""

    @functools.wraps(func)
    def counted(*args, **kwargs):
        if _running:
            item = _running[-1]
            item.stash[CHECKS] = item.stash.get(CHECKS, 0) + 1
        return func(*args, **kwargs)

    counted.__wrapped_by_assert_count__ = True
    return counted


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_assert(why): the test checks nothing by assertion")
    for name in ("raises", "warns"):
        if not getattr(getattr(pytest, name), "__wrapped_by_assert_count__", False):
            setattr(pytest, name, _counting(getattr(pytest, name)))


def pytest_assertion_pass(item: pytest.Item) -> None:
    item.stash[CHECKS] = item.stash.get(CHECKS, 0) + 1


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if (
        call.when == "call"
        and report.passed
        and _enabled(item.config)
        and not item.stash.get(CHECKS, 0)
        and item.get_closest_marker("no_assert") is None
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} passed without checking anything: it ran no assert and no "
            "pytest.raises/pytest.warns (mark it @pytest.mark.no_assert('why') if that is "
            "right; a __pycache__ older than enable_assertion_pass_hook counts nothing)"
        )
    return report
