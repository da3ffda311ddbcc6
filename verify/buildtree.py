"""Build trees: `build/<version>/` is a git repo whose first commit is the pristine release
(tagged ``pristine``) with the version's patch series applied on top by ``git am``.

Round trip: ``apply`` (patch files -> commits) then ``export`` (commits -> patch files) is
byte-identical, because export uses fixed ``git format-patch`` options that ignore user config.

Every apply and export records what the tree was last in step with: a sha256 of each file of
`patches/<version>/` (``.git/patchbench-applied.json``). So a patch file changed afterwards (a
hand edit, a pull) is named as such: apply takes it into the tree, and export refuses to
overwrite it. Commits the tool replaces are kept on a ``patchbench-backup/...`` branch.

Only the baseline (pristine) commit uses the tool's fixed identity; patches keep their authors
and commits made by hand in the tree use the contributor's own git identity.
"""

from __future__ import annotations

import calendar
import contextlib
import filecmp
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from verify import locks, paths, sdist
from verify.am_failure import failure_details
from verify.errors import ApplyError, PatchbenchError
from verify.git_setup import (
    AM_OPTS,
    BASELINE_DATE,
    CONFIG_OVERRIDES,
    FORMAT_PATCH_OPTS,
    IDENTITY,
    git_env,
    has_identity,
)
from verify.progress import say
from verify.series import (
    Patch,
    parse_patch,
    read_series,
    series_dir,
    series_hash,
    write_series,
)

STAMP = "patchbench-applied.json"
BACKUP_PREFIX = "patchbench-backup"
_BACKUP_NAME = re.compile(r"(\d{8}T\d{6})(?:-(\d+))?")

BASELINE_TAG = "pristine"


def build_root() -> Path:
    return paths.build_root()


@dataclass
class CheckResult:
    """Differences between `patches/<version>/` and what the build tree exports."""

    differences: list[str]

    @property
    def ok(self) -> bool:
        return not self.differences


def _locked(method: Callable) -> Callable:
    """Run a BuildTree method under its pin's lock (`BuildTree.lock`)."""

    @functools.wraps(method)
    def locked(self: BuildTree, *args, **kwargs):
        with self.lock():
            return method(self, *args, **kwargs)

    return locked


class BuildTree:
    """The build tree of one pinned version."""

    def __init__(
        self,
        version: str,
        root: Path | None = None,
        patches_root: Path | None = None,
        fetch_sdist: Callable[[str], Path] = sdist.fetch,
    ):
        self.version = version
        self.path = (root or build_root()) / version
        self.patches_root = patches_root
        self._fetch_sdist = fetch_sdist

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def repo(self) -> git.Repo:
        return git.Repo(self.path)

    def git(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run git in the build tree (through gitpython)."""
        return self.repo.git.execute(["git", *args], env=env or git_env())

    @property
    def series_path(self) -> Path:
        return series_dir(self.version, self.patches_root)

    def exists(self) -> bool:
        return (self.path / ".git").is_dir()

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The pin's lock (`locks.pin_lock`), held by every method that changes the tree."""
        return locks.pin_lock(self.version, self.path.parent)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def baseline(self) -> str:
        return self.git("rev-parse", f"{BASELINE_TAG}^{{commit}}")

    # -- baseline ---------------------------------------------------------------------------
    @_locked
    def ensure_baseline(self) -> None:
        """Create the build tree from the pristine sdist if it does not exist yet.

        The tree is built in a temporary folder and renamed into place when complete, so an
        interrupted creation never leaves a half-made tree behind.
        """
        if self.exists():
            try:
                self.baseline()
            except git.GitCommandError as exc:
                raise PatchbenchError(
                    f"{self.path} is a git repo without the '{BASELINE_TAG}' tag, so it is not a "
                    "patchbench build tree (or it was damaged); move it away and run apply again"
                ) from exc
            return
        if self.path.exists():
            raise PatchbenchError(
                f"{self.path} exists but is not a build tree (no .git); move it away first"
            )
        paths.require_writable(self.path.parent, "PATCHBENCH_BUILD_DIR")
        left = paths.sweep_staging(self.path.parent, f".{self.version}")
        for path in left + _sweep_legacy_staging(self.path.parent, self.version):
            say(f"removed {path}, left behind by an interrupted run")
        tarball = self._fetch_sdist(self.version)
        with paths.staging(self.path.parent, f".{self.version}") as staging:
            tree = sdist.unpack(tarball, staging / "tree")
            self._commit_baseline(tree)
            os.replace(tree, self.path)

    def _commit_baseline(self, tree: Path) -> None:
        started = time.monotonic()
        repo = git.Repo.init(tree, initial_branch="main")
        env = git_env(identity=True)
        env.update(GIT_AUTHOR_DATE=BASELINE_DATE, GIT_COMMITTER_DATE=BASELINE_DATE)
        for key, value in (("core.autocrlf", "false"), ("core.fileMode", "true"), ("gc.auto", "0")):
            repo.git.config(key, value)
        count = sum(len(files) for _, _, files in os.walk(tree)) - sum(
            len(files) for _, _, files in os.walk(tree / ".git")
        )
        say(f"git add {count} files of vLLM {self.version} (baseline commit)")
        # -f: the sdist's own .gitignore files must not hide released files.
        repo.git.execute(["git", "add", "-A", "-f", "."], env=env)
        repo.git.execute(
            ["git", "commit", "-q", "--no-verify", "-m", f"vLLM {self.version} (pristine sdist)"],
            env=env,
        )
        repo.git.execute(["git", "tag", BASELINE_TAG], env=env)
        say(f"baseline of vLLM {self.version} committed in {time.monotonic() - started:.1f}s")

    # -- state checks -----------------------------------------------------------------------
    def am_in_progress(self) -> bool:
        return (self.path / ".git" / "rebase-apply").exists()

    def dirty_files(self) -> list[str]:
        out = self.git("status", "--porcelain", "--untracked-files=all")
        return [line[3:] for line in out.splitlines() if line.strip()]

    def require_clean(self) -> None:
        dirty = self.dirty_files()
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise PatchbenchError(
                f"build tree {self.path} has uncommitted changes ({shown}); nothing was touched. "
                "Commit them and run export to keep them, or discard them with "
                f"`git -C {self.path} reset --hard && git -C {self.path} clean -fd`"
            )

    def _require_writable(self) -> None:
        paths.require_writable(self.path / ".git", "PATCHBENCH_BUILD_DIR")

    def _forget_fixed_identity(self) -> None:
        """Trees made by older versions set the tool's identity in their config; drop it so
        the contributor's own identity signs their commits."""
        repo_config = self.path / ".git" / "config"
        if IDENTITY["GIT_AUTHOR_EMAIL"] in repo_config.read_text(errors="replace"):
            for key in ("user.name", "user.email"):
                try:
                    self.git("config", "--local", "--unset", key)
                except git.GitCommandError:
                    pass

    # -- what the tree was applied from ------------------------------------------------------
    @property
    def stamp_path(self) -> Path:
        return self.path / ".git" / STAMP

    def read_stamp(self) -> dict[str, dict[str, str]] | None:
        """What the tree was last in step with: {"files": {name: sha256} of
        `patches/<version>/`, "tree": the same of the tree's own export at that moment}."""
        try:
            data = json.loads(self.stamp_path.read_text())
            return {"files": dict(data["files"]), "tree": dict(data["tree"])}
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def _write_stamp(self, tree_state: dict[str, str] | None = None) -> None:
        data = {
            "version": self.version,
            "series_hash": series_hash(self.version, self.patches_root),
            "files": _folder_state(self.series_path),
            "tree": self._commits_state() if tree_state is None else tree_state,
        }
        tmp = self.stamp_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.stamp_path)

    def applied_series_hash(self) -> str | None:
        """`series_hash` of `patches/<version>/` when the tree was last in step with it (None
        if unknown): the hash records of a run on this tree should carry."""
        try:
            return json.loads(self.stamp_path.read_text()).get("series_hash")
        except (FileNotFoundError, ValueError):
            return None

    def changed_since_applied(self) -> list[str] | None:
        """Files of `patches/<version>/` changed, added or removed since the tree was last in
        step with it (None if the tree has no record, e.g. status made it pristine-only)."""
        stamp = self.read_stamp()
        if stamp is None:
            return None
        return _differing(stamp["files"], _folder_state(self.series_path))

    def _commits_state(self) -> dict[str, str]:
        with tempfile.TemporaryDirectory() as tmp:
            files = self._format_patch(Path(tmp))
            write_series(Path(tmp), [path.name for path in files])
            return _folder_state(Path(tmp))

    def _backup(self, why: str) -> str:
        """Keep the current commits on a new branch; returns its name."""
        branch = f"{BACKUP_PREFIX}/{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        existing = set(self.git("branch", "--list", f"{branch}*", "--format=%(refname:short)")
                       .split())  # fmt: skip
        name, n = branch, 1
        while name in existing:
            name, n = f"{branch}-{n}", n + 1
        self.git("branch", name, "HEAD")
        say(f"{why}: the tree's previous commits are kept on branch {name} "
            f"(`git -C {self.path} log {name}`)")  # fmt: skip
        return name

    def backups(self) -> list[tuple[str, float]]:
        """(branch, when it was made, epoch seconds) of the tree's backup branches, oldest
        first; branches whose names do not carry the time are left out (never pruned)."""
        out = self.git("branch", "--list", f"{BACKUP_PREFIX}/*", "--format=%(refname:short)")
        found = []
        for name in out.split():
            match = _BACKUP_NAME.fullmatch(name[len(BACKUP_PREFIX) + 1 :])
            if match:
                made = calendar.timegm(time.strptime(match[1], "%Y%m%dT%H%M%S"))
                found.append((int(match[2] or 0), made, name))
        return [(name, made) for _, made, name in sorted(found, key=lambda f: (f[1], f[0]))]

    @_locked
    def prune_backups(
        self, older_than_days: float, keep: int = 1, dry_run: bool = False
    ) -> tuple[list[str], list[str]]:
        """Delete the backup branches made more than `older_than_days` ago, always keeping the
        newest `keep` (1 or more); returns (deleted or, with `dry_run`, to delete; kept)."""
        if keep < 1:
            raise PatchbenchError(f"--keep {keep}: the newest backup is always kept; use 1 or more")
        if not self.exists():
            raise PatchbenchError(f"no build tree at {self.path}; there are no backups to prune")
        found = self.backups()
        cutoff = time.time() - older_than_days * 86400
        old = [name for name, made in found[: max(len(found) - keep, 0)] if made < cutoff]
        if not dry_run:
            for name in old:
                self.git("branch", "-D", name)
        return old, [name for name, _ in found if name not in old]

    # -- apply ------------------------------------------------------------------------------
    @_locked
    def apply(self, force: bool = False) -> list[Patch]:
        """Bring the build tree to pristine + series. Returns the applied patches.

        Patch files changed since the tree was applied from them are taken in (the replaced
        commits are kept on a backup branch). Refuses, touching nothing, when the tree has
        uncommitted edits or commits that are not in the series, unless `force` replaces those
        commits by the series (they are kept on a backup branch too).
        """
        patches = read_series(self.version, self.patches_root)
        self.ensure_baseline()
        self._require_writable()
        self._forget_fixed_identity()
        if self.am_in_progress():
            say("an interrupted `git am` was found; aborting it and re-applying the series")
            self.git("am", "--abort")
        self.require_clean()
        done = self._applied_prefix(patches, force)
        if done == len(patches):
            say(f"vLLM {self.version}: series already applied ({len(patches)} patches)")
            self._write_stamp()
            return patches
        if done:
            say(f"resuming: {done} of {len(patches)} patches are already applied")
        for index, patch in enumerate(patches[done:], start=done + 1):
            say(f"[{index}/{len(patches)}] git am {patch.name}")
            self._am_one(patch)
        self._write_stamp()
        return patches

    def _applied_prefix(self, patches: list[Patch], force: bool) -> int:
        """How many leading series patches the tree's commits already are; when the tree holds
        other commits, resets it to that prefix (if allowed) or refuses."""
        if self.head() == self.baseline():
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            exported = self._format_patch(Path(tmp))
            count = 0
            for path, patch in zip(exported, patches, strict=False):
                if path.read_bytes() != patch.path.read_bytes():
                    break
                count += 1
            if count == len(exported):
                return count
            write_series(Path(tmp), [path.name for path in exported])
            tree_state = _folder_state(Path(tmp))
        stamp = self.read_stamp()
        changed = self.changed_since_applied() or []
        tree_work = stamp is None or tree_state != stamp["tree"]
        extra = len(exported) - count
        if changed and not tree_work:
            self._backup(f"{self.series_path} changed since this tree was applied from it "
                         f"({_names(changed)}); re-applying from {patches[count].name}"
                         if count < len(patches) else "re-applying")  # fmt: skip
        elif force:
            self._backup(f"--force: replacing {extra} commit(s) that are not in the series")
        else:
            raise PatchbenchError(self._unexported_message(exported, count, changed, stamp))
        self.git("reset", "--hard", "-q", self._commit_after(count))
        return count

    def _commit_after(self, count: int) -> str:
        """The commit holding the first `count` patches (the baseline for 0)."""
        if count == 0:
            return BASELINE_TAG
        commits = self.git("rev-list", "--reverse", "--no-merges", f"{BASELINE_TAG}..HEAD")
        return commits.split()[count - 1]

    def _unexported_message(
        self, exported: list[Path], count: int, changed: list[str], stamp: dict | None
    ) -> str:
        """Why apply refused, and the commands that keep either side."""
        v, series = self.version, self.series_path
        head = (
            f"build tree {self.path} has {len(exported) - count} commit(s) after the first "
            f"{count} that are not in {series}/ (first: {exported[count].name}); nothing was "
            "touched."
        )
        if changed:
            return (
                f"{head} {series}/ also changed since the tree was applied from it "
                f"({_names(changed)}). Keep the tree's commits: `python -m verify export {v} "
                f"--force` (overwrites those files). Take the files instead: `python -m verify "
                f"apply {v} --force` (the tree's commits are kept on a {BACKUP_PREFIX}/ branch)"
            )
        if stamp is None:
            return (
                f"{head} The tree has no record of what it was applied from, so either it has "
                f"new commits (keep them: `python -m verify export {v}`) or the patch files "
                f"changed (take them: `python -m verify apply {v} --force`; the tree's commits "
                f"are kept on a {BACKUP_PREFIX}/ branch)"
            )
        return (
            f"{head} Keep them: run the export session (`nox -s export-{v}`). Replace them by "
            "the series: "
            f"`python -m verify apply {v} --force` (they are kept on a {BACKUP_PREFIX}/ branch)"
        )

    def _am_one(self, patch: Patch) -> None:
        env = git_env()
        if not has_identity(self.path, env):  # `git am` needs a committer; authors are kept
            env.update({k: v for k, v in IDENTITY.items() if k.startswith("GIT_COMMITTER")})
        try:
            self.git("am", *AM_OPTS, str(patch.path), env=env)
        except git.GitCommandError as exc:
            output = f"{exc.stdout or ''}\n{exc.stderr or ''}"
            try:
                self.git("am", "--abort")
            except git.GitCommandError:
                pass
            self.git("reset", "--hard", "-q", "HEAD")
            self.git("clean", "-fdq")
            try:  # a plain apply check names the failing file and hunk precisely
                self.git("apply", "--check", str(patch.path))
            except git.GitCommandError as check:
                output += f"\n{check.stderr or ''}"
            files, where = failure_details(output, patch)
            last = self.git("log", "-1", "--format=%s", "HEAD")
            raise ApplyError(
                f"{patch.name} does not apply to vLLM {self.version}: {where}. "
                f"The build tree was left at the last good commit ({last!r}); "
                "nothing is half-applied. Refresh the patch against this version.",
                patch.name,
                files,
            ) from exc

    # -- export / check ---------------------------------------------------------------------
    def _format_patch(self, out_dir: Path) -> list[Path]:
        out = self.git(
            *CONFIG_OVERRIDES, "format-patch", *FORMAT_PATCH_OPTS, "-o", str(out_dir),
            f"{BASELINE_TAG}..HEAD",
        )  # fmt: skip
        return [Path(line) for line in out.splitlines() if line.strip()]

    @_locked
    def export(self, force: bool = False) -> list[Patch]:
        """Regenerate `patches/<version>/` from the build tree's commits (validated first).

        Refuses, writing nothing, to delete every patch (a pristine-only tree) or to overwrite
        a patch file changed since the tree was applied from it, unless `force`.
        """
        if not self.exists():
            raise PatchbenchError(f"no build tree at {self.path}; run apply first")
        if self.am_in_progress():
            raise PatchbenchError(
                f"a `git am` is in progress in {self.path}; finish it (`git am --continue`) "
                "or abort it before exporting"
            )
        self.require_clean()
        self._require_writable()
        target = self.series_path
        with tempfile.TemporaryDirectory() as tmp:
            files = self._format_patch(Path(tmp))
            patches = [parse_patch(path) for path in files]  # metadata errors name the patch
            write_series(Path(tmp), [path.name for path in files])
            new_state = _folder_state(Path(tmp))
            if not force:
                self._refuse_lossy_export(new_state, len(files))
            paths.require_writable(target, "PATCHBENCH_PATCHES_DIR")
            for stale in target.glob("*.patch"):
                stale.unlink()
            for path in files:
                shutil.copyfile(path, target / path.name)
            write_series(target, [path.name for path in files])
        self._write_stamp(new_state)
        return [parse_patch(target / p.name) for p in patches]

    def _refuse_lossy_export(self, new: dict[str, str], count: int) -> None:
        current = _folder_state(self.series_path)
        v, stamp = self.version, self.read_stamp()
        old_patches = [name for name in current if name.endswith(".patch")]
        if count == 0 and old_patches:
            raise PatchbenchError(
                f"the build tree {self.path} holds only the pristine commit; exporting it would "
                f"delete all {len(old_patches)} patch file(s) of {self.series_path}/. Nothing was "
                f"written. Run `python -m verify apply {v}` first (or `export {v} --force` to "
                "really empty the series)"
            )
        overwritten = [n for n in current if new.get(n) != current[n]]
        unseen = [n for n in overwritten if stamp is None or stamp["files"].get(n) != current[n]]
        if not unseen:
            return
        why = (
            "the tree has no record of being applied from them"
            if stamp is None
            else "they changed since the tree was applied from them (a hand edit or a pull)"
        )
        raise PatchbenchError(
            f"export would overwrite or delete {_names(unseen)} in {self.series_path}/, and "
            f"{why}; nothing was written. Take the files into the tree: `python -m verify apply "
            f"{v}` (replaced commits are kept on a {BACKUP_PREFIX}/ branch). Overwrite them with "
            f"the tree's commits: `python -m verify export {v} --force`"
        )

    def check(self) -> CheckResult:
        """Compare `patches/<version>/` with a fresh export of the build tree."""
        with tempfile.TemporaryDirectory() as tmp:
            files = self._format_patch(Path(tmp))
            target = self.series_path
            if not files and not target.exists():
                return CheckResult([])
            write_series(Path(tmp), [path.name for path in files])
            differences = []
            expected = {p.name for p in files} | {"series"}
            present = {p.name for p in target.glob("*.patch")} | (
                {"series"} if (target / "series").exists() else set()
            )
            for name in sorted(expected - present):
                differences.append(f"missing from {target}: {name}")
            for name in sorted(present - expected):
                differences.append(f"not produced by the build tree: {target / name}")
            for name in sorted(expected & present):
                if not filecmp.cmp(Path(tmp) / name, target / name, shallow=False):
                    differences.append(f"differs from the build tree's export: {target / name}")
        return CheckResult(differences)

    # -- reading ----------------------------------------------------------------------------
    def changed_files(self) -> list[str]:
        """Paths the series changes relative to the pristine release."""
        out = self.git("diff", "--name-only", "--no-renames", BASELINE_TAG, "HEAD")
        return [line for line in out.splitlines() if line]

    def read_bytes(self, rev: str, path: str) -> bytes | None:
        """The raw bytes of `path` at `rev`, or None if it does not exist there."""
        run = subprocess.run(
            ["git", "-C", str(self.path), "cat-file", "blob", f"{rev}:{path}"], capture_output=True
        )
        return run.stdout if run.returncode == 0 else None

    def export_tree(self, rev: str, dest: Path, paths: list[str] | None = None) -> None:
        """Write the tree of `rev` (optionally only `paths`) into `dest` via `git archive`."""
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(self.path), "archive", "--format=tar", rev, *(paths or [])],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


_LEGACY_AGE_S = 3600


def _sweep_legacy_staging(parent: Path, version: str) -> list[Path]:
    """Staging folders of versions before the pid-named ones (`.<version>.` + mkdtemp's 8
    characters, holding `tree/` or `.unpack-*`), removed once an hour old."""
    pattern = re.compile(rf"^\.{re.escape(version)}\.[a-z0-9_]{{8}}$")
    removed = []
    for path in parent.iterdir() if parent.is_dir() else ():
        if not (pattern.match(path.name) and path.is_dir()):
            continue
        staged = (path / "tree").exists() or any(path.glob(".unpack-*"))
        if staged and time.time() - path.stat().st_mtime > _LEGACY_AGE_S:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _folder_state(folder: Path) -> dict[str, str]:
    """{name: sha256} of the `series` and `*.patch` files of `folder` ({} if it is missing)."""
    if not folder.is_dir():
        return {}
    names = sorted(p.name for p in folder.glob("*.patch")) + (
        ["series"] if (folder / "series").exists() else []
    )
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}


def _differing(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))


def _names(names: list[str], limit: int = 4) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
