"""The pinned vLLM releases: the single list every tool and nox session reads."""

from __future__ import annotations

from verify.errors import PatchbenchError

#: Pinned releases, oldest first. Add a version here (and a `patches/<version>/series`) to pin it.
PINNED: tuple[str, ...] = ("0.16.0", "0.18.1", "0.22.0", "0.33.0")

#: The seed series' main pin.
MAIN: str = "0.22.0"

#: Pins whose GPU steps cannot run on the GPU machine the tier uses, and why: the `not run` reason a
#: report gives for a GPU step without a record on that pin.
GPU_NOT_RUNNABLE: dict[str, str] = {
    "0.33.0": (
        "vLLM 0.33.0 requires torch==2.14.0; the lent GPU machine has torch 2.11.0 and a run takes "
        "at most 64 MiB along (`make-bundle.py 0.33.0` packs 175.8 MiB without torch); a kernel "
        "bench that loads only the patch's file needs no vLLM and could run, none has"
    ),
}


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key for a plain `X.Y.Z` release string."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError as exc:
        raise PatchbenchError(f"not a release version: {version!r} (expected X.Y.Z)") from exc


def require_pinned(version: str) -> str:
    """Return `version` if it is pinned, else raise an error listing the pins."""
    if version not in PINNED:
        raise PatchbenchError(
            f"vLLM {version} is not a pinned version; pinned: {', '.join(PINNED)} "
            "(add it to verify/versions.py:PINNED to pin it)"
        )
    return version
