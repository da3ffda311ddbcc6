"""Pin data: `patches/pins.toml` (or the file PATCHBENCH_PINS names), every per-pin fact the
tools read: the pins and the main one, runtime recipes, relaxed floors, GPU facts, CI choices,
the pin a series was ported from. Its keys are described in the
file itself. Standard library only (the GPU machine's helpers import `verify.versions`)."""

from __future__ import annotations

import functools
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from verify.errors import ConfigError

PINS_ENV = "PATCHBENCH_PINS"
KEYS = {
    "ported_from": str,
    "cpu_runtime": dict,
    "cuda_runtime": dict,
    "gpu_tier": bool,
    "gpu_steps": list,
    "gpu_not_runnable": str,
    "relaxed": dict,
    "ci_equivalence": bool,
    "ci_equivalence_why": str,
}
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def pins_file() -> Path:
    """PATCHBENCH_PINS, else the checkout's patches/pins.toml (beside the package when it is
    installed editable, else the checkout `verify.paths` finds; its error names the way out)."""
    value = os.environ.get(PINS_ENV, "").strip()
    if value:
        return Path(value)
    beside = Path(__file__).resolve().parent.parent / "patches" / "pins.toml"
    if beside.exists():
        return beside
    from verify import paths

    return paths.repo_root() / "patches" / "pins.toml"


def _toml(path: Path) -> dict[str, Any]:
    """`path` parsed; invalid TOML is a ConfigError naming the file and the place."""
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({' '.join(str(exc).split())})") from exc


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    try:
        data = _toml(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"no pin data at {path} ({PINS_ENV} or patches/pins.toml)") from exc
    pins = data.get("pins")
    if not isinstance(pins, dict) or not pins:
        raise ConfigError(f'{path}: no [pins."X.Y.Z"] table')
    for version, entry in pins.items():
        if not _VERSION.match(version):
            raise ConfigError(f"{path}: pin {version!r} is not an X.Y.Z release")
        for key, value in entry.items():
            if key not in KEYS:
                raise ConfigError(f"{path}: pin {version}: unknown key {key!r} "
                                  f"(known: {', '.join(KEYS)})")  # fmt: skip
            if not isinstance(value, KEYS[key]):
                raise ConfigError(f"{path}: pin {version}: {key} must be a {KEYS[key].__name__}")
    unknown = sorted(set(data) - {"main", "pins"})
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}")
    if data.get("main") not in pins:
        raise ConfigError(f"{path}: main = {data.get('main')!r} is not one of its pins")
    return data


def data() -> dict[str, Any]:
    """The parsed pin data (cached per file)."""
    return _load(pins_file().resolve())


def pinned() -> tuple[str, ...]:
    """The pins, oldest first."""
    return tuple(sorted(data()["pins"], key=lambda v: tuple(int(x) for x in v.split("."))))


def main_pin() -> str:
    return data()["main"]


def entry(version: str) -> dict[str, Any]:
    """The pin's table ({} for a version that is not pinned)."""
    return data()["pins"].get(version, {})


def with_key(key: str) -> dict[str, Any]:
    """{pin: its `key`} of the pins that set `key`, oldest first."""
    return {v: entry(v)[key] for v in pinned() if key in entry(v)}


def ci_equivalence_pins() -> list[str]:
    """The pins whose equivalence .ci/run loops over: every pin but the main one (its main job
    runs it) and those whose table says `ci_equivalence = false`."""
    return [v for v in pinned() if v != main_pin() and entry(v).get("ci_equivalence", True)]


if __name__ == "__main__":  # `python -m verify.pins [ci-equivalence | newest]`: space separated
    import sys

    ask = sys.argv[1:]
    chosen = ci_equivalence_pins() if ask == ["ci-equivalence"] else list(pinned())
    chosen = chosen[-1:] if ask == ["newest"] else chosen
    print(" ".join(chosen))


#: patches/upstream-tests.toml (beside the pin data): per kind, the keys each entry needs.
UPSTREAM_TEST_KEYS = {
    "explained": {"pins", "test", "patch", "why"},
    "not_run": {"pins", "test", "why"},
    "forward": {"pins", "seed", "subject", "release", "test_file", "select", "adapter",
                "adapter_why"},
}  # fmt: skip


@functools.cache
def _upstream_tests(path: Path) -> dict[str, list[dict]]:
    data = _toml(path) if path.exists() else {}
    unknown = sorted(set(data) - set(UPSTREAM_TEST_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}")
    for kind, entries in data.items():
        for i, entry in enumerate(entries):
            missing = sorted(UPSTREAM_TEST_KEYS[kind] - set(entry))
            if missing:
                raise ConfigError(f"{path}: [[{kind}]] #{i + 1} lacks {', '.join(missing)}")
    return data


def upstream_tests(kind: str, version: str) -> list[dict]:
    """The `kind` entries (explained, not_run, forward) of patches/upstream-tests.toml that
    name `version` among their pins."""
    entries = _upstream_tests(pins_file().resolve().with_name("upstream-tests.toml"))
    return [e for e in entries.get(kind, []) if version in e["pins"]]
