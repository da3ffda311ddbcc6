"""Drift: per patch, the releases after its pin (up to the newest on the index) that changed the
functions it touches, the newest release it still applies to, and whether upstream absorbed it.

`python -m verify status --drift` adds this section. Release files come from the cached sdists
(`upstream_code.ReleaseFiles`, one pass over each release's tarball for every patch); the release
list is one index query (`upstream_code.releases`, cached for offline use). A touched function
is fingerprinted by its source with blank and comment-only lines dropped; a release whose
fingerprint differs from the one before it changed the function. A patch that touches no
function (a new file, module-level lines) is fingerprinted by its whole files.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verify import upstream_code
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.series import Patch
from verify.upstream_code import Change, ReleaseFiles, function_source
from verify.versions import version_key

Reader = Callable[[str], str | None]


@dataclass
class Drift:
    ident: str  # <pin>/<NNNN>
    changed_in: list[str] = field(default_factory=list)
    newest_applies: str | None = None  # None: no later release takes it as is
    absorbed_in: str | None = None
    searched_up_to: str = ""

    def text(self) -> str:
        changed = ", ".join(self.changed_in) or "none"
        applies = self.newest_applies or "no later release"
        absorbed = f"absorbed in {self.absorbed_in}" if self.absorbed_in else "not absorbed"
        return (f"{self.ident}: touched code changed in {changed}; applies as is up to "
                f"{applies}; {absorbed}")  # fmt: skip


def fingerprint(change: Change, read: Reader) -> str:
    """A hash of the touched functions' sources (or files) as `read` gives them."""
    digest = hashlib.sha256()
    for path in change.paths:
        text = read(path)
        names = sorted(change.functions.get(path) or [])
        parts = [function_source(text or "", name) for name in names] if names else [text]
        for part in parts:
            lines = [x for x in (part or "").splitlines() if upstream_code._norm(x)]
            digest.update(f"{path}\0{len(lines)}\0".encode() + "\n".join(lines).encode())
    return digest.hexdigest()


def applies(patch_path: Path, read: Reader, paths: list[str]) -> bool:
    """Whether the patch's code hunks apply as is to the files `read` gives."""
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            text = read(path)
            if text is not None:
                target = Path(tmp) / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        run = subprocess.run(["git", "apply", "--check", "--exclude=tests/*", str(patch_path)],
                             cwd=tmp, capture_output=True)  # fmt: skip
    return run.returncode == 0


def of_patch(pin: str, patch: Patch, change: Change, pristine: Reader, later: list[str],
             files: ReleaseFiles) -> Drift:  # fmt: skip
    """The drift of one patch of `pin` over the releases `later` (oldest first)."""
    found = Drift(f"{pin}/{patch.name[:4]}", searched_up_to=later[-1] if later else pin)
    before = fingerprint(change, pristine)
    for release in later:

        def read(path: str, r: str = release) -> str | None:
            return files.read(r, path)

        now = fingerprint(change, read)
        if now != before:
            found.changed_in.append(release)
        before = now
        if applies(patch.path, read, change.paths):
            found.newest_applies = release
        if found.absorbed_in is None and change.probe(release, read).contains:
            found.absorbed_in = release
    return found


def compute(series: dict[str, list[Patch]], trees: dict[str, BuildTree], listing: list[str],
            files: ReleaseFiles | None = None) -> list[Drift]:  # fmt: skip
    """Drift of every patch of every series, over the releases after its pin in `listing`."""
    files = files or ReleaseFiles()
    out = []
    for pin, patches in series.items():
        tree = trees[pin]
        later = [v for v in listing if version_key(v) > version_key(pin)]

        def blob(sha: str, t: BuildTree = tree) -> str | None:
            data = subprocess.run(["git", "-C", str(t.path), "cat-file", "blob", sha],
                                  capture_output=True)  # fmt: skip
            return data.stdout.decode(errors="replace") + "\n" if data.returncode == 0 else None

        def pristine(path: str, t: BuildTree = tree) -> str | None:
            data = t.read_bytes(BASELINE_TAG, path)
            return data.decode(errors="replace") if data is not None else None

        changes = [Change.of(patch, blob) for patch in patches]
        wanted = sorted({p for c in changes for p in c.paths})
        for release in later:  # one pass over each tarball for all the series' files
            files._load(release, wanted)
        for patch, change in zip(patches, changes, strict=True):
            out.append(of_patch(pin, patch, change, pristine, later, files))
    return out


def render(drifts: list[Drift], newest: str) -> list[str]:
    lines = [f"Drift (releases after each pin, up to {newest}, the newest on the index):"]
    return lines + [f"  {d.text()}" for d in drifts]
