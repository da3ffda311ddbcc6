"""Dependencies between the patches of a series, derived by applying them on a synthetic
release."""

from __future__ import annotations

from tests.conftest import commit_change
from verify import dependencies


def test_which_patches_stand_alone_and_which_need_earlier_ones(make_tree, workspace):
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] One")
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] Pool")
    commit_change(tree, "vllm/sampler.py", "return x + 100\n", "return x + 101\n", "[Perf] On One")
    commit_change(tree, "vllm/sampler.py", "return x + 5\n", "return x + 50\n", "[Perf] Five")
    commit_change(tree, "vllm/pooling.py", "False", "None", "[Perf] On Pool and One")
    tree.export()
    found = dependencies.of_series("9.9.0", workspace / "build", workspace / "patches")
    assert [d.text() for d in found] == [
        "stands alone", "stands alone", "needs 0001 first", "stands alone", "needs 0002 first",
    ]  # fmt: skip
    assert tree.head() != tree.baseline() and tree.dirty_files() == []  # the tree is untouched
    lines = dependencies.render({"9.9.0": found})
    assert "0003 needs 0001 first" in lines[1] and "0001 stands alone" in lines[1]


def test_status_shows_the_dependencies_of_each_series(make_tree, workspace, tmp_path):
    import json

    from verify import status

    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] One")
    commit_change(tree, "vllm/sampler.py", "return x + 100\n", "return x + 101\n", "[Perf] On One")
    tree.export()
    found = status.compute(("9.9.0",), workspace / "build", workspace / "patches",
                           check_code=False)  # fmt: skip
    text = status.render(found, ("9.9.0",))
    assert "9.9.0: 0001 stands alone; 0002 needs 0001 first" in text
    status.write_json(found, tmp_path / "status.json")
    saved = json.loads((tmp_path / "status.json").read_text())["dependencies"]["9.9.0"]
    assert list(saved.values()) == ["stands alone", "needs 0001 first"]
