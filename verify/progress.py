"""Progress lines on stderr for long steps (download, unpack, git add)."""

from __future__ import annotations

import sys
import time


def say(message: str) -> None:
    print(f"[patchbench] {message}", file=sys.stderr, flush=True)


class Progress:
    """Prints `label: done/total (pct)` at most every `interval` seconds, and once at the end."""

    def __init__(self, label: str, total: int | None, unit: str = "", interval: float = 2.0):
        self.label, self.total, self.unit, self.interval = label, total, unit, interval
        self.done = 0
        self._last = 0.0
        self._start = time.monotonic()

    def _fmt(self, n: int) -> str:
        if self.unit == "B":
            return f"{n / 2**20:.1f} MiB"
        return f"{n}{self.unit}"

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._print()

    def _print(self) -> None:
        if self.total:
            pct = 100.0 * self.done / self.total
            say(f"{self.label}: {self._fmt(self.done)}/{self._fmt(self.total)} ({pct:.0f}%)")
        else:
            say(f"{self.label}: {self._fmt(self.done)}")

    def finish(self) -> None:
        self._print()
        say(f"{self.label}: done in {time.monotonic() - self._start:.1f}s")
