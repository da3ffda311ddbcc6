"""Port a pin's series to another release: `python -m verify port <from-pin> <to-version>`.

The release's sdist becomes its build tree (`build/<to>/`), and the source pin's patches are
carried over one by one, each with one of these outcomes:

- ``clean``: applies as is (hunks found at another line are named);
- ``3-way``: applies only with a 3-way merge (the hunks that moved or changed are named);
- ``absorbed``: the release already has it (it reverse-applies, the 3-way merge leaves nothing,
  or in every function it touches its added lines are there and its removed lines gone, as
  `verify.upstream_code` decides); dropped, with that evidence and the first release that has it;
- ``replayed``: conflicted, and a recorded resolution (git rerere) resolved it;
- ``resolved``: conflicted; a person resolved it and ran ``port --continue``;
- ``dropped``: conflicted; a person dropped it (``git am --skip``) and ran ``port --continue``.

A conflict stops the port in git's own state (``git am`` in progress in the build tree) and says
which files conflict and what to run next. ``port --continue`` takes the resolution; ``port
--abort`` puts the tree and ``patches/<to>/`` back as they were before the port. An interruption
(Ctrl-C, SIGTERM) undoes only the patch being applied, so ``--continue`` resumes there.
Resolutions are recorded by git rerere and kept with the new series (``patches/<to>/rr-cache/``),
so porting the same pair again replays them. Edits no resolution holds (rerere replays only
conflicted hunks; a name the release changed inside a hunk that merged cleanly is not one) are
kept as ``patches/<to>/port-fixes/<patch name without its number>.diff`` and amend that patch
each time the port carries it by itself. At the end the series is exported and checked and a
port report is written (`verify.port_report`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verify import claims, dependencies, gitverbs, upstream_code
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.errors import PatchbenchError
from verify.progress import say
from verify.series import Patch, parse_patch, read_series
from verify.versions import version_key

STATE = "patchbench-port"
SOURCE_REF = "refs/patchbench/port-source/{pin}"
RR_CACHE = "rr-cache"


@dataclass
class Outcome:
    """What happened to one source patch."""

    patch: str  # the source patch's file name
    subject: str
    outcome: str  # clean 3-way absorbed replayed resolved dropped
    detail: str = ""
    hunks: list[str] = field(default_factory=list)
    commit: str = ""  # the new commit (none when dropped)
    source_commit: str = ""
    absorbed_in: str = ""
    trailer: str = ""  # the trailer the source patch takes where absorbed
    files: list[str] = field(default_factory=list)


@dataclass
class PortState:
    """A port in progress, kept in `<to tree>/.git/patchbench-port/state.json`."""

    source: str
    target: str
    orig_head: str
    names: list[str]
    source_commits: list[str] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)
    phase: str = "start"  # start carry conflict finish
    conflict_head: str = ""
    had_series: bool = False

    @property
    def next(self) -> int:
        return len(self.outcomes)


# -- the state folder -----------------------------------------------------------------------------
#: Edits made after a port, kept with the new series and applied every time it is ported again.
PORT_FIXES = "port-fixes"


def state_dir(tree: BuildTree) -> Path:
    return tree.path / ".git" / STATE


def load(tree: BuildTree) -> PortState | None:
    try:
        return PortState(**json.loads((state_dir(tree) / "state.json").read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise PatchbenchError(
            f"{state_dir(tree)}/state.json is damaged ({exc}); run `python -m verify port "
            f"--abort {tree.version}` to restore the tree from its backup branch"
        ) from exc


def save(tree: BuildTree, state: PortState) -> None:
    path = state_dir(tree) / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1) + "\n")
    os.replace(tmp, path)


def in_progress(build_root: Path) -> list[str]:
    """Versions whose build tree holds a port in progress."""
    return sorted(p.parents[2].name for p in build_root.glob(f"*/.git/{STATE}/state.json"))


def _source_patch(tree: BuildTree, name: str) -> Path:
    return state_dir(tree) / "source" / name


# -- starting -------------------------------------------------------------------------------------
def start(source: BuildTree, target: BuildTree, replace: bool = False) -> PortState:
    """Check that the port can start, keep what it will change, and make its state; nothing in
    the target tree or `patches/<to>/` changes before the state is written."""
    patches = read_series(source.version, source.patches_root)
    if not patches:
        raise PatchbenchError(f"patches/{source.version}/ has no patches: there is nothing to port")
    if source.version == target.version:
        raise PatchbenchError(f"port {source.version} {target.version}: the versions are the same")
    source.ensure_baseline()
    target.ensure_baseline()
    if load(target) is not None:
        raise PatchbenchError(
            f"a port into vLLM {target.version} is in progress in {target.path}: finish it with "
            f"`python -m verify port --continue {target.version}` or undo it with `--abort`"
        )
    if target.am_in_progress():
        raise PatchbenchError(f"a `git am` is in progress in {target.path}; finish or abort it")
    target.require_clean()
    existing = sorted(target.series_path.glob("*.patch")) if target.series_path.is_dir() else []
    if existing and not replace:
        raise PatchbenchError(
            f"{target.series_path}/ already holds {len(existing)} patch(es); nothing was changed. "
            f"Port again over them with `--replace` (`--abort` puts them back)"
        )
    folder = state_dir(target)
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "source").mkdir(parents=True)
    for patch in patches:
        shutil.copyfile(patch.path, folder / "source" / patch.name)
    if target.series_path.is_dir():
        shutil.copytree(target.series_path, folder / "previous")
    state = PortState(
        source.version, target.version, target.head(), [p.name for p in patches],
        had_series=target.series_path.is_dir(),
    )  # fmt: skip
    save(target, state)
    return state


def _prepare(source: BuildTree, target: BuildTree, state: PortState) -> None:
    """Source commits into the target (3-way merges and range-diffs need their blobs), rerere
    on with the new series' recorded resolutions, the target at its pristine commit."""
    if target.head() != target.baseline():
        target._backup(f"port {state.source} -> {state.target}")
    ref = SOURCE_REF.format(pin=state.source)
    say(f"commits of patches/{state.source}/ on its pristine release (for 3-way merges)")
    files = [_source_patch(target, name) for name in state.names]
    commits = gitverbs.commit_series(source, BASELINE_TAG, files)
    gitverbs.update_ref(source, ref, commits[-1])
    gitverbs.fetch(target, source.path, ref)
    state.source_commits = commits
    gitverbs.rerere_enable(target)
    kept = target.series_path / RR_CACHE
    count = gitverbs.copy_rerere(kept, gitverbs.rerere_cache(target))
    if count:
        say(f"{count} recorded resolution(s) from {kept} will be replayed")
    gitverbs.reset_hard(target, BASELINE_TAG)
    state.phase = "carry"
    save(target, state)


# -- one patch ------------------------------------------------------------------------------------
def carry_one(target: BuildTree, state: PortState, releases: Callable[[], list[str]]) -> Outcome:
    """Carry the next source patch onto the target's HEAD. A conflict returns the outcome
    ``conflict`` with `git am` left in progress."""
    name = state.names[state.next]
    path = _source_patch(target, name)
    patch = parse_patch(path)
    base = Outcome(name, patch.subject, "", source_commit=state.source_commits[state.next])
    before = target.head()
    if _claims_absorbed(patch, target.version):  # its trailer says so: the code must agree
        probe = _probe(target, patch)
        if probe is not None and probe.contains:
            return _absorbed(target, base, patch, _evidence(probe), releases)
    check = gitverbs.apply_check(target, path)
    if check.ok:
        _am_or_fail(target, path)
        return _done(target, base, "clean", hunks=gitverbs.hunk_offsets(check.output))
    if gitverbs.apply_check(target, path, reverse=True).ok:
        return _absorbed(target, base, patch, "the patch reverse-applies: the release has "
                         "exactly this change", releases)  # fmt: skip
    result = gitverbs.am(target, path)
    if result.ok:
        if target.head() == before:
            return _absorbed(target, base, patch, "the 3-way merge leaves no change: the "
                             "release already has it", releases)  # fmt: skip
        return _done(target, base, "3-way", hunks=moved_hunks(path.read_text(), target))
    files = gitverbs.unmerged_files(target)
    if not files and gitverbs.staged_changes(target):
        gitverbs.am_continue(target)  # every conflict resolved by a recorded resolution
        return _done(target, base, "replayed", detail="recorded resolution (git rerere)",
                     hunks=moved_hunks(path.read_text(), target))  # fmt: skip
    probe = _probe(target, patch, at=before)
    if probe is not None and probe.contains:
        gitverbs.am_abort(target)
        gitverbs.reset_hard(target, before)
        return _absorbed(target, base, patch, _evidence(probe), releases)
    base.outcome, base.files = "conflict", files or _patch_files(patch)
    base.detail = result.output.splitlines()[-1] if result.output else ""
    return base


def _claims_absorbed(patch: Patch, version: str) -> bool:
    claimed = patch.merged_in or patch.obsolete_in
    return bool(claimed) and version_key(claimed) <= version_key(version)


def _evidence(probe: upstream_code.Probe) -> str:
    how = {
        "marker": "the registered code marker (verify/upstream_code.py:MARKERS) finds upstream's "
        "form in",
        "lines": "in the functions it touches, its added lines are there and its removed lines "
        "gone:",
        "reverse-applies": "its code hunks reverse-apply:",
    }.get(probe.method, f"{probe.method}:")
    return f"{how} {probe.detail or 'the release has the change'}".strip()


def _am_or_fail(target: BuildTree, path: Path) -> None:
    result = gitverbs.am(target, path)
    if not result.ok:
        raise PatchbenchError(f"{path.name}: `git apply --check` passed but `git am` failed: "
                              f"{result.output[-300:]}")  # fmt: skip


def _done(target: BuildTree, base: Outcome, outcome: str, detail: str = "",
          hunks: list[str] | None = None) -> Outcome:  # fmt: skip
    base.outcome, base.detail, base.hunks = outcome, detail, hunks or []
    base.commit = target.head()
    return base


def _patch_files(patch: Patch) -> list[str]:
    return list(patch.files)


def _probe(target: BuildTree, patch: Patch, at: str = "HEAD") -> upstream_code.Probe | None:
    """The status machinery's check (`upstream_code.Change.probe`: marker, reverse-apply, then
    the lines of the touched functions) of `patch` on the target's commit `at`."""

    def head_file(path: str) -> str | None:
        data = target.read_bytes(at, path)
        return data.decode(errors="replace") if data is not None else None

    try:
        change = upstream_code.Change.of(patch, _blob(target))
        if not change.files:
            return None
        return change.probe(target.version, head_file)
    except (OSError, ValueError):
        return None


def _blob(target: BuildTree) -> Callable[[str], str | None]:
    def read(sha: str) -> str | None:
        result = gitverbs._run(target, "cat-file", "blob", sha)
        return result.output + "\n" if result.ok else None

    return read


def _absorbed(target: BuildTree, base: Outcome, patch: Patch, evidence: str,
              releases: Callable[[], list[str]]) -> Outcome:  # fmt: skip
    """Dropped: the release has the change. Names the first release with it."""
    base.outcome, base.detail = "absorbed", evidence
    first, note = first_release(target, patch, releases)
    base.absorbed_in = first
    claimed = patch.merged_in or patch.obsolete_in
    kind = ("Status: merged-in" if patch.merged_in or (not patch.obsolete_in
            and patch.upstream != "none") else "Obsolete-in")  # fmt: skip
    base.trailer = f"{kind} {first}"
    if claimed and claimed != first:
        note += f"; its trailer names {claimed}"
    base.detail += f" (first release with it: {first}{note})"
    return base


def first_release(target: BuildTree, patch: Patch, releases: Callable[[], list[str]]) -> tuple:
    """(the first release after the source pin up to the target whose code has `patch`'s
    change, a note on how sure that is)."""
    state = load(target)
    origin = state.source if state else target.version
    try:
        listing = releases()
    except (PatchbenchError, OSError) as exc:
        return target.version, f"; not searched before it: the release list is unavailable ({exc})"
    candidates = upstream_code.between(listing, origin, target.version)
    if target.version not in candidates:
        candidates.append(target.version)
    files = upstream_code.ReleaseFiles(target._fetch_sdist)
    try:
        change = upstream_code.Change.of(patch, _blob(target))
        search = upstream_code.first_containing(change, origin,
                                                None, candidates[:-1], files)  # fmt: skip
    except (PatchbenchError, OSError) as exc:
        return target.version, f"; earlier releases not searched ({exc})"
    return search.first or target.version, ""


def moved_hunks(source_text: str, target: BuildTree) -> list[str]:
    """How the hunks of the new commit differ from the source patch's: moved (another line)
    or changed (other lines)."""
    old, new = _hunks(source_text), _hunks(gitverbs.show_diff(target, "HEAD"))
    out = []
    for (path, start, body), (_, at, new_body) in zip(old, new, strict=False):
        parts = []
        if at != start:
            parts.append(f"moved from line {start} to {at} ({at - start:+d})")
        if [x for x in body if x[0] in "+-"] != [x for x in new_body if x[0] in "+-"]:
            parts.append("its changed lines differ (merged)")
        elif body != new_body:
            parts.append("its context differs")
        if parts:
            out.append(f"{path} hunk at line {start}: {', '.join(parts)}")
    if len(old) != len(new):
        out.append(f"{len(old)} hunk(s) in the source patch, {len(new)} in the port")
    return out


def _hunks(text: str) -> list[tuple[str, int, list[str]]]:
    found: list[tuple[str, int, list[str]]] = []
    path = "?"
    for line in text.splitlines():
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[-1]
        elif line.startswith("@@ "):
            start = int(line.split()[1].lstrip("-").split(",")[0])
            found.append((path, start, []))
        elif found and line[:1] in (" ", "+", "-") and not line.startswith(("+++", "---")):
            found[-1][2].append(line)
    return found


# -- the whole port -------------------------------------------------------------------------------
def run(source: BuildTree, target: BuildTree, state: PortState,
        releases: Callable[[], list[str]]) -> int:  # fmt: skip
    """Carry the remaining patches; 0 when the port finished, 1 at a conflict. An interruption
    undoes only the patch being applied and re-raises."""
    try:
        if state.phase == "start":
            _prepare(source, target, state)
        while state.next < len(state.names) and state.phase == "carry":
            say(f"[{state.next + 1}/{len(state.names)}] {state.names[state.next]}")
            before = target.head()
            outcome = carry_one(target, state, releases)
            if outcome.outcome == "conflict":
                state.phase, state.conflict_head = "conflict", before
                save(target, state)
                _save_pending(target, outcome)
                print(conflict_message(target, outcome))
                return 1
            if outcome.commit:
                apply_port_fix(target, outcome)
            _compare_previous(target, outcome)
            _record(target, state, outcome)
        return finish(source, target, state)
    except BaseException as exc:
        _settle(target, state, interrupted=not isinstance(exc, Exception))
        raise


def port_fix(target: BuildTree, name: str) -> Path | None:
    """`patches/<to>/port-fixes/<name without its number>.diff`, if there: an edit the carried
    patch needs on the new release that no recorded resolution holds (git rerere replays only
    conflicted hunks: a name the release changed inside a hunk that merged cleanly is not)."""
    path = target.series_path / PORT_FIXES / f"{re.sub(r'^[0-9]{4}-', '', Path(name).stem)}.diff"
    return path if path.is_file() else None


def apply_port_fix(target: BuildTree, outcome: Outcome) -> None:
    """Amend a patch the port carried by itself (clean, 3-way, replayed) with its port fix."""
    fix = port_fix(target, outcome.patch)
    if fix is None:
        return
    applied = gitverbs.apply_index(target, fix)
    if not applied.ok:
        raise PatchbenchError(
            f"{fix}: this port fix no longer applies on {outcome.patch} as carried "
            f"({applied.output.strip()[-300:]}); edit or delete it, then `python -m verify port "
            f"--abort {target.version}` and port again"
        )
    gitverbs.commit_amend(target)
    outcome.commit = target.head()
    outcome.detail = "; ".join(filter(None, [outcome.detail, f"port fix {fix.name}"]))


def _record(target: BuildTree, state: PortState, outcome: Outcome) -> None:
    state.outcomes.append(asdict(outcome))
    save(target, state)
    moved = f"; {len(outcome.hunks)} hunk(s) moved" if outcome.hunks else ""
    say(f"  {outcome.outcome}{': ' + outcome.detail if outcome.detail else ''}{moved}")


def _compare_previous(target: BuildTree, outcome: Outcome) -> None:
    """With `--replace`: say when a carried patch differs from the previous series' patch of
    the same subject (rerere replays only conflicted hunks; edits made after that port, or a
    changed source patch, show here): `range-diff --rev` shows how."""
    previous = state_dir(target) / "previous"
    if not outcome.commit or not (previous / "series").exists():
        return
    for path in sorted(previous.glob("*.patch")):
        if parse_patch(path).subject != outcome.subject:
            continue
        if gitverbs.patch_id(target, path.read_text()) != gitverbs.patch_id(
            target, gitverbs.show_diff(target, outcome.commit)
        ):
            outcome.detail = "; ".join(filter(None, [outcome.detail, f"its diff differs from "
                                                     f"the previous {path.name}"]))  # fmt: skip
        return


def _save_pending(target: BuildTree, outcome: Outcome) -> None:
    (state_dir(target) / "pending.json").write_text(json.dumps(asdict(outcome)) + "\n")


def _pending(target: BuildTree) -> Outcome:
    return Outcome(**json.loads((state_dir(target) / "pending.json").read_text()))


def _settle(target: BuildTree, state: PortState, interrupted: bool) -> None:
    """After an interruption while carrying: undo the patch in flight (not a conflict a person
    is resolving), so the tree is at the last carried patch and `--continue` resumes."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if state.phase == "carry":
            if target.am_in_progress():
                gitverbs.am_abort(target)
            done = [o["commit"] for o in state.outcomes if o["commit"]]
            gitverbs.reset_hard(target, done[-1] if done else BASELINE_TAG)
        save(target, state)
        why = "interrupted" if interrupted else "stopped by the error below"
        say(f"port {state.source} -> {state.target} {why} at patch {state.next + 1} of "
            f"{len(state.names)}; nothing is lost: `python -m verify port --continue "
            f"{state.target}` resumes, `--abort` restores the state before the port")  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)


def conflict_message(target: BuildTree, outcome: Outcome) -> str:
    files = "\n".join(f"    {target.path / f}" for f in outcome.files)
    return (
        f"port: {outcome.patch} conflicts with vLLM {target.version} in:\n{files}\n"
        f"`git am` is stopped at it in {target.path} (`git -C {target.path} am "
        "--show-current-patch=diff` shows the patch). Resolve the files, `git add` them, then "
        f"run `python -m verify port --continue {target.version}`. To drop the patch: `git -C "
        f"{target.path} am --skip`, then `--continue`. To undo the whole port: `python -m verify "
        f"port --abort {target.version}`"
    )


def resume(source: BuildTree, target: BuildTree, releases: Callable[[], list[str]]) -> int:
    """`port --continue`: take the person's resolution of the stopped patch, then carry on."""
    state = _require_state(target)
    if state.phase == "conflict":
        outcome = _pending(target)
        if target.am_in_progress():
            left = gitverbs.unmerged_files(target)
            if left:
                raise PatchbenchError(
                    f"still conflicted in {target.path}: {', '.join(left)}; resolve and `git add` "
                    "them, then run --continue again (nothing was changed)"
                )
            if not gitverbs.staged_changes(target):
                raise PatchbenchError(
                    f"the resolution of {outcome.patch} changes nothing; to drop the patch run "
                    f"`git -C {target.path} am --skip`, then --continue (nothing was changed)"
                )
            gitverbs.rerere(target)
            result = gitverbs.am_continue(target)
            if not result.ok:
                raise PatchbenchError(f"`git am --continue` failed: {result.output[-300:]}")
        resolved = target.head() != state.conflict_head
        outcome.outcome = "resolved" if resolved else "dropped"
        outcome.commit = target.head() if resolved else ""
        outcome.detail = "resolved by hand" if resolved else "dropped by hand (git am --skip)"
        if resolved:
            outcome.hunks = moved_hunks(_source_patch(target, outcome.patch).read_text(), target)
        state.phase = "carry"
        _record(target, state, outcome)
    return run(source, target, state, releases)


def abort(target: BuildTree) -> None:
    """`port --abort`: the tree at its HEAD before the port, `patches/<to>/` as it was; the
    resolutions made so far stay recorded (git rerere) for the next port."""
    state = _require_state(target)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if target.am_in_progress():
            gitverbs.rerere(target)
            gitverbs.am_abort(target)
        gitverbs.reset_hard(target, state.orig_head)
        kept = state_dir(target) / "previous"
        series = target.series_path
        if series.exists():
            shutil.rmtree(series)
        if kept.is_dir():
            shutil.copytree(kept, series)
        shutil.rmtree(state_dir(target))
    finally:
        signal.signal(signal.SIGINT, previous)
    say(f"port into vLLM {target.version} aborted: {target.path} is back at "
        f"{state.orig_head[:12]} and {series} as it was before the port")  # fmt: skip


def _require_state(target: BuildTree) -> PortState:
    state = load(target)
    if state is None:
        raise PatchbenchError(f"no port into vLLM {target.version} is in progress in {target.path}")
    return state


def finish(source: BuildTree, target: BuildTree, state: PortState) -> int:
    """Export and check the new series, keep the recorded resolutions beside it, write the
    port report; 0 when the export checks out."""
    from verify import port_report

    state.phase = "finish"
    save(target, state)
    target.series_path.mkdir(parents=True, exist_ok=True)
    for stale in target.series_path.glob("*.patch"):
        stale.unlink()
    target.export(force=True)
    kept = target.series_path / RR_CACHE
    shutil.rmtree(kept, ignore_errors=True)
    count = gitverbs.copy_rerere(gitverbs.rerere_cache(target), kept)
    result = target.check()
    problems = list(result.differences)
    problems += claims.check_series(
        target.version, read_series(target.version, target.patches_root)
    )
    outcomes = [Outcome(**o) for o in state.outcomes]
    deps = dependencies.of_series(target.version, target.path.parent, target.patches_root)
    report = port_report.write(target, state, outcomes, problems, count, deps)
    shutil.rmtree(state_dir(target))
    print(port_report.summary(state, outcomes))
    say(
        f"exported {target.series_path}/ ({sum(1 for o in outcomes if o.commit)} patch(es)"
        f"{f', {count} recorded resolution(s) in {kept}' if count else ''}); report: {report}"
    )
    for line in problems:
        print(f"port: {line}")
    return 1 if problems else 0
