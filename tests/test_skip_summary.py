"""tests/skip_summary.py: one line per distinct skip reason, with its count."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER = """
import pytest

@pytest.mark.parametrize("n", range(3))
def test_no_gpu(n):
    pytest.skip("no GPU")

@pytest.mark.skip(reason="slow")
def test_slow():
    pass

@pytest.fixture
def needs_torch():
    pytest.importorskip("a_module_that_is_not_there")

def test_torch(needs_torch):
    pass

def test_runs():
    assert True
"""


def test_skips_are_counted_per_reason(pytester: pytest.Pytester):
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest("-p", "tests.skip_summary", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=5)
    lines = [line for line in result.outlines if line.startswith("skipped: ")]
    assert lines == [
        "skipped: 3 x no GPU",
        "skipped: 1 x could not import 'a_module_that_is_not_there': "
        "No module named 'a_module_that_is_not_there'",
        "skipped: 1 x slow",
    ]


def test_no_skips_no_section(pytester: pytest.Pytester):
    pytester.makepyfile(test_inner="def test_runs():\n    assert True\n")
    result = pytester.runpytest("-p", "tests.skip_summary", "-p", "no:cacheprovider")
    assert "skipped, by reason" not in result.stdout.str()
