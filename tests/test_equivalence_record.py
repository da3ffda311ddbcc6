"""Equivalence results: JUnit XML -> one result file per test module, failures make it fail."""

from __future__ import annotations

import json

from verify.equivalence import record

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.equivalence.test_penalty_output_tokens" name="test_a[1]"/>
<testcase classname="tests.equivalence.test_penalty_output_tokens" name="test_b"/>
<testcase classname="tests.equivalence.test_recovered_tokens" name="test_c">
  <failure message="mismatch">AssertionError</failure></testcase>
<testcase classname="tests.equivalence.test_pooling_prompt_ids" name="test_d">
  <skipped message="no registry step on vLLM 0.22.0 names it"/></testcase>
<testcase classname="tests.equivalence.conftest" name="test_e"/>
</testsuite></testsuites>
"""


def test_one_record_per_module(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert record.record("0.22.0", junit, "nox -s equivalence-0.22.0", tmp_path) is False
    folder = tmp_path / "cpu" / "0.22.0"
    tokens = json.loads((folder / "equivalence-penalty-output-tokens.json").read_text())
    recovered = json.loads((folder / "equivalence-recovered-tokens.json").read_text())
    pooling = json.loads((folder / "equivalence-pooling-prompt-ids.json").read_text())
    assert (tokens["outcome"], tokens["numbers"]["passed"]) == ("pass", 2)
    assert tokens["numbers"]["files"] == {
        "tests/equivalence/test_penalty_output_tokens.py": {"passed": 2, "failed": 0, "skipped": 0}
    }
    assert recovered["outcome"] == "fail"
    assert recovered["numbers"]["failed_tests"] == [
        "tests.equivalence.test_recovered_tokens.test_c"
    ]
    assert pooling["outcome"] == "not run"
    assert sorted(p.name for p in folder.iterdir()) == [
        "equivalence-penalty-output-tokens.json",
        "equivalence-pooling-prompt-ids.json",
        "equivalence-recovered-tokens.json",
    ]


def test_group_is_the_module_name_dashed():
    assert record.group_of("tests.equivalence.test_penalty_state_device") == "penalty-state-device"
    assert record.group_of("tests.conftest") is None


def test_a_module_that_does_not_run_on_the_pin_gets_no_record(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)  # on 0.16.0 only the recovered-token modules run
    record.record("0.16.0", junit, "nox -s equivalence-0.16.0", tmp_path)
    written = sorted(p.name for p in (tmp_path / "cpu" / "0.16.0").iterdir())
    assert written == ["equivalence-recovered-tokens.json"]
