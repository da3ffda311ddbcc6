"""Pristine vLLM sources: the release's sdist from the package index, hash-checked and cached.

The index is read through its PEP 691 JSON simple API (`pip download` of the sdist would try
to build metadata and need torch). Environment:

- ``PATCHBENCH_INDEX_URL``: simple index base (default ``https://pypi.org/simple``).
- ``PATCHBENCH_CACHE_DIR``: cache root (default ``~/.cache/vllm-patchbench``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from verify import paths
from verify.errors import ConfigError, PatchbenchError
from verify.progress import Progress, say

PACKAGE = "vllm"
DEFAULT_INDEX = "https://pypi.org/simple"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 60


def index_url() -> str:
    """The simple index base (PATCHBENCH_INDEX_URL); ConfigError unless an http(s) URL."""
    value = os.environ.get("PATCHBENCH_INDEX_URL", "").strip() or DEFAULT_INDEX
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"PATCHBENCH_INDEX_URL={value!r} is not an http(s) URL of a package index; nothing "
            f"was changed. Set it to a simple index such as {DEFAULT_INDEX}, or unset it"
        )
    return value.rstrip("/")


def cache_dir() -> Path:
    return paths.cache_dir()


@dataclass(frozen=True)
class SdistInfo:
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None


def sdist_filename(version: str) -> str:
    return f"{PACKAGE}-{version}.tar.gz"


def lookup_file(project: str, wanted: str, version: str, index: str | None = None) -> SdistInfo:
    """Find the distribution file `wanted` of `project` (an sdist or a wheel) in the index."""
    base = f"{(index or index_url()).rstrip('/')}/{project}/"
    request = urllib.request.Request(base, headers={"Accept": JSON_ACCEPT})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        payload = json.load(response)
    names = []
    for entry in payload.get("files", []):
        names.append(entry.get("filename", ""))
        if entry.get("filename") == wanted:
            digest = entry.get("hashes", {}).get("sha256")
            if not digest:
                raise PatchbenchError(f"the index lists {wanted} without a sha256 hash")
            if entry.get("yanked"):
                say(f"warning: {wanted} is yanked on the index")
            return SdistInfo(
                version, wanted, urllib.parse.urljoin(base, entry["url"]), digest, entry.get("size")
            )
    suffix = wanted[len(project) + 1 + len(version) :]
    published = sorted(
        {n.split("-")[1] for n in names if n.endswith(suffix) and n.count("-") >= 1},
        key=lambda v: [int(x) for x in re.findall(r"\d+", v)],
    )
    near = ", ".join(published[-5:]) if published else "none"
    raise PatchbenchError(
        f"{project} {version} has no {wanted} on {base}; is it published? "
        f"newest versions with such a file there: {near}"
    )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(info: SdistInfo, dest: Path) -> None:
    paths.require_writable(dest.parent, "PATCHBENCH_CACHE_DIR")
    paths.sweep_staging(dest.parent, f".{info.filename}")
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{info.filename}{paths.STAGING_MARK}{os.getpid()}.", dir=dest.parent
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(info.url, timeout=TIMEOUT_S) as r:
            total = info.size or int(r.headers.get("Content-Length") or 0) or None
            progress = Progress(f"download {info.filename}", total, unit="B")
            for block in iter(lambda: r.read(1 << 20), b""):
                out.write(block)
                progress.update(len(block))
            progress.finish()
        actual = sha256_of(tmp)
        if actual != info.sha256:
            raise PatchbenchError(
                f"sha256 mismatch for {info.filename}: the index says {info.sha256}, "
                f"the download is {actual}; the download was discarded, nothing was changed"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


#: The cache's folder of sdists.
SDISTS = "sdists"


def cached_path(version: str) -> Path:
    """Where the sdist of `version` is cached (whether or not it is there)."""
    return cache_dir() / SDISTS / sdist_filename(version)


def pin_file(version: str, rel: str, build_root: Path | None = None) -> str | None:
    """The text of file `rel` of vLLM `version`: from its build tree `build/<v>/`, else from
    the cached sdist (without downloading); None where neither holds it."""
    tree = (build_root or paths.build_root()) / version / rel
    if tree.is_file():
        return tree.read_text()
    tarball = cached_path(version)
    if not tarball.is_file():
        return None
    with tarfile.open(tarball) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("/" + rel)), None)
        handle = tar.extractfile(member) if member is not None else None
        return handle.read().decode() if handle is not None else None


def fetch(version: str, index: str | None = None) -> Path:
    """Return the path of the verified sdist of `version`, downloading it if not cached."""
    return fetch_file(PACKAGE, sdist_filename(version), version, SDISTS, index)


def fetch_file(
    project: str, filename: str, version: str, subdir: str, index: str | None = None
) -> Path:
    """Return the verified, cached distribution file `filename` of `project`.

    The cache keeps ``FILE`` beside ``FILE.sha256`` (the index's hash at download time), so a
    cached file is re-verified even when the index is unreachable.
    """
    target = cache_dir() / subdir / filename
    recorded = target.with_name(target.name + ".sha256")
    try:
        info = lookup_file(project, filename, version, index)
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        if target.exists() and recorded.exists():
            expected = recorded.read_text().strip()
            if sha256_of(target) != expected:
                raise PatchbenchError(
                    f"cached {target} does not match its recorded sha256 and the index is "
                    f"unreachable ({exc}); delete it and retry with network access"
                ) from exc
            say(f"index unreachable ({exc}); using cached {target.name} (sha256 verified)")
            return target
        raise PatchbenchError(
            f"cannot reach the package index {index or index_url()} ({exc}) and no cached "
            f"file at {target}; connect once, or set PATCHBENCH_CACHE_DIR to a cache holding it"
        ) from exc
    if target.exists() and sha256_of(target) == info.sha256:
        _record(recorded, info.sha256)
        return target
    if target.exists():
        say(f"cached {target.name} does not match the index hash; downloading again")
    _download(info, target)
    _record(recorded, info.sha256)
    return target


def _record(path: Path, digest: str) -> None:
    """Write the `.sha256` beside a cached file unless it already says so (a shared, read-only
    cache holding verified files stays usable)."""
    if path.exists() and path.read_text().strip() == digest:
        return
    try:
        path.write_text(digest + "\n")
    except OSError as exc:
        raise PatchbenchError(
            f"cannot write {path} ({exc.strerror or exc}); make the cache writable or set "
            "PATCHBENCH_CACHE_DIR to a writable folder"
        ) from exc


def unpack(tarball: Path, dest: Path) -> Path:
    """Unpack `tarball` into the new directory `dest`, dropping the top-level `vllm-X/` folder."""
    if dest.exists():
        raise PatchbenchError(f"refusing to unpack into existing {dest}")
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            members = archive.getmembers()
            tops = {m.name.split("/", 1)[0] for m in members}
            if len(tops) != 1:
                raise PatchbenchError(f"{tarball.name}: expected one top-level folder, got {tops}")
            progress = Progress(f"unpack {tarball.name}", len(members), unit=" files")
            for member in members:
                archive.extract(member, staging, filter="data")
                progress.update()
            progress.finish()
        os.replace(staging / tops.pop(), dest)
    except tarfile.TarError as exc:
        raise PatchbenchError(f"{tarball} is not a readable sdist: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest
