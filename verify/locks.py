"""File locks shared by the CPU tier and the GPU machine (standard library only: the GPU
machine's helpers import it before vLLM or anything else is installed)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


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
