"""Upstream detection: needed / applies / upstream / merged-in / obsolete / conflicts."""

from __future__ import annotations

import json

from tests.conftest import RELEASE_FILES, TRAILERS, commit_change
from verify import status


def _trailers(**changes: str) -> str:
    lines = dict(line.split(": ", 1) for line in TRAILERS.splitlines())
    lines.update({k.replace("_", "-"): v for k, v in changes.items()})
    return "\n".join(f"{k}: {v}" for k, v in lines.items())


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
    rows = status.compute(pins, workspace / "build", workspace / "patches")
    cells = {row.subject: {pin: row.cells[pin].text() for pin in pins} for row in rows}
    assert cells["[Perf] A"] == {
        "9.9.0": "needed", "9.9.1": "applies", "9.9.2": "obsolete (from 9.9.2)",
    }  # fmt: skip
    assert cells["[Perf] B"] == {
        "9.9.0": "needed", "9.9.1": "upstream (merged-in 9.9.1)", "9.9.2": "merged-in 9.9.1",
    }  # fmt: skip
    assert cells["[Perf] C"]["9.9.0"] == "needed"
    assert cells["[Perf] C"]["9.9.1"] == "applies"
    assert cells["[Perf] C"]["9.9.2"].startswith("conflicts vllm/sampler.py:")

    # status never moves a build tree's HEAD
    assert base.git("log", "-1", "--format=%s") == "[Perf] C"

    table = status.render(rows, pins)
    assert "obsolete (from 9.9.2)" in table and "conflicts vllm/sampler.py" in table
    out = workspace / "status.json"
    status.write_json(rows, out)
    data = json.loads(out.read_text())
    assert data["pins"] == list(pins)
    assert data["rows"][1]["cells"]["9.9.1"]["state"] == "upstream"


def test_series_that_breaks_on_its_own_pin_is_reported(make_tree, workspace):
    base = make_tree("9.9.0")
    base.apply()
    commit_change(base, "vllm/pooling.py", "True", "False", "[Perf] B")
    base.export()
    # Same version name, different pristine content: the pin's own series conflicts.
    other_root = workspace / "other"
    (other_root / "sdists").mkdir(parents=True)
    from tests.conftest import make_sdist

    make_sdist(other_root / "sdists", "9.9.0", {"vllm/pooling.py": "X = 1\n"})
    from verify.buildtree import BuildTree

    tree = BuildTree("9.9.0", other_root / "build", workspace / "patches",
                     fetch_sdist=lambda v: other_root / "sdists" / f"vllm-{v}.tar.gz")  # fmt: skip
    tree.ensure_baseline()
    rows = status.compute(("9.9.0",), other_root / "build", workspace / "patches")
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
    rows = status.compute(("9.9.0", "9.9.1"), workspace / "build", workspace / "patches")
    cells = {(r.origin, pin): r.cells[pin].text() for r in rows for pin in ("9.9.0", "9.9.1")}
    assert cells[("9.9.0", "9.9.1")] == "ported as 9.9.1/0001"
    assert cells[("9.9.1", "9.9.0")] == "ported as 9.9.0/0001"
    assert cells[("9.9.0", "9.9.0")] == cells[("9.9.1", "9.9.1")] == "needed"
