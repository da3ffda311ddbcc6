"""verify.gpu.token_diff: the first differing step of kept batch outputs."""

from __future__ import annotations

import json

import pytest

from verify.gpu import token_diff


def test_first_differences_name_request_step_ids_and_history():
    a = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9]]
    b = [[1, 2, 3, 4], [5, 6, 5, 8], [9, 9, 9]]
    got = token_diff.first_differences(a, b)
    assert got == [
        {"request": 1, "step": 2, "ids": [7, 5], "seen_before": [False, True]},
        {"request": 2, "step": 2, "ids": [None, 9], "seen_before": [False, True]},
    ]
    assert token_diff.first_differences(a, a) == []
    with pytest.raises(ValueError, match="not the same batch"):
        token_diff.first_differences(a, a[:1])


def test_the_command_exits_1_on_a_difference(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps([[1, 2], [3, 4]]))
    (tmp_path / "b.json").write_text(json.dumps([[1, 2], [3, 5]]))
    assert token_diff.main([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    assert token_diff.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    assert "request 1: first at step 1: 4 vs 5" in capsys.readouterr().out
