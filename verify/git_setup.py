"""The fixed git setup of every build-tree call: the tool's identity (the baseline commit only),
an environment free of the caller's repository and system config, and the `git format-patch` /
`git am` options that make apply then export byte-identical whatever the user's git config."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "vllm-patchbench",
    "GIT_AUTHOR_EMAIL": "patchbench@example.invalid",
    "GIT_COMMITTER_NAME": "vllm-patchbench",
    "GIT_COMMITTER_EMAIL": "patchbench@example.invalid",
}
BASELINE_DATE = "2000-01-01T00:00:00+00:00"

# Options that make `git format-patch` output independent of user/global git config.
CONFIG_OVERRIDES = [
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


def git_env(identity: bool = False) -> dict[str, str]:
    """The environment of git calls; `identity` only for the baseline commit."""
    env = dict(os.environ, **IDENTITY) if identity else dict(os.environ)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


def has_identity(folder: Path, env: dict[str, str]) -> bool:
    run = subprocess.run(
        ["git", "-C", str(folder), "var", "GIT_COMMITTER_IDENT"], capture_output=True, env=env
    )
    return run.returncode == 0
