"""The command line reports errors as one clear line and a non-zero exit."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from verify.cli import main
from verify.progress import Steps
from verify.versions import PINNED


def test_unpinned_version_is_refused(capsys, bad_input):
    assert main(["apply", "0.0.1"]) == 2
    err = capsys.readouterr().err
    assert "vLLM 0.0.1 is not a pinned version" in err and PINNED[0] in err
    bad_input("`apply 0.0.1` (a version that is not pinned)", err.strip())


def test_not_a_version(capsys, bad_input):
    assert main(["status", "latest"]) == 2
    err = capsys.readouterr().err
    assert "not a pinned version" in err
    bad_input("`status latest` (not a version)", err.strip())


def test_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "verify", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("apply", "check", "export", "status", "ci-config", "bad-input-docs"):
        assert command in out


def test_nox_lists_every_session_per_pin():
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-l"], capture_output=True, text=True, check=True
    ).stdout
    for pin in PINNED:
        for name in ("apply", "check", "export", "equivalence"):
            assert f"{name}-{pin}" in out
    for name in ("status", "tests", "lint"):
        assert f"{name} " in out


def _nox_sessions() -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "nox", "--json", "-l", "-t", "fast", "heavy"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out)


def test_every_nox_session_is_tagged_fast_or_heavy_with_a_rough_time():
    sessions = _nox_sessions()
    names = {s["name"] for s in sessions}
    for pin in PINNED:
        assert f"verify-{pin}" in names
    for session in sessions:
        speed = {"fast", "heavy"} & set(session["tags"])
        assert len(speed) == 1, session
        assert re.search(r"seconds|~?\d+(-\d+)? (min|h)\b", session["description"]), session
    tagged = {tag: {s["name"] for s in sessions if tag in s["tags"]} for tag in ("gpu", "cpu-tier")}
    assert tagged["gpu"] and all(name.startswith("gpu-") for name in tagged["gpu"])
    assert {"e2e-0.22.0", "serve-bench-0.22.0", "gsm8k-0.22.0"} <= tagged["cpu-tier"]


def test_steps_summary_names_each_outcome_and_blocks_dependents(capsys):
    steps = Steps("verify-9.9.0", ["apply", "check", "equivalence", "cpu", "report"])
    steps.run("apply", lambda: None)

    def broken():
        raise RuntimeError("Command python -m verify check failed with exit code 1")

    assert not steps.run("check", broken, needs=("apply",))
    assert not steps.run("equivalence", lambda: None, needs=("check",))
    steps.not_applicable("cpu", "no CPU runtime recipe")
    steps.run("report", lambda: None, needs=("apply",))
    table = steps.table()
    assert re.search(r"^check\s+fail\s+\d+s\s+Command python -m verify check failed", table, re.M)
    assert re.search(r"^equivalence\s+not run\s+-\s+check: fail", table, re.M)
    assert re.search(r"^cpu\s+not applicable\s+-\s+no CPU runtime recipe", table, re.M)
    assert re.search(r"^total\s+fail\s+\d+s", table, re.M)
    assert steps.failed == ["check", "equivalence"]
    assert "[2/5] verify-9.9.0: check: fail" in capsys.readouterr().err
