"""Upstream detection: every patch of every series against every pinned version.

For a pin whose own series holds the patch, the series is applied in order on a scratch index
of the pristine tree (``needed`` when it applies). Any other pin gets the patch alone:

- ``applies``: applies cleanly to the pristine release (could be carried there);
- ``upstream``: reverse-applies cleanly, i.e. the change is already in the release;
- ``merged-in X``: not byte-identical, but the patch's metadata says it was merged in X <= pin;
- ``obsolete``: the metadata says upstream solved it differently from X <= pin;
- ``ported``: none of the above, but the pin's own series carries a patch with the same
  subject (a port of the change to that release); the cell names it;
- ``conflicts``: none of the above; the cell names the file (and line) that failed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import git

from verify.buildtree import BASELINE_TAG, BuildTree, _git_env
from verify.series import Patch, read_series
from verify.versions import PINNED, version_key


@dataclass(frozen=True)
class Cell:
    state: str  # needed | applies | upstream | merged-in | obsolete | ported | conflicts
    detail: str = ""

    def text(self) -> str:
        return f"{self.state} {self.detail}".strip()


@dataclass(frozen=True)
class Row:
    origin: str  # the pin whose series holds the patch
    patch: str
    subject: str
    status: str
    cells: dict[str, Cell]


class _ScratchIndex:
    """A temporary git index holding the pristine tree, for `git apply --cached` checks."""

    def __init__(self, tree: BuildTree, directory: Path):
        self.tree = tree
        self.env = _git_env()
        self.env["GIT_INDEX_FILE"] = str(directory / f"index-{tree.version}")
        tree.git("read-tree", BASELINE_TAG, env=self.env)

    def apply(self, patch: Path, *, reverse: bool = False, check: bool = True) -> str | None:
        """None on success, else git's error text."""
        args = ["apply", "--cached"] + (["--check"] if check else []) + (["-R"] if reverse else [])
        try:
            self.tree.git(*args, str(patch), env=self.env)
        except git.GitCommandError as exc:
            return (exc.stderr or str(exc)).strip()
        return None


def _where(error: str) -> str:
    match = re.search(r"patch failed: (\S+:\d+)", error) or re.search(
        r"error: (\S+): (?:does not exist in index|already exists in index)", error
    )
    return match.group(1) if match else error.splitlines()[-1] if error else "?"


def _cell_for_foreign(
    index: _ScratchIndex, patch: Patch, pin: str, ports: dict[str, str] | None = None
) -> Cell:
    """State of `patch` (from another pin's series) on `pin`; `ports` maps the subjects of
    `pin`'s own series to their patch names."""
    if index.apply(patch.path) is None:
        return Cell("applies")
    if index.apply(patch.path, reverse=True) is None:
        return Cell("upstream", f"(merged-in {patch.merged_in})" if patch.merged_in else "")
    if patch.merged_in and version_key(pin) >= version_key(patch.merged_in):
        return Cell("merged-in", patch.merged_in)
    if patch.obsolete_in and version_key(pin) >= version_key(patch.obsolete_in):
        return Cell("obsolete", f"(from {patch.obsolete_in})")
    if ports and patch.subject in ports:
        return Cell("ported", f"as {pin}/{ports[patch.subject]}")
    return Cell("conflicts", _where(index.apply(patch.path) or ""))


def compute(
    pins: tuple[str, ...] = PINNED, build_root: Path | None = None, patches_root: Path | None = None
) -> list[Row]:
    """The status table. Creates missing pristine build trees; never changes their HEADs."""
    trees = {pin: BuildTree(pin, build_root, patches_root) for pin in pins}
    series = {pin: read_series(pin, patches_root) for pin in pins}
    for tree in trees.values():
        tree.ensure_baseline()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        in_series: dict[tuple[str, str], Cell] = {}
        for pin, patches in series.items():
            index = _ScratchIndex(trees[pin], Path(tmp))
            broken = None
            for patch in patches:
                if broken:
                    in_series[(pin, patch.name)] = Cell("conflicts", f"(after {broken})")
                    continue
                error = index.apply(patch.path, check=False)
                if error is None:
                    in_series[(pin, patch.name)] = Cell("needed")
                else:
                    in_series[(pin, patch.name)] = Cell("conflicts", _where(error))
                    broken = patch.name
        ports = {pin: {p.subject: p.name[:4] for p in patches} for pin, patches in series.items()}
        for origin, patches in series.items():
            for patch in patches:
                cells = {}
                for pin in pins:
                    if pin == origin:
                        cells[pin] = in_series[(pin, patch.name)]
                    else:
                        cells[pin] = _cell_for_foreign(
                            _ScratchIndex(trees[pin], Path(tmp)), patch, pin, ports[pin]
                        )
                rows.append(Row(origin, patch.name, patch.subject, patch.status, cells))
    return rows


def render(rows: list[Row], pins: tuple[str, ...] = PINNED) -> str:
    """A plain-text table: one row per patch, one column per pinned version."""
    header = ["series", "patch", *pins]
    table = [header] + [[r.origin, r.patch, *(r.cells[p].text() for p in pins)] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if not rows:
        lines.append("(no patches in any series)")
    return "\n".join(lines)


def write_json(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = [dict(asdict(r), cells={p: asdict(c) for p, c in r.cells.items()}) for r in rows]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"pins": list(rows[0].cells) if rows else [], "rows": data}, indent=2)
    )
    os.replace(tmp, path)
