"""One small function per git verb that `port` and `range-diff` use, on a build tree.

Each runs git in the tree (`BuildTree.git`, with the environment every build-tree call gets) and
returns what the caller decides on; none of them prints. `commit_series` makes commits of patch
files without a checkout (a temporary index over a base commit), so a pin's tree gets the
commits of any series without its HEAD or files moving.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

from verify.buildtree import BuildTree
from verify.errors import PatchbenchError
from verify.git_setup import AM_OPTS, CONFIG_OVERRIDES, IDENTITY, git_env


@dataclass(frozen=True)
class Result:
    """A git call's exit (ok) and its output (stdout and stderr together)."""

    ok: bool
    output: str


def _run(tree: BuildTree, *args: str, env: dict[str, str] | None = None) -> Result:
    try:
        _, out, err = tree.repo.git.execute(
            ["git", *args], env=env or git_env(), with_extended_output=True
        )
    except git.GitCommandError as exc:
        return Result(False, f"{exc.stdout or ''}\n{exc.stderr or ''}".strip())
    return Result(True, f"{out}\n{err}".strip() if err else out)


def _committer_env(tree: BuildTree) -> dict[str, str]:
    """The build-tree environment, with the tool's committer where git has none (authors kept)."""
    env = git_env()
    probe = _run(tree, "var", "GIT_COMMITTER_IDENT", env=env)
    if not probe.ok:
        env.update({k: v for k, v in IDENTITY.items() if k.startswith("GIT_COMMITTER")})
    return env


def apply_check(tree: BuildTree, patch: Path, reverse: bool = False) -> Result:
    """`git apply --check -v [-R]` on the tree's files; the output names each hunk's offset."""
    return _run(tree, "apply", "--check", "-v", *(["-R"] if reverse else []), str(patch))


def apply_index(tree: BuildTree, patch: Path) -> Result:
    """`git apply --index` of a plain diff onto the tree's files and index."""
    return _run(tree, "apply", "--index", str(patch))


def commit_amend(tree: BuildTree) -> Result:
    """`git commit --amend --no-edit` of what is staged (the build tree's committer)."""
    return _run(tree, "commit", "--amend", "--no-edit", "--quiet", env=_committer_env(tree))


def am(tree: BuildTree, patch: Path) -> Result:
    """`git am --3way` of one patch file (the build tree's options); on failure git's own
    `git am` state stays for a person to resolve."""
    return _run(tree, "am", *AM_OPTS, str(patch), env=_committer_env(tree))


def am_continue(tree: BuildTree) -> Result:
    return _run(tree, "am", "--continue", env=_committer_env(tree))


def am_abort(tree: BuildTree) -> Result:
    return _run(tree, "am", "--abort")


def am_in_progress(tree: BuildTree) -> bool:
    return tree.am_in_progress()


def unmerged_files(tree: BuildTree) -> list[str]:
    """Paths git still marks as conflicted."""
    out = _run(tree, "diff", "--name-only", "--diff-filter=U").output
    return sorted(set(filter(None, out.splitlines())))


def staged_changes(tree: BuildTree) -> bool:
    """Whether the index differs from HEAD (a resolution to commit)."""
    return not _run(tree, "diff", "--cached", "--quiet").ok


def reset_hard(tree: BuildTree, rev: str) -> None:
    tree.git("reset", "--hard", "-q", rev)
    tree.git("clean", "-fdq")


def rerere_enable(tree: BuildTree) -> None:
    """Record conflict resolutions and reuse them, staging what a recorded one resolves."""
    tree.git("config", "rerere.enabled", "true")
    tree.git("config", "rerere.autoUpdate", "true")


def rerere(tree: BuildTree) -> None:
    """`git rerere`: record the resolutions made so far of the conflicted files."""
    _run(tree, "rerere")


def rerere_cache(tree: BuildTree) -> Path:
    return tree.path / ".git" / "rr-cache"


def copy_rerere(source: Path, dest: Path) -> int:
    """Copy recorded resolutions (folders with a postimage) from one rr-cache to another;
    returns how many."""
    count = 0
    for entry in sorted(source.glob("*/postimage")) if source.is_dir() else []:
        folder = entry.parent
        target = dest / folder.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ("preimage", "postimage"):
            if (folder / name).exists():
                shutil.copyfile(folder / name, target / name)
        count += 1
    return count


def fetch(tree: BuildTree, other: Path, ref: str) -> str:
    """Fetch `ref` of the repository at `other` into the tree under the same name; its sha."""
    tree.git("fetch", "-q", "--no-tags", str(other), f"+{ref}:{ref}")
    return tree.git("rev-parse", ref)


def update_ref(tree: BuildTree, ref: str, sha: str) -> None:
    tree.git("update-ref", ref, sha)


def show_diff(tree: BuildTree, sha: str) -> str:
    """The diff of one commit in the export's format (3 lines of context, full index)."""
    return tree.git(*CONFIG_OVERRIDES, "show", "--format=", "--no-renames", "--full-index",
                    "--unified=3", "--diff-algorithm=myers", "--no-color", sha)  # fmt: skip


def range_diff(tree: BuildTree, old: str, new: str) -> str:
    """`git range-diff` of the single commits `old` and `new` (no colour)."""
    return tree.git("range-diff", "--no-color", "--creation-factor=100",
                    f"{old}^..{old}", f"{new}^..{new}")  # fmt: skip


_AUTHOR = {"Author": "GIT_AUTHOR_NAME", "Email": "GIT_AUTHOR_EMAIL", "Date": "GIT_AUTHOR_DATE"}


def _mailinfo(tree: BuildTree, patch: Path, folder: Path) -> tuple[str, dict[str, str]]:
    """(commit message, author environment) of a format-patch file (`git mailinfo -k`)."""
    msg, diff = folder / "msg", folder / "diff"
    with open(patch, "rb") as handle:
        out = tree.repo.git.execute(
            ["git", "mailinfo", "-k", str(msg), str(diff)], istream=handle, env=git_env()
        )
    info = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    env = {var: info[key] for key, var in _AUTHOR.items() if key in info}
    return f"{info.get('Subject', '')}\n\n{msg.read_text()}", env


def _same_date(author: dict[str, str]) -> dict[str, str]:
    """The author's date as the committer's too, so the same patches make the same commits."""
    date = author.get("GIT_AUTHOR_DATE")
    return {"GIT_COMMITTER_DATE": date} if date else {}


def commit_series(tree: BuildTree, base: str, patches: list[Path]) -> list[str]:
    """Commits of `patches` in order on `base`, made on a temporary index (HEAD, the index and
    the files of the tree are not touched); returns their shas. A patch that does not apply
    raises PatchbenchError naming it."""
    commits, parent = [], base
    with tempfile.TemporaryDirectory() as tmp:
        env = _committer_env(tree)
        env["GIT_INDEX_FILE"] = os.path.join(tmp, "index")
        tree.git("read-tree", parent, env=env)
        for patch in patches:
            applied = _run(tree, "apply", "--cached", str(patch), env=env)
            if not applied.ok:
                last = applied.output.splitlines()[-1:] or ["?"]
                raise PatchbenchError(f"{patch.name} does not apply on {base[:12]}: {last[0]}")
            message, author = _mailinfo(tree, patch, Path(tmp))
            written = tree.git("write-tree", env=env)
            parent = tree.repo.git.execute(
                ["git", "commit-tree", written, "-p", parent, "-m", message.strip()],
                env={**env, **author, **_same_date(author)},
            ).strip()
            commits.append(parent)
    return commits


_OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")


def hunk_offsets(check_output: str) -> list[str]:
    """'hunk N of FILE at line L (offset D)' for each hunk `git apply -v` found moved."""
    found, current = [], "?"
    for line in check_output.splitlines():
        if line.startswith("Checking patch "):
            current = line[len("Checking patch ") :].rstrip(".")
        elif match := _OFFSET.search(line):
            n, at, offset = match.groups()
            found.append(f"{current} hunk {n} at line {at} (offset {int(offset):+d})")
    return found


def patch_id(tree: BuildTree, diff_text: str) -> str:
    """`git patch-id --stable` of a diff (or a format-patch file): equal for the same change."""
    run = subprocess.run(["git", "patch-id", "--stable"], input=diff_text, capture_output=True,
                         text=True, cwd=tree.path)  # fmt: skip
    return run.stdout.split(" ", 1)[0]
