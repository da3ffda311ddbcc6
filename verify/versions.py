"""The pinned vLLM releases: the single list every tool and nox session reads."""

from __future__ import annotations

from verify import pins
from verify.errors import PatchbenchError

try:
    #: Pinned releases, oldest first: the [pins] tables of patches/pins.toml (`verify.pins`).
    PINNED: tuple[str, ...] = pins.pinned()
    #: The seed series' main pin (pins.toml's `main`).
    MAIN: str = pins.main_pin()
    #: Pins whose GPU steps cannot run on the GPU tier's machine, and why: the `not run` reason a
    #: report gives for a GPU step without a record on that pin (pins.toml's `gpu_not_runnable`).
    GPU_NOT_RUNNABLE: dict[str, str] = pins.with_key("gpu_not_runnable")
    _UNREADABLE: PatchbenchError | None = None
except PatchbenchError as exc:  # no checkout, or bad pin data: every command that needs it says
    PINNED, MAIN, GPU_NOT_RUNNABLE, _UNREADABLE = (), "", {}, exc


def require_pin_data() -> None:
    """The error that kept the pin data from being read, if any (raised before any command)."""
    if _UNREADABLE is not None:
        raise _UNREADABLE


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key for a plain `X.Y.Z` release string."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError as exc:
        raise PatchbenchError(f"not a release version: {version!r} (expected X.Y.Z)") from exc


def require_pinned(version: str) -> str:
    """Return `version` if it is pinned, else raise an error listing the pins."""
    require_pin_data()
    if version not in PINNED:
        raise PatchbenchError(
            f"vLLM {version} is not a pinned version; pinned: {', '.join(PINNED)} "
            f'(add a [pins."{version}"] table to {pins.pins_file()} to pin it)'
        )
    return version
