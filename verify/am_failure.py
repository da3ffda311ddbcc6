"""Which files and hunks of a patch `git am` could not apply, read from its output."""

from __future__ import annotations

import re

from verify.series import Patch

_PATCH_FAILED = re.compile(r"error: patch failed: (\S+?):(\d+)")
_CONFLICT = re.compile(r"CONFLICT \([^)]*\): (?:Merge conflict in )?(\S+)")
_MISSING = re.compile(r"error: (\S+): does not exist in index")
_CORRUPT = re.compile(r"corrupt patch at line (\d+)")


def failure_details(output: str, patch: Patch) -> tuple[list[str], str]:
    """Which files (and hunks) of `patch` failed, from `git am` output."""
    files: list[str] = []
    parts: list[str] = []
    for name, line in _PATCH_FAILED.findall(output):
        files.append(name)
        parts.append(f"hunk at {name}:{line}{hunk_header(patch, name, int(line))}")
    for name in _CONFLICT.findall(output):
        if name not in files:
            files.append(name)
        parts.append(f"merge conflict in {name}")
    for name in _MISSING.findall(output):
        files.append(name)
        parts.append(f"{name} does not exist in this version")
    for line in _CORRUPT.findall(output):
        parts.append(f"corrupt patch at line {line}")
    if not parts:
        tail = " ".join(output.strip().splitlines()[-3:])
        parts.append(f"git am failed: {tail}")
    return list(dict.fromkeys(files)), "; ".join(dict.fromkeys(parts))


def hunk_header(patch: Patch, name: str, line: int) -> str:
    """The `@@ -line,...` header of the hunk of `name` that starts at `line`, if found."""
    text = patch.path.read_text(encoding="utf-8", errors="replace")
    section = text.split(f"diff --git a/{name} b/{name}", 1)
    if len(section) < 2:
        return ""
    for match in re.finditer(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$", section[1], re.M):
        if int(match.group(1)) == line:
            return f" ({match.group(0).strip()})"
    return ""
