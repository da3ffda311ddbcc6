"""Keep one GPU architecture's device code in a CUDA extension (.so), so that an older vLLM
wheel, built for eight architectures, fits the device runs' carry limit.

A CUDA extension holds its device code in the ELF section `.nv_fatbin`: one fat binary per
compiled source file, each a list of entries (an ELF cubin for one SM architecture, or PTX for
one virtual architecture). The H100 runs an `sm_90` cubin, or else PTX of `compute_90` or
lower, JIT-compiled by the driver. `keep_arch` zeroes the payload of every other entry in place
(headers, sizes and file layout unchanged, so the loader sees the same file; the zeros compress
to nothing): in a fat binary that has an `sm_<arch>` cubin, every other entry; in one without,
every cubin and every PTX above `compute_<arch>` (code the device could never run). Standard
library only."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
CUBIN, PTX = 2, 1
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY_HEADER = struct.Struct("<HHIQ")  # kind, version, header size, payload size
_ARCH_OFFSET = 28  # uint32 SM architecture (90 = sm_90 / compute_90) within an entry header


class FatbinError(ValueError):
    """The file is not an ELF with a well-formed `.nv_fatbin` section."""


@dataclass(frozen=True)
class Entry:
    fatbin: int  # index of its fat binary in the section
    payload: int  # offset of its payload in the file
    size: int
    kind: int  # CUBIN or PTX
    arch: int


def section(elf: bytes | bytearray, name: str = ".nv_fatbin") -> tuple[int, int]:
    """(file offset, size) of section `name` of a little-endian ELF64 file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise FatbinError("not a little-endian ELF64 file")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for sh_name, _type, _flags, _addr, offset, size in headers:
        end = elf.index(b"\0", names_at + sh_name)
        if elf[names_at + sh_name : end].decode() == name:
            return offset, size
    raise FatbinError(f"no {name} section (no CUDA device code)")


def entries(elf: bytes | bytearray) -> Iterator[Entry]:
    """Every entry of every fat binary in the file's `.nv_fatbin` section."""
    start, size = section(elf)
    end, pos, index = start + size, start, 0
    while pos + _FATBIN_HEADER.size <= end:
        magic, _version, header_size, entries_size = _FATBIN_HEADER.unpack_from(elf, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fat binaries are 8-byte aligned, with zero padding between them
            continue
        entry, last = pos + header_size, pos + header_size + entries_size
        if last > end:
            raise FatbinError(f"fat binary at {pos:#x} runs past the section's end")
        while entry < last:
            kind, _version, entry_header, payload = _ENTRY_HEADER.unpack_from(elf, entry)
            arch = struct.unpack_from("<I", elf, entry + _ARCH_OFFSET)[0]
            yield Entry(index, entry + entry_header, payload, kind, arch)
            entry += entry_header + payload
        pos, index = last, index + 1


def unusable(group: list[Entry], arch: int) -> list[Entry]:
    """The entries of one fat binary that a device of `arch` never loads."""
    if any(e.kind == CUBIN and e.arch == arch for e in group):
        return [e for e in group if not (e.kind == CUBIN and e.arch == arch)]
    return [e for e in group if e.kind == CUBIN or e.arch > arch]


def keep_arch(elf: bytearray, arch: int) -> dict[str, int]:
    """Zero, in place, the device code that an `sm_<arch>` GPU never loads; returns the bytes
    kept and zeroed, and the number of fat binaries."""
    groups: dict[int, list[Entry]] = {}
    for entry in entries(elf):
        groups.setdefault(entry.fatbin, []).append(entry)
    zeroed = 0
    for group in groups.values():
        for entry in unusable(group, arch):
            elf[entry.payload : entry.payload + entry.size] = bytes(entry.size)
            zeroed += entry.size
    total = sum(e.size for group in groups.values() for e in group)
    return {"fatbins": len(groups), "kept_bytes": total - zeroed, "zeroed_bytes": zeroed}
