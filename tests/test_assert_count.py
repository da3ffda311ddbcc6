"""tests/assert_count.py: a test that passes without checking anything fails."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER = """
import pytest
import warnings

def helper(x):
    assert x == 1

def test_asserts():
    assert 1 + 1 == 2

def test_helper_asserts():
    helper(1)

def test_raises():
    with pytest.raises(ZeroDivisionError):
        1 / 0

def test_warns():
    with pytest.warns(UserWarning):
        warnings.warn("w")

@pytest.mark.no_assert("smoke: running is the check")
def test_marked():
    pass

def test_nothing():
    x = 1 + 1

@pytest.mark.skip(reason="skipped tests are not judged")
def test_skipped():
    pass
"""


@pytest.mark.parametrize("hook, failed", [("true", 1), ("false", 0)])
def test_a_test_without_a_check_fails(pytester: pytest.Pytester, hook, failed):
    pytester.makeini(f"[pytest]\nenable_assertion_pass_hook = {hook}\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest("-p", "tests.assert_count", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6 - failed, failed=failed, skipped=1)
    if failed:
        result.stdout.fnmatch_lines(["*test_nothing passed without checking anything*"])
