"""docs/bad-input.md is what the bad-input tests currently record."""

from __future__ import annotations

from pathlib import Path

from verify import bad_input

REPO = Path(__file__).resolve().parent.parent


def test_bad_input_table_is_current():
    assert bad_input.write(REPO, check=True), "run `python -m verify bad-input-docs`"


def test_table_rows_are_normalized_and_deduplicated():
    rows = [
        {"test": "tests/t.py::test_a[1]", "input": "x", "message": "at 127.0.0.1:4242 | ok"},
        {"test": "tests/t.py::test_a[2]", "input": "x", "message": "at 127.0.0.1:5151 | ok"},
        {"test": "tests/t.py::test_b", "input": "y", "message": "sha " + "ab" * 32},
    ]
    table = bad_input.render(rows).split("|---|---|---|\n", 1)[1]
    assert table == (
        "| x | at 127.0.0.1:<port> \\| ok | `tests/t.py::test_a` |\n"
        "| y | sha <sha256> | `tests/t.py::test_b` |\n"
    )
