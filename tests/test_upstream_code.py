"""verify.upstream_code: patch parsing, touched functions, markers and the release bisection."""

from __future__ import annotations

from types import SimpleNamespace

from verify import upstream_code as uc

PATCH = (
    """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [Perf] X

diff --git a/vllm/a.py b/vllm/a.py
index 1111111..2222222 100644
--- a/vllm/a.py
+++ b/vllm/a.py
@@ -2,3 +2,3 @@ class K:
     def f(self):
-        return 1
+        return 2
"""
    + " \n"
    + """\
diff --git a/tests/test_a.py b/tests/test_a.py
index 3333333..4444444 100644
--- a/tests/test_a.py
+++ b/tests/test_a.py
@@ -1 +1 @@
-assert 1
+assert 2
"""
)
SOURCE = "class K:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 1\n"


def test_file_changes_and_touched_functions():
    (change,) = uc.file_changes(PATCH)  # the tests/ file is left out
    assert change.path == "vllm/a.py" and change.old_blob == "1111111"
    assert change.removed == [(3, "        return 1")] and change.added == [(3, "        return 2")]
    assert len(uc.file_changes(PATCH, code_only=False)) == 2
    assert uc.functions_at(SOURCE, [3]) == {"K.f"}
    assert uc.function_source(SOURCE, "K.g") == "def g(self):\n        return 1"
    assert uc.function_source(SOURCE, "K.h") is None


def test_marker_flaw_unless_and_fixed():
    marker = uc.Marker("f.py", "f", flaw=r"copy\(", unless=r"^\s*return x$")
    assert not marker.contains("def f():\n    y = copy(x)\n")  # flaw present
    assert marker.contains("def f():\n    if ok:\n        return x\n    y = copy(x)\n")
    assert marker.contains("def f():\n    y = x\n")  # flaw gone
    fixed = uc.Marker("f.py", "f", fixed=r"tl\.where")
    assert fixed.contains("s = tl.where(m, s, -inf)") and not fixed.contains("s = p * q")


class _Stub:
    """A change that the releases from index `first` on contain; counts the probes."""

    subject = "stub"

    def __init__(self, versions: list[str], first: int):
        self.versions, self.first, self.probed = versions, first, []

    def probe(self, version, read):
        self.probed.append(version)
        return uc.Probe(version, self.versions.index(version) >= self.first, "stub")


VERSIONS = [f"1.{i}.0" for i in range(16)]
FILES = SimpleNamespace(read=lambda version, path: None)


def test_claim_confirmed_with_two_probes():
    stub = _Stub(VERSIONS, 9)
    search = uc.first_containing(stub, "0.9.0", "1.9.0", VERSIONS, FILES)
    assert search.first == "1.9.0" and search.agrees and sorted(stub.probed) == ["1.8.0", "1.9.0"]


def test_wrong_claim_is_bisected_and_flagged():
    for claimed, first in (("1.12.0", 5), ("1.3.0", 11), (None, 7), ("1.2.0", 16)):
        stub = _Stub(VERSIONS, first)
        search = uc.first_containing(stub, "0.9.0", claimed, VERSIONS, FILES)
        assert search.first == (VERSIONS[first] if first < 16 else None)
        assert not search.agrees
        assert len(stub.probed) <= 7, stub.probed  # bisection, not a scan of all 16


def test_between():
    assert uc.between(["0.1.0", "0.2.0", "0.10.0", "0.11.0"], "0.2.0", "0.10.0") == ["0.10.0"]
