"""A results file that cannot be read is a named error in every reader: `report`, the importer
and `results.load_all` name the file and what is wrong; no verdict becomes "not run"."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from verify import importer, report, results
from verify.cli import main
from verify.errors import RecordError

COMMITTED = Path(__file__).resolve().parent.parent / "results"
VERSION = "0.22.0"
RECORD = f"cpu/{VERSION}/equivalence-pooling-prompt-ids.json"
SLUG = "pooling-prompt-ids-no-device-copy"  # 0003 on 0.22.0: the record is its evidence

#: how the record is broken -> (what the user did, the bytes written, what the tool says)
BAD: dict[str, tuple[str, Callable[[bytes], bytes], str]] = {
    "truncated": (
        "truncated (`head -c 300`)",
        lambda data: data[:300],
        "not JSON: truncated at byte 300",
    ),
    "empty": ("emptied", lambda data: b"", "empty (0 bytes)"),
    "{}": (
        "replaced by `{}`",
        lambda data: b"{}\n",
        "an empty JSON object: missing required keys schema, step, seed, vllm_version",
    ),
}


@pytest.fixture
def committed_copy(tmp_path: Path, monkeypatch) -> Path:
    """The results root of a copy of the checkout's CPU records of 0.22.0 (raw files too)."""
    root = tmp_path / "results"
    shutil.copytree(COMMITTED / "cpu" / VERSION, root / "cpu" / VERSION)
    monkeypatch.setenv("PATCHBENCH_RESULTS_DIR", str(root))
    monkeypatch.setenv("PATCHBENCH_REPORTS_DIR", str(tmp_path / "reports"))
    return root


def _break(root: Path, how: str) -> Path:
    path = root / RECORD
    path.write_bytes(BAD[how][1](path.read_bytes()))
    return path


def test_the_intact_copy_proves_the_patch() -> None:
    """The record the bad inputs break is what makes 0003's equivalence pass."""
    found = results.load_all(VERSION, COMMITTED)
    evidence = {e.entry.slug: e for e in report.evidence_for(VERSION, results_root=COMMITTED)}
    assert any(r["_path"].endswith(RECORD) for r in found)
    assert evidence[SLUG].by_kind("equivalence") == "pass"


@pytest.mark.parametrize("how", BAD)
def test_report_names_a_bad_record(committed_copy, tmp_path, capsys, bad_input, how) -> None:
    path = _break(committed_copy, how)
    assert main(["report", VERSION]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err]
    assert err.startswith(f"error: {path}: {BAD[how][2]}")
    assert not (tmp_path / "reports").exists()  # nothing written, no verdict turned "not run"
    bad_input(f"`report {VERSION}` with a record {BAD[how][0]}", err)


@pytest.mark.parametrize("how", BAD)
def test_load_all_names_a_bad_record(committed_copy, how) -> None:
    path = _break(committed_copy, how)
    with pytest.raises(RecordError) as error:
        results.load_all(VERSION)
    assert error.value.path == str(path)
    assert error.value.problem.startswith(BAD[how][2])


@pytest.mark.parametrize("how", BAD)
def test_importer_names_a_bad_record(committed_copy, capsys, bad_input, how) -> None:
    path = _break(committed_copy, how)
    assert importer.main(["--version", VERSION]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith(f"error: {path}: {BAD[how][2]}")
    bad_input(f"`python -m verify.importer` with a record {BAD[how][0]}", err)


def test_a_record_missing_a_key_names_it(committed_copy) -> None:
    path = committed_copy / RECORD
    path.write_text(path.read_text().replace('"outcome"', '"verdict"'))
    with pytest.raises(RecordError, match="missing required keys outcome;"):
        results.read_record(path)


def test_raw_measurement_files_beside_records_are_not_records(committed_copy) -> None:
    raw = committed_copy / "cpu" / VERSION / "bench_003.json"
    assert results.read_record(raw) is None
    names = {Path(r["_path"]).name for r in results.load_all(VERSION)}
    assert RECORD.rsplit("/", 1)[1] in names and raw.name not in names
