"""verify.upstream_tests: test selection, JUnit parsing and the verdict (each way it fails)."""

from __future__ import annotations

from tests.conftest import commit_change
from verify import upstream_tests as ut

SUBJECT = "[Perf] A"


def _run(tests: str, code: str, **outcomes: str) -> ut.Run:
    return ut.Run(tests, code, "pytest", 0, {f"t.py::{k}": v for k, v in outcomes.items()})


def _judge(patched: dict, edited: dict, explained: dict | None = None):
    pristine = _run("shipped", "pristine", a="passed", b="passed", c="failed")
    explained = {f"t.py::{k}": (SUBJECT, "why") for k in (explained or {})}
    return ut.judge(
        pristine,
        _run("shipped", "patched", **patched),
        _run("edited", "patched", **edited),
        explained,
        {SUBJECT: "0001-a.patch"},
    )


def test_explained_patched_only_failure_passes_and_names_the_patch():
    outcome, reason, details = _judge(
        {"a": "failed", "b": "passed", "c": "failed"}, {"a": "passed", "b": "passed"}, {"a": 1}
    )
    assert outcome == "pass", reason
    assert details["patched_only_failures"] == [
        {"test": "t.py::a", "patch": "0001-a.patch", "subject": SUBJECT, "reason": "why"}
    ]
    assert details["pre_existing_failures"] == ["t.py::c"]


def test_unexplained_failure_fails():
    outcome, reason, details = _judge({"a": "failed", "b": "passed"}, {"a": "passed"})
    assert outcome == "fail" and details["unexplained"] == ["t.py::a"], reason


def test_stale_explanation_fails():
    outcome, reason, _ = _judge({"a": "passed", "b": "passed"}, {"a": "passed"}, {"b": 1})
    assert outcome == "fail" and "stale" in reason


def test_new_failure_of_the_series_tests_fails():
    outcome, reason, details = _judge({"a": "passed"}, {"a": "passed", "new": "failed"})
    assert outcome == "fail" and details["edited_new_failures"] == ["t.py::new"], reason


def test_patched_code_failing_every_test_fails():
    everything = {"a": "failed", "b": "failed", "c": "failed"}
    outcome, reason, details = _judge(everything, {"a": "failed", "b": "failed"})
    assert outcome == "fail" and details["unexplained"] == ["t.py::a", "t.py::b"], reason
    assert details["edited_new_failures"] == ["t.py::a", "t.py::b"]


def test_only_collection_errors_on_the_patched_code_is_not_run():
    pristine = _run("shipped", "pristine", a="passed")
    errors = ut.Run("shipped", "patched", "pytest", 1, {"::tests.t": "failed"})
    outcome, reason, _ = ut.judge(pristine, errors, errors, {}, {})
    assert outcome == "not run" and "no test ran in shipped/patched" in reason


def test_nothing_collected_is_not_run():
    empty = ut.Run("shipped", "pristine", "pytest", 4, {})
    outcome, _, _ = ut.judge(empty, empty, empty, {}, {})
    assert outcome == "not run"


def test_parse_junit_ids(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.v1.test_x" name="test_a[p0]"/>'
        '<testcase classname="tests.v1.test_x.TestK" name="test_b"><failure/></testcase>'
        '<testcase classname="tests.v1.test_x" name="test_c"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    assert ut.parse_junit(junit, ["tests/v1/test_x.py"]) == {
        "tests/v1/test_x.py::test_a[p0]": "passed",
        "tests/v1/test_x.py::TestK::test_b": "failed",
        "tests/v1/test_x.py::test_c": "skipped",
    }


def test_touched_test_files(make_tree):
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x - 1\n", SUBJECT)
    (tree.path / "tests" / "test_new.py").write_text("def test_n():\n    pass\n")
    tree.git("add", "tests/test_new.py")
    tree.git("commit", "-q", "-m", "[Test] new\n\nUpstream: none")
    shipped, edited = ut.touched_test_files(tree)
    assert shipped == ["tests/test_sampler.py"]  # vllm/sampler.py -> tests/test_sampler.py
    assert edited == ["tests/test_new.py", "tests/test_sampler.py"]


def test_interrupted_or_empty_run_is_not_run():
    """A collection error (pytest rc 2) with one error entry must never read as a pass."""
    broken = ut.Run("shipped", "pristine", "pytest", 2, {"t.py::": "failed"})
    ok = _run("edited", "patched", a="passed")
    outcome, reason, _ = ut.judge(broken, broken, ok, {}, {})
    assert outcome == "not run" and "rc 2" in reason
    failing = ut.Run("shipped", "pristine", "pytest", 1, {"t.py::a": "failed"})
    assert ut.judge(failing, failing, ok, {}, {})[0] == "not run"


def test_source_roots_run_their_tests_offline(tmp_path):
    """Tests against the source roots never wait on the model hub (there is none here): the
    offline settings of the CPU runtime apply to them too."""
    from types import SimpleNamespace

    launcher = SimpleNamespace(roots={"patched": tmp_path}, platform=tmp_path, addon=None)
    env = ut.SourceLauncher.env(launcher, "patched")
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["TRITON_INTERPRET"] == "1" and env["VLLM_TARGET_DEVICE"] == "cpu"


class _HereLauncher:
    """This interpreter, no extra pytest options: enough for `collect`'s selection count."""

    python, extra = __import__("sys").executable, ()

    @staticmethod
    def env(code: str) -> dict[str, str]:
        return dict(__import__("os").environ)


def test_collect_counts_the_tests_beside_a_module_that_cannot_be_imported(tmp_path):
    (tmp_path / "test_fine.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    selected, tail = ut.collect("0.0.0", "pytest .", _HereLauncher(), tmp_path)
    assert selected == 2 and "no_such_module_here" in tail


def test_collect_of_a_missing_path_selects_nothing(tmp_path):
    (tmp_path / "test_fine.py").write_text("def test_a():\n    pass\n")
    assert ut.collect("0.0.0", "pytest test_gone.py", _HereLauncher(), tmp_path)[0] == 0
