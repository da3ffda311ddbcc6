"""Where a run of the main job (or a CPU-tier, equivalence or report session) writes, and when
its records replace the committed evidence.

By default a run writes into its own folder, ``build/runs/<v>-<time>/{results,reports}``
(`run_folders`), set as PATCHBENCH_RESULTS_DIR / PATCHBENCH_REPORTS_DIR while it runs; its
results folder starts as a copy of the committed records of the pin, so its reports see all
the evidence. A folder the caller already named through those variables (CI) is used as it is.
`-- --record` then copies the run's new records into the checkout's ``results/`` (`promote`),
each only where it is at least as strong as the committed one (`weaker`), or with `--force`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verify import paths, results
from verify.errors import RecordError
from verify.series import series_hash

RESULTS_VAR, REPORTS_VAR = "PATCHBENCH_RESULTS_DIR", "PATCHBENCH_REPORTS_DIR"

#: The amount of evidence a record holds: the first of these counts in its ``numbers``.
SIZES = (
    ("repeats", "rounds"),
    ("tokens_per_root", "tokens per root"),
    ("n_samples", "gsm8k samples"),
    ("vectors", "vectors"),
)


def size(record: dict[str, Any]) -> tuple[str, int] | None:
    """(what, how many) of the evidence in `record`: rounds, tokens, samples, vectors, or
    tests (passed + failed + skipped); None for a record that counts none of them."""
    numbers = record.get("numbers") or {}
    for key, label in SIZES:
        if isinstance(numbers.get(key), int):
            return label, numbers[key]
    counts = [numbers.get(k) for k in ("passed", "failed", "skipped")]
    if all(isinstance(c, int) for c in counts):
        return "tests", sum(counts)
    return None


def is_current(record: dict[str, Any], current: str) -> bool:
    """Whether `record` was made from the series `current` (and its tree held it)."""
    stamped = record.get("stamped_series", current)
    return record.get("series_hash") == current and stamped == current


def weaker(new: dict[str, Any], old: dict[str, Any], current: str) -> str:
    """Why record `new` is weaker evidence than the committed `old`, or "" when it is at least
    as strong: of the current series `current` if `old` is, and counting at least as much
    (same kind of count: rounds, tokens, samples, vectors or tests)."""
    if is_current(old, current) and not is_current(new, current):
        return f"series {new.get('series_hash')} is not the current {current} (the kept one's is)"
    have, had = size(new), size(old)
    if have and had and have[0] == had[0] and have[1] < had[1]:
        return f"{have[1]} {have[0]} < {had[1]}"
    return ""


@dataclass
class Decision:
    """What `promote` did with one record of the run."""

    name: str  # <tier>/<version>/<step>.json
    replaced: bool
    why: str

    def line(self) -> str:
        return f"{'replaced' if self.replaced else 'kept    '} {self.name}: {self.why}"


def _read(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The record in `path` (None if missing or unreadable) and what was wrong with it."""
    if not path.exists():
        return None, "no committed record"
    try:
        return results.read_record(path), ""
    except RecordError as exc:
        return None, f"the committed file is not a record ({exc})"


def decide(path: Path, target: Path, force: bool, current: str) -> Decision | None:
    """Whether the run's record `path` replaces `target`; None for a file that is no record,
    or the same bytes as the committed one."""
    new = results.read_record(path)
    if new is None or (target.exists() and target.read_bytes() == path.read_bytes()):
        return None
    old, missing = _read(target)
    why = weaker(new, old, current) if old is not None else ""
    if not why:
        return Decision(target.name, True, missing or "at least as strong")
    return Decision(target.name, force, f"--force, though {why}" if force else f"new is {why}")


def promote(version: str, run: Path, force: bool, tracked: Path | None = None) -> list[Decision]:
    """Copy the records of `version` that the run wrote under `run` into `tracked` (default:
    the checkout's results/) where `decide` says so; what was done with each."""
    tracked = tracked or paths.repo_root() / "results"
    current, done = series_hash(version), []
    for path in sorted(run.glob(f"*/{version}/*.json")):
        relative = path.relative_to(run)
        decision = decide(path, tracked / relative, force, current)
        if decision is None:
            continue
        decision.name = str(relative)
        if decision.replaced:
            target = tracked / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target.with_suffix(".json.tmp"))
            os.replace(target.with_suffix(".json.tmp"), target)
        done.append(decision)
    return done


@dataclass
class RunFolders:
    """The results and reports folders of one run; `own`: made for it (not the caller's)."""

    results: Path
    reports: Path
    own: bool


def _new_run(version: str, stamp: str | None, seed: bool) -> Path:
    stamp = stamp or dt.datetime.now(dt.UTC).strftime(f"%Y%m%dT%H%M%S-{os.getpid()}")
    root = paths.build_root() / "runs" / f"{version}-{stamp}"
    for tier in sorted((paths.repo_root() / "results").glob(f"*/{version}")) if seed else ():
        shutil.copytree(tier, root / "results" / tier.parent.name / version)
    (root / "results").mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def run_folders(version: str, stamp: str | None = None) -> Iterator[RunFolders]:
    """Point PATCHBENCH_RESULTS_DIR / PATCHBENCH_REPORTS_DIR at this run's folders for the
    block: the caller's where set, else a new ``build/runs/<version>-<stamp>/`` whose results
    start as a copy of the committed records of `version`. Restores both afterwards."""
    given = {name: os.environ.get(name) for name in (RESULTS_VAR, REPORTS_VAR)}
    root = None if all(given.values()) else _new_run(version, stamp, not given[RESULTS_VAR])
    folders = RunFolders(
        Path(given[RESULTS_VAR] or root / "results"),
        Path(given[REPORTS_VAR] or root / "reports"),
        own=root is not None,
    )
    os.environ[RESULTS_VAR], os.environ[REPORTS_VAR] = str(folders.results), str(folders.reports)
    try:
        yield folders
    finally:
        for name, value in given.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
