"""Claims about upstream checked against upstream's released code.

A patch says ``Status: merged-in X``, ``Obsolete-in: X`` or ``Fixes: GHSA-...``. This module
reads the touched files of vLLM's released sdists (from the package index through
`verify.sdist`, cached) and decides, from the code, whether a release contains a change:

- ``reverse-applies``: the patch's code hunks reverse-apply to the release (byte-identical);
- ``lines``: in every function the patch touches, its added lines are present and its removed
  lines are gone (whitespace-insensitive; blank and comment-only lines ignored);
- ``marker``: a registered marker (`MARKERS`, for changes that upstream wrote differently
  or solved another way) says the fixed form is there, or the flawed form is gone.

`first_containing` bisects the releases after the patch's pin (the predicate is monotonic
for a change that stays) and downloads only the sdists it probes.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verify import paths, sdist
from verify.progress import say
from verify.series import Patch
from verify.versions import version_key

_RELEASE = re.compile(r"^vllm-(\d+\.\d+\.\d+)\.tar\.gz$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")


def is_test_path(path: str) -> bool:
    """Upstream's test files (``tests/...``), which a change's code check ignores."""
    return path.startswith("tests/") or "/tests/" in path


# -- markers ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Marker:
    """Code that tells whether a release has a change, inside one function of one file.

    ``fixed``: a regex whose match (any line) means the change is in; ``flaw``: a regex whose
    match means it is not, unless a line matching ``unless`` comes before it in the function
    (e.g. an early return that skips the flawed statement)."""

    file: str
    function: str
    fixed: str = ""
    flaw: str = ""
    unless: str = ""
    why: str = ""

    def contains(self, source: str) -> bool:
        if self.fixed and re.search(self.fixed, source, re.M):
            return True
        if not self.flaw:
            return False
        lines = source.splitlines()
        for i, line in enumerate(lines):
            if re.search(self.flaw, line):
                guarded = self.unless and any(re.search(self.unless, x) for x in lines[:i])
                return bool(guarded)
        return True


#: Keyed by patch subject (stable across pins and renumbering).
MARKERS: dict[str, Marker] = {
    "[Kernel] Tile the vocabulary in sample_recovered_tokens_kernel": Marker(
        file="vllm/v1/sample/rejection_sampler.py",
        function="sample_recovered_tokens_kernel",
        fixed=r"^\s*for \w+ in (tl\.)?range\(0, vocab_size, BLOCK_SIZE\)",
        why="upstream's tiled kernel names its tile offsets differently; the loop over "
        "BLOCK_SIZE tiles of the vocabulary is the change",
    ),
    "[Bugfix] Keep recovered token ids inside the vocabulary": Marker(
        file="vllm/v1/sample/rejection_sampler.py",
        function="sample_recovered_tokens_kernel",
        fixed=r"score\s*=\s*tl\.where\(.*float\([\"']-inf[\"']\)\)",
        why="upstream 0.24.0 writes the guard as a separate `score = tl.where(vocab_mask, "
        "score, -inf)` line (0.16.0's tiled kernel names the mask in_vocab); a score masked "
        "to -inf is the fix",
    ),
    "[Perf] Keep pooling prompt token IDs on CPU for CPU-only poolers": Marker(
        file="vllm/v1/pool/metadata.py",
        function="PoolingMetadata",
        fixed=r"^\s*def get_prompt_token_ids_cpu\(",
        why="the host-side prompt ids accessor of PoolingMetadata is the change; upstream's "
        "InputBatch side differs (num_prompt_tokens_cpu_tensor)",
    ),
    "[Perf] Drop the device copy of pooling prompt token IDs": Marker(
        file="vllm/v1/worker/gpu_input_batch.py",
        function="InputBatch.get_pooling_metadata",
        fixed=r"^\s*prompt_token_ids=None,",
        why="pooling metadata built without the device prompt ids is the change",
    ),
    "[Perf][MRV2] Skip the FP32 logits copy in the sampler when no request needs processing": (
        Marker(
            file="vllm/v1/worker/gpu/sample/sampler.py",
            function="Sampler.apply_sampling_params",
            flaw=r"^\s*logits = torch\.empty_like\(logits, dtype=torch\.float32\)\.copy_\(logits\)",
            unless=r"^\s*return logits\s*$",
            why="obsolete means upstream no longer copies the logits to FP32 for a batch that "
            "needs no processing: the copy is gone, or an early return precedes it",
        )
    ),
}


# -- releases and their files -----------------------------------------------------------------
def releases(index: str | None = None) -> list[str]:
    """Final X.Y.Z releases of vLLM that have an sdist, oldest first (cached for offline use)."""
    cache = paths.cache_dir() / "releases-vllm.json"
    url = f"{(index or sdist.index_url()).rstrip('/')}/{sdist.PACKAGE}/"
    try:
        request = urllib.request.Request(url, headers={"Accept": sdist.JSON_ACCEPT})
        with urllib.request.urlopen(request, timeout=sdist.TIMEOUT_S) as response:
            names = [f.get("filename", "") for f in json.load(response).get("files", [])]
        found = sorted({m.group(1) for n in names if (m := _RELEASE.match(n))}, key=version_key)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(found) + "\n")
        return found
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        if cache.exists():
            say(f"index unreachable ({exc}); using the cached release list")
            return json.loads(cache.read_text())
        raise


class ReleaseFiles:
    """Files of released sdists, read member by member and cached per version."""

    def __init__(self, fetch: Callable[[str], Path] = sdist.fetch):
        self._fetch = fetch
        self._cache: dict[tuple[str, str], str | None] = {}

    def read(self, version: str, path: str) -> str | None:
        key = (version, path)
        if key not in self._cache:
            self._load(version, [path])
        return self._cache[key]

    def _load(self, version: str, wanted: Iterable[str]) -> None:
        wanted = set(wanted)
        tarball = self._fetch(version)
        with tarfile.open(tarball, "r:gz") as archive:
            for member in archive:
                name = member.name.split("/", 1)[-1]
                if name in wanted and member.isfile():
                    handle = archive.extractfile(member)
                    self._cache[(version, name)] = handle.read().decode() if handle else None
        for path in wanted:
            self._cache.setdefault((version, path), None)


# -- what a patch changes -----------------------------------------------------------------------
@dataclass
class FileChange:
    path: str
    old_blob: str
    new_blob: str
    removed: list[tuple[int, str]] = field(default_factory=list)  # (old line number, text)
    added: list[tuple[int, str]] = field(default_factory=list)  # (new line number, text)


def _norm(line: str) -> str:
    text = line.strip()
    return "" if not text or text.startswith("#") else text


def file_changes(patch_text: str, *, code_only: bool = True) -> list[FileChange]:
    """Per file: the removed and added lines of a `git format-patch` text, with line numbers."""
    changes: list[FileChange] = []
    current: FileChange | None = None
    old = new = 0
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[-1]
            current = FileChange(path, "", "")
            changes.append(current)
        elif current is None:
            continue
        elif m := _INDEX.match(line):
            current.old_blob, current.new_blob = m.group(1), m.group(2)
        elif m := _HUNK.match(line):
            old, new = int(m.group(1)), int(m.group(3))
        elif line.startswith(("--- ", "+++ ")):
            continue
        elif line.startswith("-"):
            current.removed.append((old, line[1:]))
            old += 1
        elif line.startswith("+"):
            current.added.append((new, line[1:]))
            new += 1
        elif line.startswith(" "):
            old, new = old + 1, new + 1
    return [c for c in changes if not (code_only and is_test_path(c.path))]


def functions_at(source: str, lines: Iterable[int]) -> set[str]:
    """Qualified names (``Class.method``) of the innermost functions holding `lines`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    spans: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    spans.append((start, child.end_lineno or child.lineno, name))
                walk(child, name + ".")

    walk(tree, "")
    found = set()
    for line in lines:
        holding = [s for s in spans if s[0] <= line <= s[1]]
        if holding:
            found.add(min(holding, key=lambda s: s[1] - s[0])[2])
    return found


def function_source(source: str, qualname: str) -> str | None:
    """Source of the function `qualname` in `source`, or None if it is not defined there."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(
            (
                c
                for c in ast.iter_child_nodes(node)
                if isinstance(c, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and c.name == part
            ),
            None,
        )
        if node is None:
            return None
    return ast.get_source_segment(source, node, padded=False)


# -- the predicate ------------------------------------------------------------------------------
@dataclass
class Probe:
    """Whether one release's code contains one change, and how that was decided."""

    version: str
    contains: bool
    method: str  # reverse-applies | lines | marker | missing
    detail: str = ""


@dataclass
class Change:
    """A patch's code change, with what is needed to look for it in other releases."""

    subject: str
    patch_path: Path
    files: list[FileChange]
    functions: dict[str, set[str]]  # path -> touched functions (empty: whole file)

    @classmethod
    def of(cls, patch: Patch, read_blob: Callable[[str], str | None]) -> Change:
        files = file_changes(patch.path.read_text(encoding="utf-8"))
        functions: dict[str, set[str]] = {}
        for change in files:
            pre, post = read_blob(change.old_blob), read_blob(change.new_blob)
            touched = set()
            if pre is not None:
                touched |= functions_at(pre, [n for n, _ in change.removed])
            if post is not None:
                touched |= functions_at(post, [n for n, _ in change.added])
            functions[change.path] = touched
        return cls(patch.subject, patch.path, files, functions)

    @property
    def paths(self) -> list[str]:
        paths_ = [f.path for f in self.files]
        marker = MARKERS.get(self.subject)
        return paths_ + ([marker.file] if marker and marker.file not in paths_ else [])

    def probe(self, version: str, read: Callable[[str], str | None]) -> Probe:
        sources = {p: read(p) for p in self.paths}
        marker = MARKERS.get(self.subject)
        if marker is not None:
            body = function_source(sources.get(marker.file) or "", marker.function)
            if body is None:
                return Probe(version, False, "missing", f"{marker.file}:{marker.function} absent")
            return Probe(version, marker.contains(body), "marker", marker.function)
        if _reverse_applies(self.patch_path, sources):
            return Probe(version, True, "reverse-applies")
        return self._lines(version, sources)

    def _lines(self, version: str, sources: dict[str, str | None]) -> Probe:
        missing, left = [], []
        for change in self.files:
            text = sources.get(change.path)
            if text is None:
                return Probe(version, False, "missing", f"{change.path} absent")
            scope = []
            for name in sorted(self.functions.get(change.path) or []):
                body = function_source(text, name)
                if body is None:
                    return Probe(version, False, "missing", f"{change.path}:{name} absent")
                scope.append(body)
            present = {_norm(x) for x in "\n".join(scope or [text]).splitlines()}
            added = {_norm(t) for _, t in change.added} - {""}
            removed = {_norm(t) for _, t in change.removed} - {""} - added
            missing += sorted(added - present)
            left += sorted(removed & present)
        detail = f"{len(missing)} added line(s) missing, {len(left)} removed line(s) still there"
        return Probe(version, not missing and not left, "lines", detail)


def _reverse_applies(patch_path: Path, sources: dict[str, str | None]) -> bool:
    """True if the code hunks of the patch reverse-apply to `sources` (`git apply -R --check`)."""
    with tempfile.TemporaryDirectory() as tmp:
        for path, text in sources.items():
            if text is not None:
                target = Path(tmp) / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        run = subprocess.run(
            ["git", "apply", "--check", "-R", "--exclude=tests/*", str(patch_path)],
            cwd=tmp,
            capture_output=True,
        )
    return run.returncode == 0


# -- searching the releases ----------------------------------------------------------------------
@dataclass
class Search:
    """The first release after `origin` (up to `last`) whose code contains a change."""

    origin: str
    claimed: str | None
    first: str | None
    probes: list[Probe]
    last: str

    @property
    def agrees(self) -> bool:
        return self.claimed == self.first

    def to_json(self) -> dict:
        return {
            "origin": self.origin,
            "claimed": self.claimed,
            "first_containing": self.first,
            "searched_up_to": self.last,
            "agrees": self.agrees,
            "probes": [asdict(p) for p in self.probes],
        }


def first_containing(
    change: Change,
    origin: str,
    claimed: str | None,
    candidates: list[str],
    files: ReleaseFiles,
) -> Search:
    """Bisect `candidates` (releases after `origin`, oldest first) for the first that contains
    `change`, probing the claimed release and the one before it first."""
    memo: dict[str, Probe] = {}

    def contains(i: int) -> bool:
        version = candidates[i]
        if version not in memo:
            say(f"checking vLLM {version} for '{change.subject[:60]}'")
            memo[version] = change.probe(version, lambda p: files.read(version, p))
        return memo[version].contains

    lo, hi = 0, len(candidates)  # answer in [lo, hi]; hi == len: none
    if claimed in candidates:
        i = candidates.index(claimed)
        if contains(i):
            hi = i
            if i == 0 or not contains(i - 1):
                lo = i
        else:
            lo = i + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if contains(mid):
            hi = mid
        else:
            lo = mid + 1
    first = candidates[lo] if lo < len(candidates) else None
    probes = sorted(memo.values(), key=lambda p: version_key(p.version))
    last = candidates[-1] if candidates else origin
    return Search(origin, claimed, first, probes, last)


def between(all_releases: list[str], after: str, up_to: str) -> list[str]:
    """Releases newer than `after`, up to and including `up_to`."""
    return [v for v in all_releases if version_key(after) < version_key(v) <= version_key(up_to)]
