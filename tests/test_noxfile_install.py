"""The nox install helper tries pip again after a failed download, and gives up in the end."""

from __future__ import annotations

import nox
import pytest

from verify import runtime


class FlakySession:
    """A session whose pip install fails `failures` times, then succeeds."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[tuple[tuple[str, ...], dict]] = []
        self.warnings: list[str] = []

    def install(self, *args: str, **kwargs) -> None:
        self.calls.append((args, kwargs))
        if len(self.calls) <= self.failures:
            raise nox.command.CommandFailed("Returned code 1")

    def warn(self, message: str) -> None:
        self.warnings.append(message)


@pytest.fixture
def noxfile(loaded_noxfile, monkeypatch):
    monkeypatch.setattr(runtime.time, "sleep", lambda seconds: None)
    return loaded_noxfile


def test_install_tries_again_after_a_broken_download(noxfile):
    session = FlakySession(failures=runtime.PIP_ATTEMPTS - 1)
    noxfile._install(session, "triton")
    assert len(session.calls) == runtime.PIP_ATTEMPTS
    assert all(args == ("triton",) for args, _ in session.calls)
    assert session.calls[0][1]["env"]["PIP_RESUME_RETRIES"] == noxfile.PIP_RESUME_RETRIES
    assert len(session.warnings) == runtime.PIP_ATTEMPTS - 1


def test_install_fails_when_every_attempt_fails(noxfile):
    session = FlakySession(failures=runtime.PIP_ATTEMPTS)
    with pytest.raises(nox.command.CommandFailed):
        noxfile._install(session, "triton")
    assert len(session.calls) == runtime.PIP_ATTEMPTS


def test_install_runs_pip_once_when_it_succeeds(noxfile):
    session = FlakySession(failures=0)
    noxfile._install(session, "triton")
    assert len(session.calls) == 1 and not session.warnings
