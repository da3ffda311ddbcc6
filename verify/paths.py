"""Where the project reads and writes: one function per location, each overridable by an
environment variable so tests and CI can point every write at a temporary folder.

| function        | variable                 | default                         |
|-----------------|--------------------------|---------------------------------|
| `repo_root`     | `PATCHBENCH_REPO`        | the checkout holding `verify/`  |
| `patches_root`  | `PATCHBENCH_PATCHES_DIR` | `<repo>/patches`                |
| `build_root`    | `PATCHBENCH_BUILD_DIR`   | `<repo>/build`                  |
| `cache_dir`     | `PATCHBENCH_CACHE_DIR`   | `~/.cache/vllm-patchbench`      |
| `results_root`  | `PATCHBENCH_RESULTS_DIR` | `<repo>/results`                |
| `reports_root`  | `PATCHBENCH_REPORTS_DIR` | `<repo>/reports`                |

The repository is the checkout that holds this package (an editable install). A plain
`pip install .` copies `verify/` into site-packages, away from `patches/`: then the checkout is
the current folder (or one of its parents) if it is one, else every command refuses with an
error instead of reading an empty series or writing into site-packages.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from verify.errors import ConfigError, PatchbenchError

PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def is_checkout(folder: Path) -> bool:
    """True if `folder` is a vllm-patchbench checkout (its patches, verify and noxfile)."""
    return all((folder / name).exists() for name in ("patches", "verify", "noxfile.py"))


def _from_env(name: str, default) -> Path:
    """The folder `name` names (ConfigError if it names something else), else `default()`."""
    value = os.environ.get(name)
    if not value:
        return default()
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{name}={value!r} is not a folder (it exists, as a file); nothing was changed. "
            f"Point {name} at a folder, or unset it"
        )
    return path


def _find_repo() -> Path:
    if is_checkout(PACKAGE_PARENT):
        return PACKAGE_PARENT
    for folder in (Path.cwd(), *Path.cwd().parents):
        if is_checkout(folder):
            return folder
    raise PatchbenchError(
        f"verify is installed at {PACKAGE_PARENT / 'verify'}, outside a vllm-patchbench "
        "checkout, and the current folder is not one either; nothing was read or written. "
        "Run the command inside a clone (or set PATCHBENCH_REPO to it); "
        "`pip install -e .` in the clone avoids this"
    )


def repo_root() -> Path:
    return _from_env("PATCHBENCH_REPO", _find_repo)


def patches_root() -> Path:
    return _from_env("PATCHBENCH_PATCHES_DIR", lambda: repo_root() / "patches")


def build_root() -> Path:
    return _from_env("PATCHBENCH_BUILD_DIR", lambda: repo_root() / "build")


def cache_dir() -> Path:
    return _from_env("PATCHBENCH_CACHE_DIR", lambda: Path.home() / ".cache" / "vllm-patchbench")


def results_root() -> Path:
    return _from_env("PATCHBENCH_RESULTS_DIR", lambda: repo_root() / "results")


def reports_root() -> Path:
    return _from_env("PATCHBENCH_REPORTS_DIR", lambda: repo_root() / "reports")


FOLDER_VARIABLES = (
    "PATCHBENCH_REPO", "PATCHBENCH_PATCHES_DIR", "PATCHBENCH_BUILD_DIR", "PATCHBENCH_CACHE_DIR",
    "PATCHBENCH_RESULTS_DIR", "PATCHBENCH_REPORTS_DIR",
)  # fmt: skip


def check_environment() -> None:
    """ConfigError for the first folder variable set to something other than a folder."""
    for name in FOLDER_VARIABLES:
        _from_env(name, lambda: None)


def require_writable(folder: Path, variable: str) -> None:
    """Raise a named error unless files can be created in `folder` (made if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise PatchbenchError(
            f"cannot write to {folder} ({exc.strerror or exc}); nothing was changed. "
            f"Make it writable, or set {variable} to a writable folder"
        ) from exc


STAGING_MARK = ".staging-"


@contextlib.contextmanager
def staging(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder in `parent`, removed when the block ends however it ends (an error,
    SIGTERM, Ctrl-C). Its name carries this process id, so a later run can tell a leftover
    (its process gone, e.g. killed by SIGKILL) from a live one, and only this process, or a
    dead one that had its id, can have made a folder of that name: the cleanup takes charge
    before the folder exists, so no signal can land between its creation and its cleanup
    (one landing just after mkdtemp's mkdir used to strand it)."""
    path = parent / f"{prefix}{STAGING_MARK}{os.getpid()}.{secrets.token_hex(6)}"
    try:
        path.mkdir(mode=0o700)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep_staging(parent: Path, prefix: str) -> list[Path]:
    """Remove leftover staging folders/files of dead processes in `parent`; return them."""
    removed = []
    for path in parent.glob(f"{prefix}{STAGING_MARK}*") if parent.is_dir() else ():
        pid = path.name[len(prefix) + len(STAGING_MARK) :].split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def pid_alive(pid: int) -> bool:
    """True if a process `pid` exists (signal 0; a process of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
