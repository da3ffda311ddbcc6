"""verify.gpu.fatbin on synthetic ELF files: only the device code an sm_90 GPU could load keeps
its bytes; the file's size and every header stay as they were. And the bundle packer's split."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

from verify.gpu import fatbin
from verify.gpu.fatbin import CUBIN, PTX

ENTRY_HEADER = 64


def make_fatbin(entries: list[tuple[int, int, bytes]]) -> bytes:
    body = b""
    for kind, arch, payload in entries:
        header = bytearray(ENTRY_HEADER)
        struct.pack_into("<HHIQ", header, 0, kind, 0x0101, ENTRY_HEADER, len(payload))
        struct.pack_into("<I", header, 28, arch)
        body += bytes(header) + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def make_elf(sections: dict[str, bytes]) -> bytearray:
    """An ELF64 file: header, the sections' data, a name table, then the section headers."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    data, offsets = bytearray(64), {}
    for name, content in [*sections.items(), (".shstrtab", names)]:
        offsets[name] = (len(data), len(content))
        data += content + bytes(-len(content) % 8)
    shoff = len(data)
    data += bytes(64)  # the null section
    for name, (offset, size) in offsets.items():
        header = bytearray(64)
        struct.pack_into(
            "<IIQQQQ", header, 0, names.index(name.encode() + b"\0"), 1, 0, 0, offset, size
        )
        data += header
    data[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(offsets) + 1, len(offsets))
    return data


def payload(tag: int, size: int = 32) -> bytes:
    return bytes([tag]) * size


@pytest.fixture
def elf() -> bytearray:
    with_90 = [(CUBIN, 80, payload(1)), (CUBIN, 90, payload(2)), (PTX, 90, payload(3)),
               (CUBIN, 100, payload(4))]  # fmt: skip
    without_90 = [(CUBIN, 80, payload(5)), (PTX, 80, payload(6)), (CUBIN, 120, payload(7)),
                  (PTX, 100, payload(8))]  # fmt: skip
    section = make_fatbin(with_90) + bytes(8) + make_fatbin(without_90)  # padding between
    return make_elf({".text": payload(9, 40), ".nv_fatbin": section})


def kept(data: bytes) -> set[tuple[int, int]]:
    """(kind, arch) of the entries whose payload is not all zeros."""
    return {
        (e.kind, e.arch) for e in fatbin.entries(data) if any(data[e.payload : e.payload + e.size])
    }


def test_only_what_an_sm90_gpu_can_load_keeps_its_bytes(elf):
    before = bytes(elf)
    stats = fatbin.keep_arch(elf, 90)
    # with an sm_90 cubin: that cubin alone; without one: PTX the driver can JIT for sm_90
    assert kept(elf) == {(CUBIN, 90), (PTX, 80)}
    assert stats == {"fatbins": 2, "kept_bytes": 64, "zeroed_bytes": 6 * 32}
    assert len(elf) == len(before)
    headers = {e.payload for e in fatbin.entries(before)}
    assert [e.payload for e in fatbin.entries(elf)] == sorted(headers)  # layout unchanged
    assert elf[64:104] == before[64:104]  # other sections untouched


def test_every_entry_is_found_with_its_kind_and_arch(elf):
    found = [(e.fatbin, e.kind, e.arch, elf[e.payload]) for e in fatbin.entries(elf)]
    first = [(0, CUBIN, 80, 1), (0, CUBIN, 90, 2), (0, PTX, 90, 3), (0, CUBIN, 100, 4)]
    second = [(1, CUBIN, 80, 5), (1, PTX, 80, 6), (1, CUBIN, 120, 7), (1, PTX, 100, 8)]
    assert found == first + second


def test_files_without_device_code_are_named_errors():
    with pytest.raises(fatbin.FatbinError, match="not a little-endian ELF64"):
        fatbin.keep_arch(bytearray(b"PK\x03\x04" + bytes(60)), 90)
    with pytest.raises(fatbin.FatbinError, match="no .nv_fatbin section"):
        fatbin.keep_arch(make_elf({".text": payload(1)}), 90)
    truncated = make_fatbin([(CUBIN, 90, payload(1))])[:-8]
    with pytest.raises(fatbin.FatbinError, match="runs past the section's end"):
        fatbin.keep_arch(make_elf({".nv_fatbin": truncated}), 90)


def test_the_packer_splits_into_equal_pieces_that_join_back(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "pack_gpu_bundle", Path(__file__).parent.parent / "scripts" / "pack_gpu_bundle.py"
    )
    packer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packer)
    archive = tmp_path / "vllm.tar.xz"
    archive.write_bytes(bytes(range(256)) * 41)  # 10496 bytes
    names = packer.split(archive, tmp_path / "out", 4000)
    assert names == ["vllm.tar.xz.00", "vllm.tar.xz.01", "vllm.tar.xz.02"]
    pieces = [tmp_path / "out" / f / n for f, n in zip("abc", names, strict=True)]
    assert all(p.stat().st_size <= 4000 for p in pieces)
    assert b"".join(p.read_bytes() for p in pieces) == archive.read_bytes()
    assert packer.split(archive, tmp_path / "two", 58 << 20, pieces=2) == names[:2]
    assert (tmp_path / "two" / "b" / names[1]).stat().st_size == 10496 // 2
