"""Patch series: `patches/<version>/series` plus `NNNN-name.patch` files, and their metadata.

Each patch's commit message ends with trailers the tool validates::

    Upstream: https://github.com/vllm-project/vllm/pull/NNNNN   (or: none)
    Status: proposed | local | merged-in X.Y.Z
    Verify: what proves it (tests in this repo, upstream tests in the build tree)
    Drop-when: when the patch can be removed
    Obsolete-in: X.Y.Z   (optional: first release that solved it differently upstream)
    Fixes: GHSA-...      (optional: the advisory the patch fixes)

Trailers are read by git itself (`git interpret-trailers --parse`): keys in any case, values
wrapped over indented lines, and git's own trailers (Signed-off-by, ...) in a paragraph of their
own below the metadata are all accepted.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from verify import paths
from verify.errors import PatchbenchError

REQUIRED_TRAILERS = ("Upstream", "Status", "Verify", "Drop-when")
OPTIONAL_TRAILERS = ("Obsolete-in", "Fixes", "Signed-off-by", "Co-authored-by")
_CANONICAL = {key.lower(): key for key in REQUIRED_TRAILERS + OPTIONAL_TRAILERS}
_VERSION = r"\d+\.\d+\.\d+"
_STATUS = re.compile(rf"^(proposed|local|merged-in ({_VERSION}))$")
_UPSTREAM = re.compile(r"^(none|https?://\S+)$")
_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Patch:
    """One patch file of a series and its validated metadata."""

    name: str
    path: Path
    subject: str
    body: str
    trailers: dict[str, str]
    files: tuple[str, ...] = field(default=())

    @property
    def status(self) -> str:
        return self.trailers["Status"]

    @property
    def merged_in(self) -> str | None:
        match = _STATUS.match(self.status)
        return match.group(2) if match else None

    @property
    def obsolete_in(self) -> str | None:
        return self.trailers.get("Obsolete-in")

    @property
    def upstream(self) -> str:
        return self.trailers["Upstream"]


def _split_message(text: str, name: str) -> tuple[str, str]:
    """Return (subject, message body) of a `git format-patch` file."""
    lines = text.split("\n")
    if not lines or not lines[0].startswith("From "):
        raise PatchbenchError(f"{name}: not a git format-patch file (no 'From ' mbox line)")
    subject: list[str] = []
    i = 1
    in_subject = False
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line.startswith("Subject: "):
            subject, in_subject = [line[len("Subject: ") :]], True
        elif in_subject and line.startswith((" ", "\t")):
            subject.append(line.strip())
        else:
            in_subject = False
        i += 1
    if not subject:
        raise PatchbenchError(f"{name}: no Subject header")
    end = next(
        (
            j
            for j in range(i, len(lines))
            if lines[j] in ("---",) or lines[j].startswith("diff --git")
        ),
        None,
    )
    if end is None:
        raise PatchbenchError(f"{name}: corrupt patch (no diff after the commit message)")
    body = "\n".join(lines[i + 1 : end]).strip("\n")
    return " ".join(subject), body


def _git_trailers(paragraph: str) -> list[tuple[str, str]]:
    """(key, value) pairs git finds in `paragraph` read as a message's trailer block."""
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    run = subprocess.run(
        ["git", "interpret-trailers", "--parse", "--no-divider"],
        input=f"subject\n\n{paragraph}\n", capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    pairs = []
    for line in run.stdout.splitlines():
        key, _, value = line.partition(":")
        pairs.append((_CANONICAL.get(key.strip().lower(), key.strip()), value.strip()))
    return pairs


def parse_trailers(body: str) -> dict[str, str]:
    """Trailers at the end of the message `body`, as git parses them, keys in canonical case.

    Trailing paragraphs are read from the last one up while each is a trailer block and the
    required keys are not all found yet (so `Signed-off-by` may stand in its own paragraph).
    Repeated keys keep the first value (Signed-off-by lines are not metadata).
    """
    paragraphs = [p for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    trailers: dict[str, str] = {}
    for paragraph in reversed(paragraphs):
        pairs = _git_trailers(paragraph)
        if not pairs:
            break
        for key, value in pairs:
            trailers.setdefault(key, value)
        if all(key in trailers for key in REQUIRED_TRAILERS):
            break
    return trailers


def validate_trailers(name: str, trailers: dict[str, str]) -> None:
    missing = [key for key in REQUIRED_TRAILERS if not trailers.get(key)]
    if missing:
        raise PatchbenchError(
            f"{name}: missing metadata trailer(s) {', '.join(missing)}; the commit message must "
            f"end with a paragraph of {', '.join(k + ':' for k in REQUIRED_TRAILERS)}"
        )
    if not _STATUS.match(trailers["Status"]):
        raise PatchbenchError(
            f"{name}: malformed 'Status: {trailers['Status']}' "
            "(expected proposed, local or merged-in X.Y.Z)"
        )
    if not _UPSTREAM.match(trailers["Upstream"]):
        raise PatchbenchError(
            f"{name}: malformed 'Upstream: {trailers['Upstream']}' (expected a URL or none)"
        )
    obsolete = trailers.get("Obsolete-in")
    if obsolete is not None and not re.fullmatch(_VERSION, obsolete):
        raise PatchbenchError(f"{name}: malformed 'Obsolete-in: {obsolete}' (expected X.Y.Z)")


def parse_patch(path: Path) -> Patch:
    """Read and validate one patch file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PatchbenchError(f"patch file {path} does not exist") from exc
    except UnicodeDecodeError as exc:
        raise PatchbenchError(f"{path.name}: corrupt patch (not UTF-8 text)") from exc
    subject, body = _split_message(text, path.name)
    files = tuple(dict.fromkeys(m.group(2) for m in _DIFF.finditer(text)))
    if not files:
        raise PatchbenchError(f"{path.name}: corrupt patch (no 'diff --git' section)")
    trailers = parse_trailers(body)
    validate_trailers(path.name, trailers)
    return Patch(path.name, path, subject, body, trailers, files)


def series_dir(version: str, root: Path | None = None) -> Path:
    return (root or paths.patches_root()) / version


def read_series(version: str, root: Path | None = None) -> list[Patch]:
    """The ordered, validated patches of `patches/<version>/` (empty if there is no series)."""
    directory = series_dir(version, root)
    manifest = directory / "series"
    if not manifest.exists():
        return []
    names = [
        line.strip()
        for line in manifest.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise PatchbenchError(
            f"{manifest} lists {', '.join(repeated)} more than once; a patch can be applied only "
            "once: delete the repeated line(s)"
        )
    patches = []
    for name in names:
        path = directory / name
        if not path.exists():
            raise PatchbenchError(
                f"{manifest} names {name}, which does not exist in {directory}; "
                "fix the series file or run the export session"
            )
        patches.append(parse_patch(path))
    listed = set(names)
    strays = sorted(p.name for p in directory.glob("*.patch") if p.name not in listed)
    if strays:
        raise PatchbenchError(
            f"{directory} has patch files the series does not list: {', '.join(strays)}"
        )
    return patches


def write_series(directory: Path, names: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "series").write_text("".join(f"{name}\n" for name in names))


def series_hash(version: str, root: Path | None = None, length: int = 10) -> str:
    """Short sha256 over the series manifest and patch files of `version` ("none" if empty)."""
    directory = series_dir(version, root)
    manifest = directory / "series"
    if not manifest.exists():
        return "none"
    data = manifest.read_bytes()
    names = [n for n in manifest_names(data) if (directory / n).exists()]
    return hash_series(data, [(n, (directory / n).read_bytes()) for n in names], length)


def manifest_names(manifest: bytes) -> list[str]:
    """The patch file names a series manifest lists, in order (comments and blanks left out)."""
    names = (line.strip() for line in manifest.decode().splitlines())
    return [n for n in names if n and not n.startswith("#")]


def hash_series(manifest: bytes, files: list[tuple[str, bytes]], length: int = 10) -> str:
    """`series_hash` of a manifest's bytes and its listed patch files that exist, (name, bytes)
    in manifest order: also what a committed form of the series hashed to."""
    digest = hashlib.sha256(manifest)
    for name, data in files:
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()[:length]
