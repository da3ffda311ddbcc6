"""Equivalence results: JUnit XML -> one result file per seed, failures make it fail."""

from __future__ import annotations

import json

from verify.equivalence import record

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.equivalence.test_003_penalties" name="test_a[1]"/>
<testcase classname="tests.equivalence.test_003_penalties" name="test_b"/>
<testcase classname="tests.equivalence.test_001_recovered" name="test_c">
  <failure message="mismatch">AssertionError</failure></testcase>
<testcase classname="tests.equivalence.test_002_pooling" name="test_d">
  <skipped message="covers 0.18.1"/></testcase>
</testsuite></testsuites>
"""


def test_record_per_seed(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert record.record("0.22.0", junit, "nox -s equivalence-0.22.0", tmp_path) is False
    folder = tmp_path / "cpu" / "0.22.0"
    r003 = json.loads((folder / "equivalence-003.json").read_text())
    r001 = json.loads((folder / "equivalence-001.json").read_text())
    r002 = json.loads((folder / "equivalence-002.json").read_text())
    assert (r003["outcome"], r003["numbers"]["passed"]) == ("pass", 2)
    assert r003["numbers"]["files"] == {
        "tests/equivalence/test_003_penalties.py": {"passed": 2, "failed": 0, "skipped": 0}
    }
    assert r001["outcome"] == "fail"
    assert r001["numbers"]["failed_tests"] == ["tests.equivalence.test_001_recovered.test_c"]
    assert r002["outcome"] == "not run"


def test_a_module_without_a_seed_number_is_recorded_under_its_own_name(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.equivalence.test_mrv2_penalty_rows" name="test_a[0]"/>'
        '<testcase classname="tests.equivalence.test_mrv2_penalty_rows" name="test_b">'
        '<failure message="differ">AssertionError</failure></testcase>'
        "</testsuite></testsuites>"
    )
    assert record.record("0.22.0", junit, "nox -s equivalence-0.22.0", tmp_path) is False
    found = json.loads(
        (tmp_path / "cpu" / "0.22.0" / "equivalence-mrv2-penalty-rows.json").read_text()
    )
    assert (found["outcome"], found["numbers"]["passed"], found["numbers"]["failed"]) == (
        "fail",
        1,
        1,
    )
    assert record.group_of("tests.equivalence.test_003_penalties") == "003"
    assert record.group_of("tests.conftest") is None
