"""Server lifecycle of the A/B core: one `vllm serve` (or any HTTP server) per variant in its own
process group, a `/health` wait that names the log on failure, and a stop that leaves no child
behind. Standard library only: the GPU machine runs it with nothing but the vLLM bundle."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from verify.errors import PatchbenchError


def say(message: str) -> None:
    print(f"[ab {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def start_group(cmd: list[str], env: dict, log: Path, **popen) -> tuple[subprocess.Popen, IO]:
    """Start `cmd` as the leader of a process group of its own (so `stop_group` leaves no
    child), stdout and stderr into `log`; returns the process and the open log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "w")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, **popen
    )
    return proc, fh


def stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL it after `grace` s, and make sure no
    member of the group is left once the leader is gone."""
    pid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        break


class ServerError(PatchbenchError):
    """The server could not be started or never became healthy."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_port_free(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ServerError(
                f"port {port} on {host} is already in use ({exc.strerror}); pick another port or "
                "leave --port out to use a free one"
            ) from None


class Server:
    """One server process (its own process group, so stopping it leaves no child behind)."""

    def __init__(
        self,
        cmd: list[str],
        env: dict,
        port: int,
        log: Path,
        label: str = "server",
        health_timeout: float = 600,
        host: str = "127.0.0.1",
    ):
        self.cmd, self.env, self.port, self.log = cmd, env, port, Path(log)
        self.label, self.health_timeout, self.host = label, health_timeout, host
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self.started_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Server:
        require_port_free(self.port, self.host)
        self.started_at = time.monotonic()
        self.proc, self._fh = start_group(self.cmd, self.env, self.log)
        say(f"{self.label}: started pid {self.proc.pid} on {self.url} (log {self.log})")
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_healthy(self) -> float:
        started = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                tail = log_tail(self.log)
                self.stop()
                raise ServerError(
                    f"{self.label} exited with code {code} before it was "
                    f"healthy; log tail ({self.log}):\n{tail}"
                )
            if self.healthy():
                self.startup_s = time.monotonic() - (self.started_at or started)
                say(f"{self.label}: healthy after {self.startup_s:.0f}s")
                return self.startup_s
            if time.monotonic() - started > self.health_timeout:
                pid = self.proc.pid
                self.stop()
                raise ServerError(
                    f"{self.label} (pid {pid}) was not healthy at {self.url}/health "
                    f"within {self.health_timeout:.0f}s; it was killed. Log tail ({self.log}):\n"
                    f"{log_tail(self.log)}"
                )
            time.sleep(1.0)

    def stop(self, grace: float = 20) -> None:
        if self.proc is None:
            return
        stop_group(self.proc, grace)
        with contextlib.suppress(Exception):
            self._fh.close()
        self.proc = None

    def __enter__(self) -> Server:
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
