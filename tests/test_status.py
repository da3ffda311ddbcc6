"""Upstream detection: needed / applies / port / upstream / merged / obsolete / code only /
conflicts, claims checked against (synthetic) released code, advisories, the 120-column table."""

from __future__ import annotations

import json

import pytest

from tests.conftest import RELEASE_FILES, TRAILERS, commit_change, make_sdist
from verify import status
from verify.buildtree import BuildTree
from verify.upstream_code import ReleaseFiles


def _trailers(**changes: str) -> str:
    lines = dict(line.split(": ", 1) for line in TRAILERS.splitlines())
    lines.update({k.replace("_", "-"): v for k, v in changes.items()})
    return "\n".join(f"{k}: {v}" for k, v in lines.items())


def _offline(workspace, versions):
    """compute() keywords that read released code from the workspace's synthetic sdists."""
    files = ReleaseFiles(fetch=lambda v: workspace / "sdists" / f"vllm-{v}.tar.gz")
    return {"release_files": files, "release_list": list(versions)}


def test_status_table(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/sampler.py", "return x + 1\n", "return x - 1\n", "[Perf] A",
                  _trailers(Obsolete_in="9.9.2"))  # fmt: skip
    commit_change(base, "vllm/pooling.py", "True", "False", "[Perf] B",
                  _trailers(Status="merged-in 9.9.1"))  # fmt: skip
    commit_change(base, "vllm/sampler.py", "return x + 5\n", "return x * 5\n", "[Perf] C")
    base.export()
    make_tree("9.9.1", overrides={"vllm/pooling.py": "TOKENS_ON_DEVICE = False\n"}).apply()
    sampler = RELEASE_FILES["vllm/sampler.py"].replace("x + ", "x ^ ")
    overrides = {"vllm/pooling.py": "TOKENS = 'cpu'\n", "vllm/sampler.py": sampler}
    make_tree("9.9.2", overrides=overrides).apply()

    pins = ("9.9.0", "9.9.1", "9.9.2")
    rows = status.compute(pins, workspace / "build", workspace / "patches",
                          **_offline(workspace, pins))  # fmt: skip
    cells = {row.subject: {pin: row.cells[pin].text() for pin in pins} for row in rows}
    # A's trailer cannot be confirmed: 9.9.2 neither has its lines nor reverse-applies it
    assert cells["[Perf] A"] == {
        "9.9.0": "needed", "9.9.1": "applies",
        "9.9.2": "obsolete 9.9.2 (trailer; not found in code)",
    }  # fmt: skip
    # B reverse-applies on 9.9.1, and 9.9.2 has its lines (pooling.py without the flag)
    assert cells["[Perf] B"]["9.9.1"] == "upstream (merged-in 9.9.1)"
    assert cells["[Perf] B"]["9.9.0"] == "needed"
    assert cells["[Perf] C"]["9.9.0"] == "needed"
    assert cells["[Perf] C"]["9.9.1"] == "applies"
    assert cells["[Perf] C"]["9.9.2"].startswith("conflicts vllm/sampler.py:")
    claim_b = next(r.claim for r in rows if r.subject == "[Perf] B")
    assert claim_b["first_containing"] == "9.9.1" and claim_b["agrees"]

    # status never moves a build tree's HEAD
    assert base.git("log", "-1", "--format=%s") == "[Perf] C"

    table = status.render(rows, pins)
    assert "obsolete 9.9.2" in table and "conflicts vllm/sampler.py" in table
    out = workspace / "status.json"
    status.write_json(rows, out)
    data = json.loads(out.read_text())
    assert data["pins"] == list(pins)
    assert data["rows"][1]["cells"]["9.9.1"]["state"] == "upstream"
    assert set(data["series_hash"]) == set(pins) and data["generated"].startswith("20")


def test_trailer_that_names_a_later_release_is_flagged(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/sampler.py", "return x + 3\n", "return x - 3\n", "[Perf] D",
                  _trailers(Status="merged-in 9.9.3"))  # fmt: skip
    base.export()
    has_d = RELEASE_FILES["vllm/sampler.py"].replace("return x + 3\n", "return x - 3\n")
    for version in ("9.9.1", "9.9.2", "9.9.3"):
        make_sdist(workspace / "sdists", version, {"vllm/sampler.py": has_d})
    make_tree("9.9.3").apply()
    rows = status.compute(("9.9.0", "9.9.3"), workspace / "build", workspace / "patches",
                          **_offline(workspace, ["9.9.0", "9.9.1", "9.9.2", "9.9.3"]))  # fmt: skip
    claim = rows[0].claim
    assert claim["claimed"] == "9.9.3" and claim["first_containing"] == "9.9.1"
    assert not claim["agrees"]
    assert rows[0].cells["9.9.3"].short() in ("upstream", "merged 9.9.1!")
    assert "[DISAGREES]" in status.render(rows, ("9.9.0", "9.9.3"))


def test_series_that_breaks_on_its_own_pin_is_reported(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/pooling.py", "True", "False", "[Perf] B")
    base.export()
    # Same version name, different pristine content: the pin's own series conflicts.
    other_root = workspace / "other"
    (other_root / "sdists").mkdir(parents=True)
    make_sdist(other_root / "sdists", "9.9.0", {"vllm/pooling.py": "X = 1\n"})
    tree = BuildTree("9.9.0", other_root / "build", workspace / "patches",
                     fetch_sdist=lambda v: other_root / "sdists" / f"vllm-{v}.tar.gz")  # fmt: skip
    tree.ensure_baseline()
    rows = status.compute(("9.9.0",), other_root / "build", workspace / "patches",
                          check_code=False)  # fmt: skip
    assert rows[0].cells["9.9.0"].state == "conflicts"


def test_port_in_the_other_pins_series_is_named(make_tree, workspace):
    # The same change carried by both series, rebased: on each other's pin it is "ported".
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/sampler.py", "return x + 1\n", "return x - 1\n", "[Perf] A")
    base.export()
    sampler = RELEASE_FILES["vllm/sampler.py"].replace("return x + 1\n", "y = 0\nreturn x + 1\n")
    other = make_tree("9.9.1", overrides={"vllm/sampler.py": sampler})
    other.apply()
    commit_change(other, "vllm/sampler.py", "y = 0\nreturn x + 1\n", "y = 0\nreturn x - 1\n",
                  "[Perf] A")  # fmt: skip
    other.export()
    rows = status.compute(("9.9.0", "9.9.1"), workspace / "build", workspace / "patches",
                          check_code=False)  # fmt: skip
    cells = {(r.origin, pin): r.cells[pin].text() for r in rows for pin in ("9.9.0", "9.9.1")}
    assert cells[("9.9.0", "9.9.1")] == "ported as 9.9.1/0001"
    assert cells[("9.9.1", "9.9.0")] == "ported as 9.9.0/0001"
    assert cells[("9.9.0", "9.9.0")] == cells[("9.9.1", "9.9.1")] == "needed"


def test_port_wins_over_applies(make_tree, workspace):
    # Both series carry the change and each patch would also apply to the other pin.
    for version in ("9.9.0", "9.9.1"):
        tree = make_tree(version)
        tree.apply()
        commit_change(tree, "vllm/sampler.py", "return x + 2\n", "return x - 2\n", "[Perf] E")
        tree.export()
    rows = status.compute(("9.9.0", "9.9.1"), workspace / "build", workspace / "patches",
                          check_code=False)  # fmt: skip
    assert rows[0].cells["9.9.1"].text() == "ported as 9.9.1/0001"
    assert rows[0].cells["9.9.1"].short() == "port 0001"


def _commit_code_and_test(tree: BuildTree, subject: str, trailers: str = TRAILERS) -> None:
    """One commit that changes code (sampler f4) and an upstream test file."""
    for path, old, new in (
        ("vllm/sampler.py", "return x + 4\n", "return max(x + 4, 0)\n"),
        ("tests/test_sampler.py", "assert True\n", "assert 1 + 1 == 2\n"),
    ):
        target = tree.path / path
        target.write_text(target.read_text().replace(old, new, 1))
        tree.git("add", path)
    tree.git("commit", "-q", "-m", f"{subject}\n\nWhy: because.\n\n{trailers}")


def test_code_applies_tests_conflict_is_apart_from_conflicts(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    _commit_code_and_test(base, "[Bugfix] F")
    base.export()
    # 9.9.1 rewrote the test file only; 9.9.2 rewrote the code too
    make_tree("9.9.1", overrides={"tests/test_sampler.py": "def test_x():\n    pass\n"}).apply()
    sampler = RELEASE_FILES["vllm/sampler.py"].replace("x + 4", "x + 40")
    overrides = {"tests/test_sampler.py": "def test_x():\n    pass\n", "vllm/sampler.py": sampler}
    make_tree("9.9.2", overrides=overrides).apply()
    pins = ("9.9.0", "9.9.1", "9.9.2")
    rows = status.compute(pins, workspace / "build", workspace / "patches", check_code=False)
    assert rows[0].cells["9.9.1"].text() == "code-only tests conflict tests/test_sampler.py:1"
    assert rows[0].cells["9.9.1"].short() == "code only"
    assert rows[0].cells["9.9.2"].text().startswith("conflicts vllm/sampler.py:")


def test_advisory_missing_on_a_pin_is_shown(make_tree, workspace):
    fixes = _trailers(Fixes="GHSA-aaaa-bbbb-cccc", Status="merged-in 9.9.2")
    base = make_tree("9.9.0")
    base.apply()
    _commit_code_and_test(base, "[Bugfix] F", fixes)
    base.export()
    make_tree("9.9.1").apply()  # pristine flaw, nothing carried
    fixed = RELEASE_FILES["vllm/sampler.py"].replace("return x + 4\n", "return max(x + 4, 0)\n")
    make_tree("9.9.2", overrides={"vllm/sampler.py": fixed}).apply()  # fixed upstream
    pins = ("9.9.0", "9.9.1", "9.9.2")
    result = status.compute(pins, workspace / "build", workspace / "patches",
                            **_offline(workspace, pins))  # fmt: skip
    (advisory,) = result.advisories
    states = {pin: v["state"] for pin, v in advisory.pins.items()}
    assert states == {"9.9.0": "carried", "9.9.1": "missing fix", "9.9.2": "fixed upstream"}
    assert advisory.missing == ["9.9.1"]
    text = status.render(result, pins)
    assert "MISSING on 9.9.1" in text
    out = workspace / "status.json"
    status.write_json(result, out)
    assert json.loads(out.read_text())["advisories"][0]["pins"]["9.9.1"]["state"] == "missing fix"
    # the same fix carried on 9.9.1 makes the warning go away
    tree = make_tree("9.9.1")
    _commit_code_and_test(tree, "[Bugfix] F", fixes)
    tree.export()
    again = status.compute(pins, workspace / "build", workspace / "patches",
                           **_offline(workspace, pins))  # fmt: skip
    assert again.advisories[0].missing == []


def test_table_fits_120_columns_with_legend():
    long = "[Perf][Spec Decode] Split the vocabulary across programs in sample_recovered_tokens"
    pins = ("0.16.0", "0.18.1", "0.22.0", "0.33.0")
    cells = {
        "0.16.0": status.Cell("ported", "as 0.16.0/0002"),
        "0.18.1": status.Cell("code-only", "tests conflict tests/v1/sample/test_x.py:1049"),
        "0.22.0": status.Cell("needed"),
        "0.33.0": status.Cell("obsolete", "0.26.0 (trailer says 0.27.0) !"),
    }
    rows = [status.Row("0.22.0", f"00{i:02d}-x.patch", long, "proposed", cells) for i in range(12)]
    text = status.render(rows, pins)
    assert max(len(line) for line in text.splitlines()) <= status.WIDTH
    assert "obsolete 0.26.0!" in text and "port 0002" in text and "code only" in text
    assert "Legend:" in text and "code only   the code hunks apply" in text


@pytest.mark.slow
@pytest.mark.network
def test_real_claims_from_release_code(main_tree):
    """The seed series' claims against the real sdists (cache or PyPI)."""
    from verify import upstream_code
    from verify.series import read_series

    tree = main_tree
    patch = read_series("0.22.0")[0]
    change = upstream_code.Change.of(patch, status._blob_reader(tree))
    candidates = upstream_code.between(upstream_code.releases(), "0.22.0", "0.33.0")
    search = upstream_code.first_containing(
        change, "0.22.0", patch.obsolete_in, candidates, ReleaseFiles()
    )
    assert search.first == "0.26.0"


def test_claims_unchecked_without_index_or_cache(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/pooling.py", "True", "False", "[Perf] B",
                  _trailers(Status="merged-in 9.9.1"))  # fmt: skip
    base.export()
    make_tree("9.9.1", overrides={"vllm/pooling.py": "TOKENS = 'cpu'\n"}).apply()

    def unreachable(version):
        raise OSError("index unreachable")

    rows = status.compute(("9.9.0", "9.9.1"), workspace / "build", workspace / "patches",
                          release_files=ReleaseFiles(fetch=unreachable),
                          release_list=["9.9.1"])  # fmt: skip
    assert rows[0].claim is None
    assert rows[0].cells["9.9.1"].text() == "merged-in 9.9.1 (trailer; code not checked)"
