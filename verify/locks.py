"""File locks shared by the CPU tier and the GPU machine (standard library only: the GPU
machine's helpers import it before vLLM or anything else is installed).

`pin_lock(version)` is the lock every command that changes a pin's build tree, patches or
records holds (`<build root>/.locks/<version>.lock`); `build_once` makes a folder once."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from verify.errors import ConfigError, LockTimeout


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created, with its folder) for the block: processes
    that ask for the same path wait their turn."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_once(path: Path, done: Callable[[Path], bool], write: Callable[[Path], None]) -> Path:
    """`path` as `write` makes it, made at most once however many processes ask at a time:
    under a lock beside it, `write` fills a fresh folder that is renamed to `path` when it
    returns, so nothing ever sees a half-written `path`; `done(path)` says whether it is
    already there (then `write` is not called). A folder left by an interrupted `write` is
    removed before the next one."""
    if done(path):
        return path
    with exclusive(path.parent / f".{path.name}.lock"):
        if done(path):
            return path
        scratch = path.parent / f".{path.name}.tmp"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        write(scratch)
        if path.exists():
            shutil.rmtree(path)
        os.rename(scratch, path)
    return path


LOCK_TIMEOUT_ENV = "PATCHBENCH_LOCK_TIMEOUT"
_POLL_S = 0.05
_held: dict[Path, int] = {}  # lock file -> how many nested `pin_lock` blocks hold it here


def lock_path(version: str, build_root: Path | None = None) -> Path:
    """The lock file of pin `version`: `<build root>/.locks/<version>.lock`."""
    from verify import paths

    return (build_root or paths.build_root()) / ".locks" / f"{version}.lock"


def this_command() -> str:
    """How this process was started, as typed (`python -m verify apply 0.22.0`)."""
    first = Path(sys.argv[0] if sys.argv and sys.argv[0] else "python")
    if first.name == "__main__.py":
        parts = [first.parent.name]
        if first.parent.parent.name == "verify":
            parts.insert(0, "verify")
        return " ".join([f"python -m {'.'.join(parts)}", *sys.argv[1:]])
    return " ".join([first.name, *sys.argv[1:]])


def lock_timeout() -> float | None:
    """Seconds to wait for a pin's lock (PATCHBENCH_LOCK_TIMEOUT); None: wait as long as it
    takes."""
    value = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(
            f"{LOCK_TIMEOUT_ENV}={value!r} is not a number of seconds (0 or more); nothing was "
            "changed. Set it to e.g. 60, or unset it to wait as long as the lock is held"
        )
    return seconds


@contextlib.contextmanager
def pin_lock(
    version: str, build_root: Path | None = None, timeout: float | None = None
) -> Iterator[None]:
    """Hold pin `version`'s lock for the block: a second process asking for it says who holds
    it (pid and command) and waits, or after `timeout` seconds (default: `lock_timeout()`)
    raises LockTimeout. Re-entrant within a process (check's apply, wheel's apply)."""
    path = lock_path(version, build_root).resolve()
    if _held.get(path):
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    fd = _open_lock_file(path)
    try:
        _acquire(fd, version, lock_timeout() if timeout is None else timeout)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {this_command()}\n".encode(), 0)
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing releases the flock


def _open_lock_file(path: Path) -> int:
    """Open (make) the lock file; a build folder that cannot be written is a named error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        from verify import paths

        paths.require_writable(path.parent.parent, "PATCHBENCH_BUILD_DIR")
        raise


def _acquire(fd: int, version: str, timeout: float | None) -> None:
    """flock `fd`, saying once who holds it while waiting; LockTimeout after `timeout`."""
    from verify.progress import say

    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        holder = _holder(fd)
        if deadline is not None and time.monotonic() >= deadline:
            raise LockTimeout(
                f"vLLM {version} is locked by {holder}, which is changing its build tree, "
                f"patches or records; gave up after {timeout:g}s ({LOCK_TIMEOUT_ENV}) and "
                "changed nothing. Run again when it has finished, or unset "
                f"{LOCK_TIMEOUT_ENV} to wait for it"
            )
        # the holder writes its name just after it takes the lock: give it a moment to
        if not said and (holder != UNKNOWN_HOLDER or time.monotonic() - started >= _NAME_GRACE_S):
            wait = "as long as it takes" if deadline is None else f"up to {timeout:g}s"
            say(f"waiting for the lock of vLLM {version}: held by {holder} (waiting {wait})")
            said = True
        time.sleep(_POLL_S)


UNKNOWN_HOLDER = "another process"
#: How long a waiter waits for the holder's name before it says "another process".
_NAME_GRACE_S = 1.0


def _holder(fd: int) -> str:
    """'pid N (command)' of the lock's holder, from the lock file."""
    text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    pid, _, command = text.partition(" ")
    return f"pid {pid} ({command})" if pid.isdigit() else UNKNOWN_HOLDER
