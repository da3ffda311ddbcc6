"""A patch whose own test files changed keeps the evidence of steps that run none of them: the
code hash, the committed forms found in history, and the staleness rule."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify import registry, results


def patch_text(code: str, test: str, message: str = "[Perf] A change") -> str:
    """A format-patch text changing one vLLM file and one test file."""
    return (
        f"From 0 Mon Sep 17 00:00:00 2001\nSubject: {message}\n\n---\n"
        f"diff --git a/vllm/x.py b/vllm/x.py\n--- a/vllm/x.py\n+++ b/vllm/x.py\n"
        f"@@ -1 +1 @@\n-x = 0\n+x = {code}\n"
        f"diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n"
        f"+++ b/tests/test_x.py\n@@ -1 +1 @@\n-y = 0\n+y = {test}\n-- \n2.43.0\n\n"
    )


def test_the_code_hash_leaves_out_only_the_test_files():
    base = patch_text("1", "1")
    assert registry.code_hash_text(patch_text("1", "2")) == registry.code_hash_text(base)
    assert registry.diff_hash_text(patch_text("1", "2")) != registry.diff_hash_text(base)
    assert registry.code_hash_text(patch_text("2", "1")) != registry.code_hash_text(base)
    assert registry.code_hash_text(patch_text("1", "1", "[Perf] Reworded")) == (
        registry.code_hash_text(base)
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository standing in for the checkout, its history read afresh."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.setattr(registry, "repo_root", lambda: tmp_path)
    registry.committed_forms.cache_clear()
    yield tmp_path
    registry.committed_forms.cache_clear()


def commit(repo: Path, path: Path, text: str) -> str:
    """Commit `text` as `path`; the diff hash of that form."""
    path.write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "form"], check=True)
    registry.committed_forms.cache_clear()
    return registry.diff_hash_text(text)


def test_a_tests_only_change_is_found_in_the_history(repo: Path):
    path = repo / "0001-x.patch"
    patch = SimpleNamespace(path=path)
    first = commit(repo, path, patch_text("1", "1"))
    path.write_text(patch_text("1", "2"))  # the test fixed, not yet committed
    assert registry.tests_only_change(patch, first)
    assert not registry.tests_only_change(patch, "0" * 12)  # no such committed form
    commit(repo, path, patch_text("2", "2"))  # then the code changed too
    assert not registry.tests_only_change(patch, first)


def test_without_history_a_changed_patch_is_not_excused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(registry, "repo_root", lambda: tmp_path)  # not a repository
    registry.committed_forms.cache_clear()
    path = tmp_path / "0001-x.patch"
    path.write_text(patch_text("1", "2"))
    assert not registry.tests_only_change(SimpleNamespace(path=path), "0" * 12)
    registry.committed_forms.cache_clear()


def test_records_of_upstream_test_steps_go_stale_on_a_tests_only_change(monkeypatch):
    slug = "penalty-state-device"
    monkeypatch.setattr(registry, "tests_only_change", lambda patch, recorded: True)
    benchmark = results.make("e2e-gpu-penalty-cost", "003", "0.22.0", "pass")
    benchmark["patches"][slug] = "0" * 12
    assert results.staleness(benchmark, slug, "0.22.0") == ""
    tests = results.make("upstream-tests", "series", "0.22.0", "pass")
    tests["patches"][slug] = "0" * 12
    assert results.staleness(tests, slug, "0.22.0").startswith("patch changed")
    monkeypatch.setattr(registry, "tests_only_change", lambda patch, recorded: False)
    assert results.staleness(benchmark, slug, "0.22.0").startswith("patch changed")
