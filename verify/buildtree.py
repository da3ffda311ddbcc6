"""Build trees: `build/<version>/` is a git repo whose first commit is the pristine release
(tagged ``pristine``) with the version's patch series applied on top by ``git am``.

Round trip: ``apply`` (patch files -> commits) then ``export`` (commits -> patch files) is
byte-identical, because export uses fixed ``git format-patch`` options that ignore user config.
"""

from __future__ import annotations

import filecmp
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

from verify import paths, sdist
from verify.errors import ApplyError, PatchbenchError
from verify.progress import say
from verify.series import Patch, parse_patch, read_series, series_dir, write_series

BASELINE_TAG = "pristine"
IDENTITY = {
    "GIT_AUTHOR_NAME": "vllm-patchbench",
    "GIT_AUTHOR_EMAIL": "patchbench@example.invalid",
    "GIT_COMMITTER_NAME": "vllm-patchbench",
    "GIT_COMMITTER_EMAIL": "patchbench@example.invalid",
}
BASELINE_DATE = "2000-01-01T00:00:00+00:00"

# Options that make `git format-patch` output independent of user/global git config.
_CONFIG_OVERRIDES = [
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.relative=false",
    "-c", "core.quotePath=true",
    "-c", "i18n.logOutputEncoding=UTF-8",
]  # fmt: skip
FORMAT_PATCH_OPTS = [
    "--no-signature",
    "--zero-commit",
    "--full-index",
    "--no-stat",
    "--keep-subject",
    "--no-numbered",
    "--no-thread",
    "--no-cover-letter",
    "--no-base",
    "--no-to",
    "--no-cc",
    "--no-renames",
    "--no-color",
    "--encode-email-headers",
    "--suffix=.patch",
    "--filename-max-length=64",
    "--diff-algorithm=myers",
    "--indent-heuristic",
    "--unified=3",
    "--inter-hunk-context=0",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "-O/dev/null",
]
AM_OPTS = ["--keep", "--3way", "--committer-date-is-author-date", "--whitespace=nowarn"]


def build_root() -> Path:
    return paths.build_root()


@dataclass
class CheckResult:
    """Differences between `patches/<version>/` and what the build tree exports."""

    differences: list[str]

    @property
    def ok(self) -> bool:
        return not self.differences


def _git_env() -> dict[str, str]:
    env = dict(os.environ, **IDENTITY)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


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
        """Run git in the build tree (through gitpython) with a fixed identity."""
        return self.repo.git.execute(["git", *args], env=env or _git_env())

    @property
    def series_path(self) -> Path:
        return series_dir(self.version, self.patches_root)

    def exists(self) -> bool:
        return (self.path / ".git").is_dir()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def baseline(self) -> str:
        return self.git("rev-parse", f"{BASELINE_TAG}^{{commit}}")

    # -- baseline ---------------------------------------------------------------------------
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tarball = self._fetch_sdist(self.version)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.version}.", dir=self.path.parent))
        try:
            tree = sdist.unpack(tarball, staging / "tree")
            self._commit_baseline(tree)
            os.replace(tree, self.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _commit_baseline(self, tree: Path) -> None:
        started = time.monotonic()
        repo = git.Repo.init(tree, initial_branch="main")
        env = _git_env()
        env.update(GIT_AUTHOR_DATE=BASELINE_DATE, GIT_COMMITTER_DATE=BASELINE_DATE)
        for key, value in (
            ("core.autocrlf", "false"),
            ("core.fileMode", "true"),
            ("gc.auto", "0"),
            ("user.name", IDENTITY["GIT_AUTHOR_NAME"]),
            ("user.email", IDENTITY["GIT_AUTHOR_EMAIL"]),
        ):
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

    # -- apply ------------------------------------------------------------------------------
    def apply(self, force: bool = False) -> list[Patch]:
        """Bring the build tree to pristine + series. Returns the applied patches.

        Refuses (without touching anything) when the tree has uncommitted edits or commits
        that are not in the series, unless `force` discards committed-but-unexported work.
        """
        patches = read_series(self.version, self.patches_root)
        self.ensure_baseline()
        if self.am_in_progress():
            say("an interrupted `git am` was found; aborting it and re-applying the series")
            self.git("am", "--abort")
        self.require_clean()
        done = self._applied_prefix(patches, force)
        if done == len(patches):
            say(f"vLLM {self.version}: series already applied ({len(patches)} patches)")
            return patches
        if done:
            say(f"resuming: {done} of {len(patches)} patches are already applied")
        for index, patch in enumerate(patches[done:], start=done + 1):
            say(f"[{index}/{len(patches)}] git am {patch.name}")
            self._am_one(patch)
        return patches

    def _applied_prefix(self, patches: list[Patch], force: bool) -> int:
        """How many leading series patches the current commits already are; resets otherwise."""
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
        if not force:
            raise PatchbenchError(
                f"build tree {self.path} has {len(exported) - count} commit(s) after the first "
                f"{count} that are not in {self.series_path}/ (first: {exported[count].name}); "
                "nothing was touched. Run the export session to keep them, or apply with "
                "--force to discard them"
            )
        say(f"--force: discarding {len(exported) - count} commit(s) not in the series")
        self.git("reset", "--hard", BASELINE_TAG)
        self.git("clean", "-fdx", "-q")
        return 0

    def _am_one(self, patch: Patch) -> None:
        try:
            self.git("am", *AM_OPTS, str(patch.path))
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
            files, where = _failure_details(output, patch)
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
            *_CONFIG_OVERRIDES, "format-patch", *FORMAT_PATCH_OPTS, "-o", str(out_dir),
            f"{BASELINE_TAG}..HEAD",
        )  # fmt: skip
        return [Path(line) for line in out.splitlines() if line.strip()]

    def export(self) -> list[Patch]:
        """Regenerate `patches/<version>/` from the build tree's commits (validated first)."""
        if not self.exists():
            raise PatchbenchError(f"no build tree at {self.path}; run apply first")
        if self.am_in_progress():
            raise PatchbenchError(
                f"a `git am` is in progress in {self.path}; finish it (`git am --continue`) "
                "or abort it before exporting"
            )
        self.require_clean()
        with tempfile.TemporaryDirectory() as tmp:
            files = self._format_patch(Path(tmp))
            patches = [parse_patch(path) for path in files]  # metadata errors name the patch
            target = self.series_path
            target.mkdir(parents=True, exist_ok=True)
            for stale in target.glob("*.patch"):
                stale.unlink()
            for path in files:
                shutil.copyfile(path, target / path.name)
            write_series(target, [path.name for path in files])
        return [parse_patch(target / p.name) for p in patches]

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


_PATCH_FAILED = re.compile(r"error: patch failed: (\S+?):(\d+)")
_CONFLICT = re.compile(r"CONFLICT \([^)]*\): (?:Merge conflict in )?(\S+)")
_MISSING = re.compile(r"error: (\S+): does not exist in index")
_CORRUPT = re.compile(r"corrupt patch at line (\d+)")


def _failure_details(output: str, patch: Patch) -> tuple[list[str], str]:
    """Which files (and hunks) of `patch` failed, from `git am` output."""
    files: list[str] = []
    parts: list[str] = []
    for name, line in _PATCH_FAILED.findall(output):
        files.append(name)
        parts.append(f"hunk at {name}:{line}{_hunk_header(patch, name, int(line))}")
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


def _hunk_header(patch: Patch, name: str, line: int) -> str:
    """The `@@ -line,...` header of the hunk of `name` that starts at `line`, if found."""
    text = patch.path.read_text(encoding="utf-8", errors="replace")
    section = text.split(f"diff --git a/{name} b/{name}", 1)
    if len(section) < 2:
        return ""
    for match in re.finditer(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*$", section[1], re.M):
        if int(match.group(1)) == line:
            return f" ({match.group(0).strip()})"
    return ""
