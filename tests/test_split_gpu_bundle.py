"""scripts/split_gpu_bundle.py on a small stand-in bundle: the pieces join into the same
archive, each fits a call beside the tracked files, and bad input is a named error."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "split_gpu_bundle.py"
spec = importlib.util.spec_from_file_location("split_gpu_bundle", SCRIPT)
split_gpu_bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(split_gpu_bundle)


def stand_in_bundle(root: Path, size: int = 10_001) -> bytes:
    """.gpu/a and .gpu/b as make-bundle.py leaves them: one archive cut in two."""
    whole = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    names = ["vllm.tar.xz.00", "vllm.tar.xz.01"]
    manifest = {"vllm": "0.22.0", "pieces": names, "sha256": hashlib.sha256(whole).hexdigest()}
    for folder, name, part in zip(
        "ab", names, (whole[: size // 2], whole[size // 2 :]), strict=True
    ):
        (root / folder).mkdir(parents=True)
        (root / folder / name).write_bytes(part)
        (root / folder / "manifest.json").write_text(json.dumps(manifest))
        (root / folder / "install.sh").write_text("#!/bin/sh\n")
    return whole


@pytest.mark.parametrize(
    ("total", "tracked", "beside", "count"),
    [(100, 10, 0, 1), (116_432_776, 9_042_535, 0, 3), (116_432_776, 10_200_000, 1_181_400, 3)],
)
def test_the_fewest_pieces_that_fit_beside_the_tracked_files(total, tracked, beside, count):
    assert split_gpu_bundle.piece_count(total, tracked, beside) == count
    size = -(-total // count)
    assert size + tracked + beside + split_gpu_bundle.SPARE <= split_gpu_bundle.CARRY_LIMIT


def test_two_pieces_no_longer_fit_beside_9_mb_of_tracked_files():
    # 58.2 MB a piece and 9.04 MB tracked exceeded 64 MiB
    assert split_gpu_bundle.piece_count(2 * 58_216_388, 9_042_535, 0) > 2


def test_no_room_at_all_is_a_named_error():
    with pytest.raises(SystemExit, match="no room for a piece"):
        split_gpu_bundle.piece_count(100, 64 * 2**20, 0)


def test_the_pieces_join_into_the_same_archive(tmp_path):
    whole = stand_in_bundle(tmp_path)
    folders = split_gpu_bundle.split([tmp_path / "a", tmp_path / "b"], tmp_path, 3)
    assert [f.name for f in folders] == ["p1", "p2", "p3"]
    manifests = [json.loads((f / "manifest.json").read_text()) for f in folders]
    names = manifests[0]["pieces"]
    assert names == ["vllm.tar.xz.00", "vllm.tar.xz.01", "vllm.tar.xz.02"]
    assert all(m["pieces"] == names and m["vllm"] == "0.22.0" for m in manifests)
    joined = b"".join((f / n).read_bytes() for f, n in zip(folders, names, strict=True))
    assert joined == whole and hashlib.sha256(joined).hexdigest() == manifests[0]["sha256"]
    assert all((f / "install.sh").exists() for f in folders)


def test_pieces_that_do_not_match_their_manifest_are_refused(tmp_path):
    stand_in_bundle(tmp_path)
    (tmp_path / "b" / "vllm.tar.xz.01").write_bytes(b"truncated")
    with pytest.raises(SystemExit, match="do not match their manifest"):
        split_gpu_bundle.split([tmp_path / "a", tmp_path / "b"], tmp_path, 3)
    assert not (tmp_path / "p1").exists()


def test_a_missing_bundle_names_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="make-bundle.py"):
        split_gpu_bundle.main(["--src", str(tmp_path / "a"), "--repo", str(tmp_path)])
