"""The command line reports errors as one clear line and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

from verify.cli import main
from verify.versions import PINNED


def test_unpinned_version_is_refused(capsys):
    assert main(["apply", "0.0.1"]) == 2
    err = capsys.readouterr().err
    assert "vLLM 0.0.1 is not a pinned version" in err and PINNED[0] in err


def test_not_a_version(capsys):
    assert main(["status", "latest"]) == 2
    assert "not a pinned version" in capsys.readouterr().err


def test_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "verify", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("apply", "check", "export", "status"):
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
