"""Drift on synthetic releases: which later releases changed the touched functions, the newest
release a patch still applies to, and whether upstream absorbed it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import RELEASE_FILES, commit_change, make_sdist
from verify import status
from verify.upstream_code import ReleaseFiles

SAMPLER = RELEASE_FILES["vllm/sampler.py"]


def test_drift_names_changes_newest_applying_and_absorption(make_tree, workspace):
    tree = make_tree("9.9.0")
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 4\n", "return x + 40\n", "[Perf] Four")
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] Pool")
    tree.export()
    sdists: Path = workspace / "sdists"
    later = {
        "9.9.1": {"vllm/sampler.py": SAMPLER.replace("return x + 7\n", "return x + 77\n")},
        "9.9.2": {"vllm/sampler.py": SAMPLER.replace("def f4(x):\n", "def f4(x):  # four\n")},
        "9.9.3": {"vllm/sampler.py": SAMPLER.replace("def f4(x):\n    return x + 4\n",
                                                     "def f4(x):  # four\n    return x + 40\n")},
    }  # fmt: skip
    for version, overrides in later.items():
        make_sdist(sdists, version, overrides)
    found = status.compute(("9.9.0",), workspace / "build", workspace / "patches",
                           check_code=False)  # fmt: skip
    files = ReleaseFiles(lambda v: sdists / f"vllm-{v}.tar.gz")
    listing = ["9.9.0", *later]
    found.drift = status.drift_of(found, listing, workspace / "build", workspace / "patches",
                                  files)  # fmt: skip
    four, pool = found.drift
    assert four.changed_in == ["9.9.2", "9.9.3"]  # f7's change in 9.9.1 is not f4's
    assert four.newest_applies == "9.9.1" and four.absorbed_in == "9.9.3"
    assert pool.changed_in == [] and pool.newest_applies == "9.9.3" and pool.absorbed_in is None
    text = status.render(found, ("9.9.0",))
    assert "Drift (releases after each pin, up to 9.9.3" in text
    assert (
        "9.9.0/0001: touched code changed in 9.9.2, 9.9.3; applies as is up to 9.9.1; "
        "absorbed in 9.9.3" in text
    )
