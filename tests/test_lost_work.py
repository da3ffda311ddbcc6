"""Issue 19's table: each thing a user did that lost work or succeeded falsely, tried again.

Every test here failed on the code before the fix; each records what the tool now says
(docs/bad-input.md is generated from these records).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CONTRIBUTOR, commit_change
from verify import paths
from verify.buildtree import BACKUP_PREFIX, IDENTITY
from verify.cli import main
from verify.errors import PatchbenchError

REPO = Path(__file__).resolve().parent.parent


def _two_patch_series(tree):
    tree.apply()
    commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] First")
    commit_change(tree, "vllm/pooling.py", "True", "False", "[Perf] Keep ids on CPU")
    return tree.export()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _backups(tree) -> list[str]:
    out = tree.git("branch", "--list", f"{BACKUP_PREFIX}/*", "--format=%(refname:short)")
    return out.split()


# -- row 1: export from a pristine-only tree --------------------------------------------------
def test_export_of_a_pristine_only_tree_deletes_nothing(make_tree, bad_input):
    tree = make_tree()
    _two_patch_series(tree)
    before = _snapshot(tree.series_path)
    shutil.rmtree(tree.path)
    tree.ensure_baseline()  # what `status` does for a pin without a build tree
    with pytest.raises(PatchbenchError, match="holds only the pristine commit") as info:
        tree.export()
    bad_input("`export` from a build tree holding only the pristine commit", str(info.value))
    assert _snapshot(tree.series_path) == before
    assert tree.export(force=True) == []  # asked for explicitly, the series can be emptied
    assert not list(tree.series_path.glob("*.patch"))


def test_cli_export_then_check_of_a_pristine_only_tree_fails(pinned_release, capsys):
    from verify.buildtree import BuildTree

    tree = BuildTree("0.22.0")
    _two_patch_series(tree)
    before = _snapshot(tree.series_path)
    shutil.rmtree(tree.path)
    tree.ensure_baseline()
    assert main(["export", "0.22.0"]) == 2
    assert "holds only the pristine commit" in capsys.readouterr().err
    assert _snapshot(tree.series_path) == before
    assert main(["check", "0.22.0", "--no-apply"]) == 1


# -- row 2: a hand-edited (or pulled) patch file ----------------------------------------------
def _edit_second_patch(patches) -> Path:
    path = patches[1].path
    path.write_text(path.read_text().replace("Why: because.", "Why: edited by hand."))
    return path


def test_hand_edited_patch_file_is_taken_by_apply_and_named(make_tree, capsys):
    tree = make_tree()
    patches = _two_patch_series(tree)
    first = tree.git("rev-parse", "HEAD~1")
    old_head = tree.head()
    edited = _edit_second_patch(patches)
    assert tree.changed_since_applied() == [edited.name]
    assert len(tree.apply()) == 2
    err = capsys.readouterr().err
    assert f"changed since this tree was applied from it ({edited.name})" in err
    assert "Why: edited by hand." in tree.git("log", "-1", "--format=%B")
    assert tree.git("rev-parse", "HEAD~1") == first  # unchanged patches are not re-applied
    assert tree.check().ok
    assert [tree.git("rev-parse", b) for b in _backups(tree)] == [old_head]  # nothing lost


def test_export_never_overwrites_a_hand_edited_patch_file(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    edited = _edit_second_patch(patches)
    before = _snapshot(tree.series_path)
    with pytest.raises(PatchbenchError, match=f"overwrite or delete {edited.name}") as info:
        tree.export()
    bad_input("hand-edited a `.patch` file, then `export`", str(info.value))
    assert _snapshot(tree.series_path) == before
    tree.export(force=True)
    assert "Why: because." in edited.read_text()


def test_hand_edit_plus_tree_commit_is_refused_naming_both(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    edited = _edit_second_patch(patches)
    commit_change(tree, "vllm/sampler.py", "return x + 2\n", "return x + 200\n", "[Perf] New")
    head = tree.head()
    with pytest.raises(PatchbenchError, match="also changed since") as info:
        tree.apply()
    message = str(info.value)
    bad_input("hand-edited a `.patch` file and made a commit in the build tree, then `apply`",
              message)  # fmt: skip
    assert edited.name in message and "export 9.9.0 --force" in message
    assert "apply 9.9.0 --force" in message
    assert tree.head() == head
    tree.apply(force=True)
    assert "Why: edited by hand." in tree.git("log", "-1", "--format=%B")
    assert head in [tree.git("rev-parse", b) for b in _backups(tree)]


# -- row 4: duplicate series entry -----------------------------------------------------------
def test_duplicate_series_entry_is_a_named_error(make_tree, bad_input):
    tree = make_tree()
    patches = _two_patch_series(tree)
    with open(tree.series_path / "series", "a") as handle:
        handle.write(f"{patches[0].name}\n")
    with pytest.raises(PatchbenchError, match=f"lists {patches[0].name} more than once") as info:
        tree.apply()
    bad_input("a duplicate entry in `series`", str(info.value))


# -- row 6: the contributor's identity on their commits --------------------------------------
def test_commits_made_in_the_tree_keep_the_contributors_identity(make_tree):
    tree = make_tree()
    _two_patch_series(tree)
    target = tree.path / "vllm" / "sampler.py"
    target.write_text(target.read_text().replace("x + 3\n", "x + 300\n"))
    message = "[Perf] Mine\n\nWhy: because.\n\nUpstream: none\nStatus: local\nVerify: x\n"
    message += "Drop-when: never\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_AUTHOR")}
    subprocess.run(["git", "-C", str(tree.path), "commit", "-qas", "-m", message], check=True,
                   env=env)  # fmt: skip
    author = tree.git("log", "-1", "--format=%an <%ae>")
    assert author == f"{CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>"
    body = tree.git("log", "-1", "--format=%B")
    assert f"Signed-off-by: {CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>" in body
    baseline = tree.git("log", "-1", "--format=%an <%ae>", "pristine")
    assert baseline == f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}>"
    exported = tree.export()
    text = exported[-1].path.read_text()
    assert f"From: {CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>" in text
    assert exported[-1].trailers["Signed-off-by"] == f"{CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>"


def test_a_patch_re_authored_for_upstream_names_the_contributor(make_tree):
    """README's commands: a committed patch (authored by the project identity, no sign-off) is
    re-authored on a branch of the build tree; the series itself is unchanged."""
    tree = make_tree()
    tree.apply()
    project = {k: v for k, v in IDENTITY.items() if k.startswith("GIT_AUTHOR")}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in project.items():
            mp.setenv(name, value)
        commit_change(tree, "vllm/sampler.py", "return x + 1\n", "return x + 100\n", "[Perf] A")
    [patch] = tree.export()
    assert "From: vllm-patchbench <patchbench@example.invalid>" in patch.path.read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_AUTHOR")}
    for command in (
        ["switch", "-q", "-c", "upstream-pr", "main"],
        ["commit", "-q", "--amend", "--no-edit", "--reset-author", "-s"],
        ["format-patch", "-q", "-1", "-o", "../upstream-pr"],
        ["switch", "-q", "main"],
    ):
        subprocess.run(["git", *command], cwd=tree.path, check=True, env=env)  # fmt: skip
    [out] = (tree.path.parent / "upstream-pr").iterdir()
    text = out.read_text()
    assert f"From: {CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>" in text
    assert f"Signed-off-by: {CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>" in text
    assert "From: vllm-patchbench" in patch.path.read_text()
    assert tree.check().ok


def test_apply_works_without_any_git_identity(make_tree, tmp_path, monkeypatch):
    tree = make_tree()
    _two_patch_series(tree)
    shutil.rmtree(tree.path)
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert len(tree.apply()) == 2
    assert tree.git("log", "-1", "--format=%an|%cn") == f"{CONTRIBUTOR[0]}|vllm-patchbench"
    assert tree.check().ok


# -- row 7: SIGTERM during apply -------------------------------------------------------------
def _big_release(pinned_release: dict[str, str]) -> None:
    """Replace the synthetic 0.22.0 sdist by one with many files (a second or two to unpack)."""
    import hashlib

    from tests.conftest import make_sdist

    sdists = Path(pinned_release["PATCHBENCH_CACHE_DIR"]) / "sdists"
    many = {f"vllm/gen/m{i:05d}.py": f"X = {i}\n" * 20 for i in range(6000)}
    tarball = make_sdist(sdists, "0.22.0", many)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    tarball.with_name(tarball.name + ".sha256").write_text(digest + "\n")


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "verify", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)  # fmt: skip


def test_sigterm_during_apply_leaves_no_staging_folder(pinned_release, bad_input):
    _big_release(pinned_release)
    build = Path(pinned_release["PATCHBENCH_BUILD_DIR"])
    proc = _cli("apply", "0.22.0")
    deadline = time.monotonic() + 60
    while not (build.is_dir() and list(build.glob(".0.22.0*"))):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    bad_input("SIGTERM during `apply`", err.strip().splitlines()[-1])
    assert [p.name for p in build.iterdir() if p.name != ".locks"] == []


@pytest.mark.parametrize("where", ["just after mkdir", "inside the block"])
def test_a_signal_strands_no_staging_folder(tmp_path, monkeypatch, where):
    """A signal handler raises at the next bytecode, which may come right after the folder
    is made (SIGTERM under load stranded one there): the cleanup must already be in charge."""
    made = Path.mkdir

    def mkdir_then_signal(self, *args, **kwargs):
        made(self, *args, **kwargs)
        raise KeyboardInterrupt

    if where == "just after mkdir":
        monkeypatch.setattr(Path, "mkdir", mkdir_then_signal)
    with pytest.raises(KeyboardInterrupt), paths.staging(tmp_path, ".0.22.0") as staging:
        (staging / "tree").mkdir()
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_a_killed_apply_are_removed_next_time(pinned_release, capsys):
    build = Path(pinned_release["PATCHBENCH_BUILD_DIR"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    leftover = build / f".0.22.0{paths.STAGING_MARK}{dead}.abc" / "tree"
    leftover.mkdir(parents=True)
    (leftover / "big").write_text("x" * 1000)
    assert main(["apply", "0.22.0"]) == 0
    assert "left behind by an interrupted run" in capsys.readouterr().err
    assert sorted(p.name for p in build.iterdir() if p.name != ".locks") == ["0.22.0"]


# -- row 8: read-only build or cache folder --------------------------------------------------
def _readonly_run(folder: Path, args: list[str]) -> subprocess.CompletedProcess:
    """Run the CLI with `folder` read-only: chmod for a normal user; for root (which ignores
    modes) a read-only bind mount in a private mount namespace."""
    command = [sys.executable, "-m", "verify", *args]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: cannot make a folder read-only")
    script = (
        f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    )
    run = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *command], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    if "mount" in run.stderr and "permission denied" in run.stderr.lower():
        pytest.skip(f"cannot make a read-only mount here: {run.stderr.strip()}")
    return run


def test_read_only_build_folder_is_a_named_error(pinned_release, bad_input):
    build = Path(pinned_release["PATCHBENCH_BUILD_DIR"])
    build.mkdir()
    run = _readonly_run(build, ["apply", "0.22.0"])
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot write to" in run.stderr and "PATCHBENCH_BUILD_DIR" in run.stderr
    bad_input("`apply` with a read-only build folder", run.stderr.strip().splitlines()[-1])


def test_read_only_cache_folder_is_a_named_error(pinned_release, tmp_path, monkeypatch,
                                                bad_input):  # fmt: skip
    from tests.conftest import make_sdist
    from tests.test_sdist import _Index

    served = tmp_path / "served"
    served.mkdir()
    server = _Index(served)
    server.add(make_sdist(served, "0.22.0"))
    monkeypatch.setenv("PATCHBENCH_INDEX_URL", server.url)
    cache = Path(pinned_release["PATCHBENCH_CACHE_DIR"])
    shutil.rmtree(cache / "sdists")
    try:
        run = _readonly_run(cache, ["apply", "0.22.0"])
    finally:
        server.close()
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot write to" in run.stderr and "PATCHBENCH_CACHE_DIR" in run.stderr
    bad_input("`apply` with a read-only sdist cache that lacks the sdist",
              run.stderr.strip().splitlines()[-1])  # fmt: skip


def test_read_only_cache_holding_the_sdist_still_works(pinned_release):
    cache = Path(pinned_release["PATCHBENCH_CACHE_DIR"])
    run = _readonly_run(cache / "sdists", ["apply", "0.22.0"])
    assert run.returncode == 0, run.stderr


def test_read_only_build_tree_is_a_named_error(pinned_release, bad_input):
    assert main(["apply", "0.22.0"]) == 0
    tree = Path(pinned_release["PATCHBENCH_BUILD_DIR"]) / "0.22.0"
    run = _readonly_run(tree, ["apply", "0.22.0"])
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "PATCHBENCH_BUILD_DIR" in run.stderr
    bad_input("`apply` on a read-only build tree", run.stderr.strip().splitlines()[-1])


# -- row 9: a non-editable install -----------------------------------------------------------
def test_non_editable_install_refuses_and_writes_nothing(pinned_release, tmp_path, bad_input):
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "verify", site / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHBENCH_")}
    env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1",
               PATCHBENCH_CACHE_DIR=pinned_release["PATCHBENCH_CACHE_DIR"],
               PATCHBENCH_INDEX_URL=pinned_release["PATCHBENCH_INDEX_URL"])  # fmt: skip
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    for args in (["apply", "0.22.0"], ["status", "0.22.0"]):
        run = subprocess.run([sys.executable, "-m", "verify", *args], cwd=elsewhere, env=env,
                             capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 2, run.stdout + run.stderr
        assert "outside a vllm-patchbench checkout" in run.stderr
    bad_input("`pip install .` (not editable), then `python -m verify apply 0.22.0` outside "
              "a clone", run.stderr.strip().splitlines()[-1])  # fmt: skip
    assert sorted(p.relative_to(site) for p in site.rglob("*")) == before
    assert list(elsewhere.iterdir()) == []


def test_non_editable_install_works_inside_a_clone(tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    for name in ("patches", "verify"):
        (clone / name).mkdir(parents=True)
    (clone / "noxfile.py").write_text("")
    monkeypatch.setattr(paths, "PACKAGE_PARENT", tmp_path / "site-packages")
    monkeypatch.chdir(clone / "verify")
    monkeypatch.delenv("PATCHBENCH_BUILD_DIR")
    assert paths.repo_root() == clone
    assert paths.build_root() == clone / "build"


# -- row 10: the test suite never touches the checkout's folders -----------------------------
def test_suite_runs_in_temporary_folders():
    for where in (paths.build_root(), paths.results_root(), paths.reports_root()):
        assert REPO not in where.resolve().parents, where
    author = subprocess.run(["git", "var", "GIT_AUTHOR_IDENT"], capture_output=True, text=True,
                            cwd=REPO).stdout  # fmt: skip
    assert author.startswith(f"{CONTRIBUTOR[0]} <{CONTRIBUTOR[1]}>")


# -- row 11: `.ci/run` and every record-writing command keep tracked files unchanged ---------
def test_status_writes_its_json_to_the_results_folder(pinned_release):
    tracked = REPO / "results" / "status.json"
    before = tracked.read_bytes()
    assert main(["status", "0.22.0"]) == 0
    written = Path(pinned_release["PATCHBENCH_RESULTS_DIR"]) / "status.json"
    assert written.exists()
    assert tracked.read_bytes() == before


def test_ci_run_writes_records_to_a_temporary_folder_and_checks_git_status():
    script = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    first_nox = script.index("nox -s")
    for variable in ("PATCHBENCH_BUILD_DIR", "PATCHBENCH_RESULTS_DIR", "PATCHBENCH_REPORTS_DIR"):
        assert script.index(f'export {variable}="$scratch/') < first_nox
    assert "scratch=$(mktemp -d" in script
    test_command = readme.split("## Tests", 1)[1].split("```", 2)[1].strip()
    assert test_command == "nox -s tests" and f"\n{test_command}\n" in script
    assert "git status --porcelain" in script[script.rindex("nox -s") :]
    assert 'nox -s "verify-$main" -- --quick' in script


def test_the_stamp_names_the_series_hash_the_tree_was_applied_from(make_tree):
    from verify.series import series_hash

    tree = make_tree()
    assert tree.applied_series_hash() is None
    _two_patch_series(tree)
    assert tree.applied_series_hash() == series_hash(tree.version, tree.patches_root)


def test_leftovers_of_older_versions_are_removed_once_an_hour_old(pinned_release, capsys):
    build = Path(pinned_release["PATCHBENCH_BUILD_DIR"])
    old, fresh, other = (build / ".0.22.0.ab12cd_9", build / ".0.22.0.zz99yy00", build / ".notes")
    for folder in (old, fresh, other):
        (folder / "tree").mkdir(parents=True)
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    assert main(["apply", "0.22.0"]) == 0
    assert f"removed {old}" in capsys.readouterr().err
    assert not old.exists() and fresh.exists() and other.exists()


def test_two_runs_materializing_one_root_both_get_it(tmp_path, monkeypatch):
    """Another run's rename lands first (the equivalence sessions of one pin at once): the
    second run uses that root, the same commit's, instead of failing 'Directory not empty'."""
    from verify.equivalence import roots

    monkeypatch.setenv("PATCHBENCH_BUILD_DIR", str(tmp_path / "build"))

    class Tree:
        version = "9.9.0"

        def git(self, *args: str) -> str:
            return "a" * 40 if args[0] == "rev-parse" else "vllm"

        def export_tree(self, commit: str, dest: Path, present: list[str]) -> None:
            (dest / "vllm").mkdir()
            (dest / "vllm" / "mine").write_text("")
            other = tmp_path / "build" / "roots" / "9.9.0" / f"{'a' * 12}-{roots.LAYOUT}"
            (other / "vllm").mkdir(parents=True)  # the other run's root, whole
            (other / "vllm" / "theirs").write_text("")

    root = roots._materialize_rev(Tree(), "HEAD")
    assert (root / "vllm" / "theirs").is_file() and not (root / "vllm" / "mine").exists()
    assert [p.name for p in root.parent.iterdir()] == [root.name]  # no staging folder left
