"""Series manifests and patch metadata trailers."""

from __future__ import annotations

import pytest

from verify.errors import PatchbenchError
from verify.series import parse_patch, read_series, write_series

DIFF = """diff --git a/vllm/x.py b/vllm/x.py
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1 +1 @@
-a = 1
+a = 2
"""


def _patch(tmp_path, name="0001-x.patch", trailers=None, subject="[Perf] Faster x"):
    trailers = (
        trailers
        if trailers is not None
        else {
            "Upstream": "https://github.com/vllm-project/vllm/pull/1",
            "Status": "merged-in 0.17.0",
            "Verify": "tests/equivalence/test_x.py",
            "Drop-when": "rebased onto >= 0.17.0",
        }
    )
    block = "\n".join(f"{k}: {v}" for k, v in trailers.items())
    text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: a <a@b>\nDate: Mon, 23 Nov 2026 00:00:00 +0000\n"
        f"Subject: {subject}\n\nWhy: because.\n\n{block}\n{DIFF}"
    )
    path = tmp_path / name
    path.write_text(text)
    return path


def test_parse_valid_patch(tmp_path):
    patch = parse_patch(_patch(tmp_path))
    assert patch.subject == "[Perf] Faster x"
    assert patch.merged_in == "0.17.0"
    assert patch.files == ("vllm/x.py",)
    assert patch.upstream.endswith("/pull/1")


@pytest.mark.parametrize("missing", ["Upstream", "Status", "Verify", "Drop-when"])
def test_missing_trailer_names_patch_and_key(tmp_path, missing, bad_input):
    trailers = {
        "Upstream": "none", "Status": "local", "Verify": "x", "Drop-when": "y",
    }  # fmt: skip
    del trailers[missing]
    with pytest.raises(PatchbenchError, match=f"0001-x.patch: missing .*{missing}") as info:
        parse_patch(_patch(tmp_path, trailers=trailers))
    bad_input(f"a patch without one of the required trailers ({missing})", str(info.value))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("Status", "merged", "malformed 'Status"),
        ("Status", "merged-in 0.17", "malformed 'Status"),
        ("Upstream", "PR 123", "malformed 'Upstream"),
        ("Obsolete-in", "soon", "malformed 'Obsolete-in"),
    ],
)
def test_malformed_trailer(tmp_path, key, value, message, bad_input):
    trailers = {"Upstream": "none", "Status": "proposed", "Verify": "x", "Drop-when": "y"}
    trailers[key] = value
    with pytest.raises(PatchbenchError, match=message) as info:
        parse_patch(_patch(tmp_path, trailers=trailers))
    bad_input(f"a malformed trailer value ({key}: {value})", str(info.value))


def test_not_a_patch(tmp_path, bad_input):
    path = tmp_path / "0001-x.patch"
    path.write_text("hello\n")
    with pytest.raises(PatchbenchError, match="not a git format-patch file") as info:
        parse_patch(path)
    bad_input("a `.patch` file that is not a git format-patch file", str(info.value))


def test_binary_garbage(tmp_path, bad_input):
    path = tmp_path / "0001-x.patch"
    path.write_bytes(b"From \xff\xfe\x00garbage")
    with pytest.raises(PatchbenchError, match="not UTF-8") as info:
        parse_patch(path)
    bad_input("a `.patch` file that is not UTF-8 text", str(info.value))


def test_series_order_comments_and_missing_file(tmp_path):
    directory = tmp_path / "1.0.0"
    directory.mkdir()
    _patch(directory, "0001-a.patch")
    _patch(directory, "0002-b.patch")
    (directory / "series").write_text("# comment\n0002-b.patch\n\n0001-a.patch\n")
    assert [p.name for p in read_series("1.0.0", tmp_path)] == ["0002-b.patch", "0001-a.patch"]
    write_series(directory, ["0001-a.patch", "0003-c.patch"])
    with pytest.raises(PatchbenchError, match="names 0003-c.patch, which does not exist"):
        read_series("1.0.0", tmp_path)


def test_no_series_is_empty(tmp_path):
    assert read_series("1.0.0", tmp_path) == []


def _patch_with_message(tmp_path, message: str):
    text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: a <a@b>\nDate: Mon, 23 Nov 2026 00:00:00 +0000\n"
        f"Subject: [Perf] Faster x\n\n{message}\n---\n{DIFF}"
    )
    path = tmp_path / "0001-x.patch"
    path.write_text(text)
    return parse_patch(path)


def test_wrapped_lower_case_and_signed_off_paragraph_are_trailers(tmp_path):
    message = (
        "Why: because.\n\n"
        "upstream: none\nSTATUS: local\n"
        "Verify: tests/equivalence/test_x.py and the upstream tests of\n"
        "  tests/v1/sample (pytest -q)\n"
        "drop-when: never\nObsolete-in: 0.30.0\nFixes: GHSA-8wr5-jm2h-8r4f\n\n"
        "Signed-off-by: Pat Contributor <pat@contributor.example>"
    )
    patch = _patch_with_message(tmp_path, message)
    assert patch.trailers["Verify"] == (
        "tests/equivalence/test_x.py and the upstream tests of tests/v1/sample (pytest -q)"
    )
    assert patch.status == "local" and patch.upstream == "none"
    assert patch.obsolete_in == "0.30.0"
    assert patch.trailers["Fixes"] == "GHSA-8wr5-jm2h-8r4f"
    assert patch.trailers["Signed-off-by"].startswith("Pat Contributor")


def test_prose_paragraph_is_not_taken_for_trailers(tmp_path, bad_input):
    message = "Upstream: none\nStatus: local\n\nThis paragraph is prose, not trailers.\nIt ends."
    with pytest.raises(PatchbenchError, match="missing metadata trailer") as info:
        _patch_with_message(tmp_path, message)
    bad_input("metadata trailers followed by a prose paragraph", str(info.value))


def test_duplicate_entry_is_named(tmp_path, bad_input):
    directory = tmp_path / "1.0.0"
    directory.mkdir()
    _patch(directory, "0001-a.patch")
    (directory / "series").write_text("0001-a.patch\n0001-a.patch\n")
    with pytest.raises(PatchbenchError, match="lists 0001-a.patch more than once") as info:
        read_series("1.0.0", tmp_path)
    bad_input("the same patch twice in `series`", str(info.value))
