"""Claims are checked where they are made: a `Status: merged-in X` / `Obsolete-in: X` naming a
release the package index lacks fails `check` and `status`; read-only commands change nothing
tracked (`status` keeps an unchanged status.json, `check --no-apply` never applies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TRAILERS, commit_change
from verify import claims, status
from verify.buildtree import BuildTree
from verify.cli import main

RELEASES = ["0.21.0", "0.22.0", "0.23.0"]


def _trailers(**changes: str) -> str:
    lines = dict(line.split(": ", 1) for line in TRAILERS.splitlines())
    lines.update({k.replace("_", "-"): v for k, v in changes.items()})
    return "\n".join(f"{k}: {v}" for k, v in lines.items())


@pytest.fixture
def offline_index(pinned_release, monkeypatch) -> Path:
    """The index unreachable, its release list cached as RELEASES, read afresh per test."""
    monkeypatch.setattr(claims, "_LISTS", {})
    cache = Path(pinned_release["PATCHBENCH_CACHE_DIR"]) / "releases-vllm.json"
    cache.write_text(json.dumps(RELEASES) + "\n")
    return cache


def _series_claiming(**trailers: str) -> BuildTree:
    tree = BuildTree("0.22.0")
    tree.apply()
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] B", _trailers(**trailers))
    tree.export()
    return tree


@pytest.mark.parametrize(
    "trailers, written",
    [
        ({"Status": "merged-in 9.9.9"}, "Status: merged-in 9.9.9"),
        ({"Obsolete_in": "9.9.8"}, "Obsolete-in: 9.9.8"),
    ],
)
def test_check_fails_on_a_release_the_index_lacks(offline_index, capsys, bad_input, trailers,
                                                   written):  # fmt: skip
    tree = _series_claiming(**trailers)
    head = tree.head()
    assert main(["check", "0.22.0"]) == 1
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("check: "))
    name = tree.git("log", "-1", "--format=%f")
    assert line.startswith(f"check: patches/0.22.0/0001-{name}"[:40])
    assert f"'{written}' names vLLM {written.split()[-1]}, which is not a release" in line
    assert "newest there: 0.23.0" in line
    bad_input(f"`check 0.22.0` on a patch with `{written}` (no such release)", line)
    assert tree.head() == head


def test_status_exits_non_zero_on_a_release_the_index_lacks(offline_index, tmp_path, capsys,
                                                            bad_input):  # fmt: skip
    _series_claiming(Status="merged-in 9.9.9")
    assert main(["status", "0.22.0", "--json", str(tmp_path / "status.json")]) == 1
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("status: "))
    assert "'Status: merged-in 9.9.9' names vLLM 9.9.9, which is not a release" in line
    bad_input("`status 0.22.0` on a patch with `Status: merged-in 9.9.9` (no such release)", line)


def test_a_release_on_the_index_passes(offline_index, capsys):
    _series_claiming(Status="merged-in 0.23.0")
    assert main(["check", "0.22.0"]) == 0
    assert "check: " not in capsys.readouterr().err


def test_check_warns_when_the_index_cannot_be_read(offline_index, capsys, bad_input):
    offline_index.unlink()
    _series_claiming(Status="merged-in 9.9.9")
    assert main(["check", "0.22.0"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "warning: cannot read vLLM's releases" in x)
    assert "trailers were not checked" in line
    bad_input("`check 0.22.0` with the package index unreachable and no cached release list",
              line.removeprefix("[patchbench] "))  # fmt: skip


class _Row:
    def __init__(self, status: str, claim: dict) -> None:
        self.status, self.claim, self.ident = status, claim, "0.22.0/0003"


def _claim(claimed: str, first: str | None, last: str = "0.33.0") -> dict:
    agrees = claimed == first
    return {"claimed": claimed, "first_containing": first, "searched_up_to": last, "agrees": agrees}


def test_status_findings_name_code_that_contradicts_the_trailer():
    rows = [
        _Row("merged-in 0.29.0", _claim("0.29.0", "0.29.0")),
        _Row("merged-in 0.28.0", _claim("0.28.0", "0.29.0")),
        _Row("proposed", _claim("0.30.0", None)),
        _Row("merged-in 0.40.0", _claim("0.40.0", None)),  # after the newest pin: cannot tell
    ]
    assert claims.status_findings(rows) == [
        "0.22.0/0003: 'Status: merged-in 0.28.0', but the first release whose code contains "
        "the change is 0.29.0",
        "0.22.0/0003: 'Obsolete-in 0.30.0', but no release up to 0.33.0 contains the change "
        "in its code",
    ]


def test_status_json_is_kept_when_only_the_timestamp_would_change(make_tree, workspace):
    make_tree("9.9.0").apply()
    rows = status.compute(("9.9.0",), workspace / "build", workspace / "patches",
                          check_code=False)  # fmt: skip
    out = workspace / "status.json"
    assert status.write_json(rows, out)
    data = json.loads(out.read_text())
    out.write_text(json.dumps(dict(data, generated="2000-01-01T00:00:00+00:00"), indent=2) + "\n")
    before = out.read_bytes()
    assert status.write_json(rows, out) is False
    assert out.read_bytes() == before
    rows.hashes["9.9.0"] = "changed"
    assert status.write_json(rows, out)
    assert json.loads(out.read_text())["generated"] != "2000-01-01T00:00:00+00:00"


def test_check_no_apply_never_applies_and_says_so(offline_index, capsys):
    tree = _series_claiming(Status="local")
    patch = next(tree.series_path.glob("*.patch"))
    patch.write_text(patch.read_text().replace("Why: because.", "Why: edited by hand."))
    head = tree.head()
    assert main(["check", "0.22.0", "--no-apply"]) == 1
    err = capsys.readouterr().err
    assert "--no-apply: comparing the build tree" in err and "nothing is applied" in err
    assert tree.head() == head
    assert main(["check", "0.22.0"]) == 0  # without it, check applies the edited file first
    assert tree.head() != head
