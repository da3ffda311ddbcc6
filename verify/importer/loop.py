"""The registry-driven importer loop: a registry step that names a `reader` and a `source` (a
glob of raw runs in results/<tier>/<pin>/, tier gpu for cuda steps, else cpu) is judged by that
reader into the step's one record. The record's name, the patches it covers and its threshold
come from the registry; a reader holds only how to read and judge its runs.

A reader is `read(version, step, entry, runs) -> record | None`, `runs` the matching files,
oldest name first. Adding a kind of run = one reader here and registry steps naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from verify import paths, registry, results
from verify.errors import PatchbenchError
from verify.importer import (
    gpu,
    gpu_engine_patch,
    gpu_mrv2_penalties,
    gpu_penalty_check,
    gpu_serve_ab,
    gpu_state_length,
    penalty_memory,
)

Reader = Callable[[str, registry.Step, registry.Entry, list[Path]], dict | None]

READERS: dict[str, Reader] = {
    "penalty-state-check": gpu_penalty_check.read,
    "penalty-state-length": gpu_state_length.read,
    "penalty-state-micro": gpu_state_length.read_state_micro,
    "serve-ab": gpu_serve_ab.read,
    "penalty-state-memory": penalty_memory.read,
    "mrv2-penalties": gpu_mrv2_penalties.read,
    "engine-patch-ab": gpu_engine_patch.read,
}


class UnknownReader(PatchbenchError):
    """A registry step names a reader the loop does not have."""


def _steps(version: str) -> list[tuple[registry.Entry, registry.Step]]:
    """(entry, step) of every registry step on `version`."""
    entries = [e for e in registry.load().values() if version in e.pins]
    return [(entry, step) for entry in entries for step in entry.steps_on(version)]


def _tier(step: registry.Step) -> tuple[str, Path]:
    """(tier, results folder of the tier) where a step's runs and records live: gpu for cuda
    steps, else cpu."""
    if step.device == "cuda":
        return "gpu", gpu.gpu_root()
    return "cpu", paths.results_root() / "cpu"


def planned(version: str) -> list[tuple[registry.Entry, registry.Step]]:
    """(entry, step) of every registry step on `version` that a reader imports."""
    found = [(entry, step) for entry, step in _steps(version) if step.reader]
    for entry, step in found:
        if step.reader not in READERS:
            raise UnknownReader(
                f"registry {entry.slug}: step {step.title!r} names reader "
                f"{step.reader!r}; known: {', '.join(sorted(READERS))}"
            )
    return found


def tiered(version: str) -> list[tuple[str, dict]]:
    """(tier, record) of every record the readers make for `version` from the runs their
    steps name; the tier (gpu for cuda steps, else cpu) is where its runs and record live."""
    made = []
    for entry, step in planned(version):
        tier, root = _tier(step)
        runs = sorted((root / version).glob(step.source))
        record = READERS[step.reader](version, step, entry, runs) if runs else None
        if record is not None:
            made.append((tier, record))
    return made


def frozen(version: str) -> list[tuple[str, dict]]:
    """(tier, record) of every committed record that a frozen registry step on `version` names,
    marked `legacy` with the step's text (kept as it is otherwise: never re-read from runs)."""
    made: dict[str, tuple[str, dict]] = {}
    for step in [step for _, step in _steps(version) if step.frozen]:
        tier, root = _tier(step)
        for name in step.records:
            path = root / version / f"{name}.json"
            if name not in made and path.exists():
                made[name] = (tier, {**results.read_json(path), "legacy": step.frozen})
    return list(made.values())


def records(version: str) -> list[dict]:
    """The records the readers make for `version`."""
    return [record for _, record in tiered(version)]
