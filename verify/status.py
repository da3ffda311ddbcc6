"""Upstream detection: every patch of every series against every pinned version, with the
claims about upstream (merged-in, obsolete, advisory fixes) checked against released code.

For a pin whose own series holds the patch, the series is applied in order on a scratch index
of the pristine tree (``needed`` when it applies). Any other pin gets the patch alone, and the
first of these that holds names its cell:

- ``port NNNN``: the pin's own series carries a patch with the same subject (a port);
- ``applies``: applies cleanly to the pristine release (could be carried there);
- ``upstream``: reverse-applies cleanly, i.e. the change is already in the release;
- ``merged X`` / ``obsolete X``: the release is at or after X, the first release whose code
  contains the change (`verify.upstream_code`; the trailer's X when the code cannot tell);
- ``code only``: the code hunks apply, only hunks of upstream test files conflict;
- ``conflicts``: none of the above; the file and line are listed under the table.

Advisories: a patch with ``Fixes: GHSA-...`` is looked for on every pin's pristine and patched
code; a pin whose pristine code has the flaw and whose series does not fix it is listed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import git

from verify import dependencies, upstream_code
from verify import drift as drift_mod
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.errors import PatchbenchError
from verify.git_setup import git_env
from verify.progress import say
from verify.series import Patch, read_series, series_hash
from verify.upstream_code import Change, ReleaseFiles, Search
from verify.versions import PINNED, version_key

WIDTH = 120
LEGEND = """\
needed      in this pin's own series and applies there in order
applies     applies cleanly to this release (could be carried here)
port NNNN   this pin's series carries the same change as its patch NNNN
upstream    reverse-applies: the release already has exactly this change
merged X    merged upstream; X is the first release whose code contains it
obsolete X  upstream solved it differently; X is the first release whose code shows it
code only   the code hunks apply; only upstream test-file hunks conflict
conflicts   does not apply (file:line below)
!           the patch's trailer names another release than the code does (see claims)"""


@dataclass(frozen=True)
class Cell:
    state: str  # needed applies ported upstream merged-in obsolete code-only conflicts
    detail: str = ""

    def text(self) -> str:
        return f"{self.state} {self.detail}".strip()

    def short(self) -> str:
        """The table's form (at most 15 characters); the detail stays in the JSON."""
        if self.state == "ported":
            return f"port {self.detail.rsplit('/', 1)[-1]}"
        if self.state == "code-only":
            return "code only"
        if self.state in ("merged-in", "obsolete"):
            word = "merged" if self.state == "merged-in" else "obsolete"
            return f"{word} {self.detail.split()[0]}" + ("!" if "!" in self.detail else "")
        return self.state


@dataclass
class Row:
    origin: str  # the pin whose series holds the patch
    patch: str
    subject: str
    status: str
    cells: dict[str, Cell]
    fixes: str = ""
    claim: dict | None = None  # the code check of merged-in / obsolete (Search.to_json)

    @property
    def ident(self) -> str:
        return f"{self.origin}/{self.patch[:4]}"


@dataclass
class Advisory:
    advisory: str
    patches: list[str]
    pins: dict[str, dict] = field(default_factory=dict)  # pin -> {state, detail, probes}

    @property
    def missing(self) -> list[str]:
        return [pin for pin, v in self.pins.items() if v["state"] == "missing fix"]


@dataclass
class Status:
    rows: list[Row]
    advisories: list[Advisory]
    pins: tuple[str, ...]
    hashes: dict[str, str]
    dependencies: dict[str, list] = field(default_factory=dict)  # pin -> [Dependency]
    drift: list = field(default_factory=list)  # [verify.drift.Drift], with `status --drift`
    drift_up_to: str = ""

    # the older API iterated over rows
    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Row:
        return self.rows[i]


class _ScratchIndex:
    """A temporary git index holding the pristine tree, for `git apply --cached` checks."""

    def __init__(self, tree: BuildTree, directory: Path, name: str = ""):
        self.tree = tree
        self.env = git_env()
        self.env["GIT_INDEX_FILE"] = str(directory / f"index-{tree.version}{name}")
        tree.git("read-tree", BASELINE_TAG, env=self.env)

    def apply(
        self, patch: Path, *, reverse: bool = False, check: bool = True, code_only: bool = False
    ) -> str | None:
        """None on success, else git's error text."""
        args = ["apply", "--cached"] + (["--check"] if check else []) + (["-R"] if reverse else [])
        args += ["--exclude=tests/*"] if code_only else []
        try:
            self.tree.git(*args, str(patch), env=self.env)
        except git.GitCommandError as exc:
            return (exc.stderr or str(exc)).strip()
        return None

    def read(self, path: str) -> str | None:
        try:
            return self.tree.git("show", f":{path}", env=self.env) + "\n"
        except git.GitCommandError:
            return None


def _where(error: str) -> str:
    match = re.search(r"patch failed: (\S+:\d+)", error) or re.search(
        r"error: (\S+): (?:does not exist in index|already exists in index)", error
    )
    return match.group(1) if match else error.splitlines()[-1] if error else "?"


def _cell_for_foreign(
    index: _ScratchIndex,
    patch: Patch,
    pin: str,
    ports: dict[str, str] | None = None,
    claim: Search | None = None,
) -> Cell:
    """State of `patch` (from another pin's series) on `pin`; `ports` maps the subjects of
    `pin`'s own series to their patch names; `claim` is the code check of its trailer."""
    if ports and patch.subject in ports:
        return Cell("ported", f"as {pin}/{ports[patch.subject]}")
    if index.apply(patch.path) is None:
        return Cell("applies")
    if index.apply(patch.path, reverse=True) is None:
        return Cell("upstream", f"(merged-in {patch.merged_in})" if patch.merged_in else "")
    state = "merged-in" if patch.merged_in else "obsolete" if patch.obsolete_in else ""
    claimed = patch.merged_in or patch.obsolete_in
    first = claim.first if claim and claim.first else claimed
    if state and version_key(pin) >= version_key(first):
        if claim is None:
            return Cell(state, f"{first} (trailer; code not checked)")
        if not claim.first:
            return Cell(state, f"{first} (trailer; not found in code)")
        flag = "" if claim.agrees else f" (trailer says {claimed}) !"
        return Cell(state, f"{first}{flag}")
    code_error = index.apply(patch.path, code_only=True)
    if code_error is None:
        return Cell("code-only", f"tests conflict {_where(index.apply(patch.path) or '')}")
    return Cell("conflicts", _where(code_error))


def _blob_reader(tree: BuildTree) -> Callable[[str], str | None]:
    def read(sha: str) -> str | None:
        try:
            return tree.git("cat-file", "blob", sha) + "\n"
        except (git.GitCommandError, ValueError):
            return None

    return read


def _claims(
    series: dict[str, list[Patch]],
    trees: dict[str, BuildTree],
    files: ReleaseFiles,
    all_releases: list[str],
    up_to: str,
) -> dict[tuple[str, str], Search]:
    """The code check of every merged-in / obsolete trailer."""
    found = {}
    for pin, patches in series.items():
        for patch in patches:
            claimed = patch.merged_in or patch.obsolete_in
            if not claimed:
                continue
            change = Change.of(patch, _blob_reader(trees[pin]))
            candidates = upstream_code.between(all_releases, pin, up_to)
            found[(pin, patch.name)] = upstream_code.first_containing(
                change, pin, claimed, candidates, files
            )
    return found


def _advisories(
    series: dict[str, list[Patch]],
    trees: dict[str, BuildTree],
    patched: dict[str, _ScratchIndex],
) -> list[Advisory]:
    """Per advisory named by a Fixes: trailer, per pin: fixed upstream, carried, or missing."""
    by_advisory: dict[str, list[tuple[str, Patch]]] = {}
    for pin, patches in series.items():
        for patch in patches:
            for advisory in patch.trailers.get("Fixes", "").replace(",", " ").split():
                by_advisory.setdefault(advisory, []).append((pin, patch))
    out = []
    for advisory, carriers in sorted(by_advisory.items()):
        origin, patch = carriers[-1]
        change = Change.of(patch, _blob_reader(trees[origin]))
        entry = Advisory(advisory, [f"{pin}/{p.name[:4]}" for pin, p in carriers])
        for pin, tree in trees.items():
            pristine = change.probe(pin, lambda p, t=tree: _read_pristine(t, p))
            after = change.probe(pin, patched[pin].read)
            carrier = next((f"{pin}/{p.name[:4]}" for q, p in carriers if q == pin), "")
            if pristine.contains:
                state, detail = "fixed upstream", "pristine code has the fix"
            elif pristine.method == "missing":
                state, detail = "not affected", pristine.detail
            elif after.contains:
                state, detail = "carried", carrier or "the series' code has the fix"
            else:
                state, detail = "missing fix", "pristine code has the flaw; the series lacks it"
            entry.pins[pin] = {
                "state": state,
                "detail": detail,
                "pristine": asdict(pristine),
                "patched": asdict(after),
            }
        out.append(entry)
    return out


def _read_pristine(tree: BuildTree, path: str) -> str | None:
    data = tree.read_bytes(BASELINE_TAG, path)
    return data.decode() if data is not None else None


def compute(
    pins: tuple[str, ...] = PINNED,
    build_root: Path | None = None,
    patches_root: Path | None = None,
    *,
    check_code: bool = True,
    release_files: ReleaseFiles | None = None,
    release_list: list[str] | None = None,
) -> Status:
    """The status table. Creates missing pristine build trees; never changes their HEADs.

    With `check_code`, merged-in / obsolete trailers are checked against the releases after
    the patch's pin up to the newest pin (sdists fetched on demand, cached)."""
    trees = {pin: BuildTree(pin, build_root, patches_root) for pin in pins}
    series = {pin: read_series(pin, patches_root) for pin in pins}
    for tree in trees.values():
        tree.ensure_baseline()
    claims: dict[tuple[str, str], Search] = {}
    if check_code:
        files = release_files or ReleaseFiles()
        try:
            listing = release_list if release_list is not None else upstream_code.releases()
            claims = _claims(series, trees, files, listing, max(pins, key=version_key))
        except (PatchbenchError, OSError) as exc:  # no index and no cache: say so, go on
            say(f"warning: merged-in / obsolete claims not checked in code: {exc}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        in_series: dict[tuple[str, str], Cell] = {}
        patched: dict[str, _ScratchIndex] = {}
        for pin, patches in series.items():
            index = patched[pin] = _ScratchIndex(trees[pin], Path(tmp), "-series")
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
                claim = claims.get((origin, patch.name))
                cells = {}
                for pin in pins:
                    if pin == origin:
                        cells[pin] = in_series[(pin, patch.name)]
                    else:
                        index = _ScratchIndex(trees[pin], Path(tmp))
                        cells[pin] = _cell_for_foreign(index, patch, pin, ports[pin], claim)
                rows.append(
                    Row(
                        origin, patch.name, patch.subject, patch.status, cells,
                        fixes=patch.trailers.get("Fixes", ""),
                        claim=claim.to_json() if claim else None,
                    )
                )  # fmt: skip
        advisories = _advisories(series, trees, patched) if check_code else []
    hashes = {pin: series_hash(pin, patches_root) for pin in pins}
    deps = {pin: dependencies.of_series(pin, build_root, patches_root) for pin in pins}
    return Status(rows, advisories, tuple(pins), hashes, deps)


def drift_of(
    status: Status,
    listing: list[str],
    build_root: Path | None = None,
    patches_root: Path | None = None,
    files: ReleaseFiles | None = None,
) -> list:
    """`verify.drift` of every series of `status` over `listing` (status.drift_up_to is set)."""
    series = {pin: read_series(pin, patches_root) for pin in status.pins}
    trees = {pin: BuildTree(pin, build_root, patches_root) for pin in status.pins}
    status.drift_up_to = listing[-1] if listing else ""
    return drift_mod.compute(series, trees, listing, files)


def _table(header: list[str], body: list[list[str]], last_flexible: int) -> list[str]:
    """Fixed-width columns; column `last_flexible` is cut so each line fits WIDTH."""
    table = [header, *body]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    room = WIDTH - (sum(widths) - widths[last_flexible]) - 2 * (len(header) - 1)
    widths[last_flexible] = max(10, min(widths[last_flexible], room))

    def fit(text: str, w: int) -> str:
        return text if len(text) <= w else text[: w - 1] + "~"

    lines = [
        "  ".join(fit(c, w).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def render(status: Status | list[Row], pins: tuple[str, ...] = PINNED) -> str:
    """A plain-text report that fits 120 columns: the table, conflicts, claims, advisories."""
    rows = status.rows if isinstance(status, Status) else list(status)
    body = [[r.ident, r.subject, *(r.cells[p].short() for p in pins)] for r in rows]
    lines = _table(["patch", "subject", *pins], body, 1)
    if not rows:
        lines.append("(no patches in any series)")
    notes = [
        f"{r.ident} on {pin}: {c.text()}"
        for r in rows
        for pin, c in r.cells.items()
        if c.state in ("conflicts", "code-only")
    ]
    if notes:
        lines += ["", "Conflicts:", *(f"  {n}" for n in notes)]
    claims = [r for r in rows if r.claim]
    if claims:
        lines += ["", "Claims checked against released code:"]
        for r in claims:
            c = r.claim
            kind = "merged-in" if r.status.startswith("merged-in") else "Obsolete-in"
            found = c["first_containing"] or f"none up to {c['searched_up_to']}"
            mark = "ok" if c["agrees"] else "DISAGREES"
            probed = ", ".join(f"{p['version']}:{'yn'[not p['contains']]}" for p in c["probes"])
            text = f"{r.ident} {kind} {c['claimed']}: first containing {found} [{mark}] ({probed})"
            lines += textwrap.wrap(text, WIDTH - 2, initial_indent="  ", subsequent_indent="    ")
    advisories = status.advisories if isinstance(status, Status) else []
    for adv in advisories:
        lines += ["", f"Advisory {adv.advisory} (fixed by {', '.join(adv.patches)}):"]
        for pin, v in adv.pins.items():
            lines.append(f"  {pin}: {v['state']} ({v['detail']})"[:WIDTH])
        if adv.missing:
            lines.append(f"  MISSING on {', '.join(adv.missing)}: carry the fix or record why not")
    if isinstance(status, Status) and status.drift:
        lines += ["", *drift_mod.render(status.drift, status.drift_up_to)]
    deps = status.dependencies if isinstance(status, Status) else {}
    if any(deps.values()):
        lines += [""]
        for line in dependencies.render(deps):
            lines += textwrap.wrap(line, WIDTH, subsequent_indent="    ")
    lines += ["", "Legend:", *(f"  {line}" for line in LEGEND.splitlines())]
    return "\n".join(lines)


def write_json(status: Status | list[Row], path: Path) -> bool:
    """Write the table's JSON to `path`; False (nothing written) when the file already says the
    same apart from its ``generated`` timestamp, so a read-only run changes nothing tracked."""
    rows = status.rows if isinstance(status, Status) else list(status)
    data = [dict(asdict(r), cells={p: asdict(c) for p, c in r.cells.items()}) for r in rows]
    payload = {
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "pins": list(rows[0].cells) if rows else [],
        "series_hash": status.hashes if isinstance(status, Status) else {},
        "rows": data,
        "advisories": [asdict(a) for a in status.advisories] if isinstance(status, Status) else [],
        "drift": [asdict(d) for d in status.drift] if isinstance(status, Status) else [],
        "dependencies": {
            pin: {d.patch: d.text() for d in deps}
            for pin, deps in (status.dependencies if isinstance(status, Status) else {}).items()
        },
    }
    if _content(path) == json.loads(json.dumps(dict(payload, generated=None))):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)
    return True


def _content(path: Path) -> dict | None:
    """The JSON at `path` without its timestamp (None if absent or unreadable)."""
    try:
        return dict(json.loads(path.read_text()), generated=None)
    except (OSError, ValueError, TypeError):
        return None
