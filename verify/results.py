"""Result files: every verification step writes one JSON that reports are built from.

Schema (``schema: 2``)::

    step        e.g. "equivalence-penalty-state-device", "e2e-token-identity", "kernel-010"
    seed        legacy grouping label ("000".."010" or "series"); reports do not read it
    patches     {patch id: diff hash}: the registry entries (patches/registry/) whose steps name
                this record, each with the hash of that patch's diff when the record was made
    harness_hash  hash of the harness files the registry names for this record's steps
    vllm_version, series_hash, date (UTC ISO), command (exact)
    machine     {python, cpu, gpu, ...}: read on the machine that ran it; a field the run did
                not record says "unknown (not recorded by the run)"
    outcome     one of verify.verdicts.OUTCOMES      reason: why (required unless pass)
    numbers     measurements; tables: optional list of markdown tables
    key_table   optional: the one markdown table a PR report shows for the step (only present
                when the step writes one)

Staleness is per patch (`staleness`): the patch's diff changed, the harness changed, or the
record was made from a tree that was not the stamped series. Why the diff and not the whole
file: rewording a commit message does not change what was measured; any code change does, and
so does a change to the patch's own test files for the records of upstream-tests steps (the
only steps that run them). A tests-only change is found in the repository's history: the
committed form with the recorded diff hash has the same diff outside ``tests/`` as now. A
record written through the older call (no ``patches``) is attributed through the registry's
record names, with the current diff hashes when its series hash is current.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from verify import paths, registry, verdicts
from verify.errors import RecordError
from verify.series import hash_series, manifest_names, read_series, series_dir, series_hash

OUTCOMES = (*verdicts.OUTCOMES, "n/a")  # "n/a": older records, read as "not applicable"
UNKNOWN = "unknown (not recorded by the run)"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_facts() -> dict[str, Any]:
    """Python, CPU model, CPU count and platform of the machine running this (read here)."""
    return {
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
    }


def make(
    step: str,
    seed: str,
    version: str,
    outcome: str,
    numbers: dict[str, Any] | None = None,
    *,
    reason: str = "",
    command: str | None = None,
    gpu: str | None = None,
    tables: list[str] | None = None,
    machine: dict[str, Any] | None = None,
    patches: list[str] | None = None,
    date: str | None = None,
    stamped_series: str | None = None,
    key_table: str | None = None,
) -> dict[str, Any]:
    """A record. `machine`: provenance read on the machine that ran it (default: this machine,
    for steps that run here); `patches`: the patch ids it covers (default: from the registry);
    `stamped_series`: the series hash the measured tree was applied from, when known."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
    if outcome != "pass" and not reason:
        raise ValueError(f"a {outcome!r} result needs a reason")
    if machine is None:
        machine = {"cpu": cpu_model(), "gpu": gpu, "python": platform.python_version()}
    current = series_hash(version)
    record = {
        "schema": 2,
        "step": step,
        "seed": seed,
        "vllm_version": version,
        "series_hash": current,
        "patches": patch_hashes(version, step, patches),
        "harness_hash": harness_of(version, step),
        "machine": machine,
        "date": date or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command or shlex.join([Path(sys.executable).name, *sys.argv]),
        "outcome": outcome,
        "reason": reason,
        "numbers": numbers or {},
        "tables": tables or [],
    }
    if stamped_series is not None:
        record["stamped_series"] = stamped_series
    if key_table:
        record["key_table"] = key_table
    return record


def _steps_naming(
    version: str, step: str, registry_root: Path | None = None
) -> list[registry.Step]:
    found = registry.naming(version, step, registry.load(registry_root))
    return [s for e, s in found if version in e.pins]


def patch_hashes(
    version: str,
    step: str,
    ids: list[str] | None = None,
    patches_root: Path | None = None,
    registry_root: Path | None = None,
) -> dict[str, str]:
    """{patch id: current diff hash} of the patches `step` is evidence for on `version`."""
    entries = registry.load(registry_root)
    ids = registry.patches_for_record(version, step, entries) if ids is None else ids
    by_subject = {p.subject: p for p in read_series(version, patches_root)}
    out = {}
    for slug in ids:
        patch = by_subject.get(entries[slug].pins.get(version, "")) if slug in entries else None
        out[slug] = registry.diff_hash(patch) if patch else "unknown"
    return out


def _tests_only_change(
    version: str,
    step: str,
    slug: str,
    recorded: str,
    patches_root: Path | None = None,
    registry_root: Path | None = None,
) -> bool:
    """Whether patch `slug` changed since `recorded` only in its own test files, and record
    `step` runs none of them (no upstream-tests step names it): its evidence is still current."""
    if any(s.kind == "upstream-tests" for s in _steps_naming(version, step, registry_root)):
        return False
    entry = registry.load(registry_root).get(slug)
    subject = entry.pins.get(version, "") if entry else ""
    patch = next((p for p in read_series(version, patches_root) if p.subject == subject), None)
    return patch is not None and registry.tests_only_change(patch, recorded)


def harness_of(version: str, step: str, registry_root: Path | None = None) -> str:
    """Hash of every harness file the registry names for record `step` on `version`."""
    files = sorted({f for s in _steps_naming(version, step, registry_root) for f in s.harness})
    return registry.harness_hash(files)


def tree_stamp(
    version: str, build_root: Path | None = None, patches_root: Path | None = None
) -> str | None:
    """What the build tree of `version` holds: the current series hash when its commits after
    ``pristine`` carry exactly the diffs of the series' patches, in order; otherwise
    "differs from <hash>"; None when there is no build tree. Records made from that tree are
    stamped with it (`make(stamped_series=...)`), so a record of a tree that was not the series
    is named stale ("tree not the stamped series")."""
    import tempfile

    from verify.buildtree import BuildTree

    tree = BuildTree(version, build_root, patches_root)
    if not tree.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        tree_hashes = [
            registry.diff_hash_text(path.read_text(encoding="utf-8"))
            for path in tree._format_patch(Path(tmp))
        ]
    current = series_hash(version, patches_root)
    series = [registry.diff_hash(p) for p in read_series(version, patches_root)]
    return current if tree_hashes == series else f"differs from {current}"


def restamp(record: dict[str, Any], recorded_series: str) -> None:
    """Give an imported `record` the series hash its run recorded (when that series' code is
    not the current one, the current per-patch diff hashes do not describe the run: "unknown")
    and no harness hash (the run did not record one; staleness then rests on the patch hashes)."""
    record["series_hash"] = recorded_series
    record["harness_hash"] = None  # an imported run did not record the harness it ran
    if not same_code_series(record["vllm_version"], recorded_series):
        record["patches"] = dict.fromkeys(record["patches"], "unknown")


def same_code_series(version: str, recorded: str, patches_root: Path | None = None) -> bool:
    """Whether the series of `version` whose hash was `recorded` (now, or at a commit of its
    folder) did what today's does: the same diffs in the same order. A reworded message
    changes the series hash, not the code (`registry.diff_hash`)."""
    if recorded == series_hash(version, patches_root):
        return True
    current = tuple(registry.diff_hash(p) for p in read_series(version, patches_root))
    return _committed_diffs(str(series_dir(version, patches_root)), recorded) == current


@functools.cache
def _committed_diffs(directory: str, recorded: str) -> tuple[str, ...] | None:
    """Diff hashes, in series order, of the newest commit of `directory` whose series hash
    (`hash_series`) is `recorded`; None where none is, or git history is not at hand."""
    import git

    try:
        repo = git.Repo(directory, search_parent_directories=True)
        rel = Path(directory).resolve().relative_to(Path(repo.working_tree_dir).resolve())
        for rev in repo.git.rev_list("HEAD", "--", rel.as_posix()).split():
            tree = repo.commit(rev).tree / rel.as_posix()
            manifest = (tree / "series").data_stream.read()
            present = {blob.name for blob in tree.blobs}
            names = [n for n in manifest_names(manifest) if n in present]
            blobs = [(n, (tree / n).data_stream.read()) for n in names]
            if hash_series(manifest, blobs) == recorded:
                return tuple(registry.diff_hash_text(d.decode()) for _, d in blobs)
    except (git.GitError, ValueError, KeyError, OSError):
        return None
    return None


def staleness(
    record: dict[str, Any],
    slug: str,
    version: str,
    patches_root: Path | None = None,
    registry_root: Path | None = None,
) -> str:
    """Empty when the record is current evidence for patch `slug`, else the named reason."""
    stamped = record.get("stamped_series")
    if stamped and stamped != record.get("series_hash"):
        return f"tree not the stamped series (tree {stamped}, record {record.get('series_hash')})"
    recorded = record.get("patches", {}).get(slug)
    step = record.get("step", "")
    current = patch_hashes(version, step, [slug], patches_root, registry_root)[slug]
    if recorded in (None, "unknown"):
        if not same_code_series(version, record.get("series_hash") or "", patches_root):
            return f"recorded for series {record.get('series_hash')} without per-patch hashes"
    elif recorded != current and not _tests_only_change(
        version, step, slug, recorded, patches_root, registry_root
    ):
        return f"patch changed (diff {recorded} -> {current})"
    harness = record.get("harness_hash")
    if harness and harness != harness_of(version, step, registry_root):
        return "harness changed"
    return ""


def write(result: dict[str, Any], tier: str, name: str, root: Path | None = None) -> Path:
    """Write `result` to ``results/<tier>/<version>/<name>.json`` atomically."""
    path = (root or paths.results_root()) / tier / result["vllm_version"] / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


#: Keys every record carries, by schema (`make` writes schema 2; the importer re-judges 1).
REQUIRED = {
    2: ("schema", "step", "seed", "vllm_version", "series_hash", "patches", "harness_hash",
        "machine", "date", "command", "outcome", "reason", "numbers", "tables"),
}  # fmt: skip
REQUIRED[1] = tuple(k for k in REQUIRED[2] if k not in ("patches", "harness_hash"))


def _shown(path: Path) -> str:
    """`path` relative to the working folder where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _json_problem(text: str, size: int, exc: json.JSONDecodeError) -> str:
    where = f"line {exc.lineno} column {exc.colno}"
    # the text ends inside a string, a literal or a number, or before a value or a bracket
    if exc.msg.startswith("Unterminated string") or re.fullmatch(r"[\w.+-]*\s*", text[exc.pos :]):
        return f"not JSON: truncated at byte {size} ({exc.msg}, {where})"
    return f"not JSON at byte {len(text[: exc.pos].encode())} ({exc.msg}, {where})"


def newest_run(runs: list[Path]) -> tuple[Path, dict[str, Any]]:
    """(path, content) of the run of `runs` with the latest recorded `date` (each read once)."""
    loaded = {path: read_json(path) for path in runs}
    path = max(loaded, key=lambda p: loaded[p].get("date", ""))
    return path, loaded[path]


def read_json(path: Path) -> Any:
    """The JSON value in results file `path`; RecordError (naming the file and what is wrong)
    when it is empty, not UTF-8 text, not JSON, or ``{}`` (neither a record nor a measurement)."""
    data = path.read_bytes()
    if not data.strip():
        raise RecordError(_shown(path), f"empty ({len(data)} bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(_shown(path), f"not UTF-8 text at byte {exc.start}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(_shown(path), _json_problem(text, len(data), exc)) from None
    if value == {}:
        keys = ", ".join(REQUIRED[2])
        raise RecordError(_shown(path), f"an empty JSON object: missing required keys {keys}")
    return value


def is_record(data: Any) -> bool:
    """Whether a results file's content must be read as a record: anything but a raw
    measurement file kept beside the records (a non-empty object with no ``schema`` and no
    ``outcome`` key)."""
    return not isinstance(data, dict) or "schema" in data or "outcome" in data


def check_record(data: Any, path: Path) -> dict[str, Any]:
    """`data` (read from `path`) when it is a well-formed record, else RecordError."""
    if not isinstance(data, dict):
        raise RecordError(_shown(path), f"not a record: a JSON {type(data).__name__}")
    schema = data.get("schema", 2)
    if schema not in REQUIRED:
        raise RecordError(_shown(path), f"not a record: schema {schema!r} (known: 1, 2)")
    missing = [k for k in REQUIRED[schema] if k not in data]
    if missing:
        raise RecordError(_shown(path), f"not a record: missing required keys {', '.join(missing)}")
    if data["outcome"] not in OUTCOMES:
        raise RecordError(_shown(path), f"outcome {data['outcome']!r} is not one of {OUTCOMES}")
    return data


def read_record(path: Path) -> dict[str, Any] | None:
    """The record in `path`; None for a raw measurement file; RecordError for a file that
    cannot be read or a record that lacks what every record has."""
    data = read_json(path)
    return check_record(data, path) if is_record(data) else None


def load_all(version: str, root: Path | None = None) -> list[dict[str, Any]]:
    """Every record of `version` under results/ (any tier), with its path added; raw
    measurement files kept beside them are not records. A file that cannot be read, or a
    record missing a required key, is a RecordError: nothing is skipped silently."""
    found = []
    for path in sorted((root or paths.results_root()).glob(f"*/{version}/*.json")):
        data = read_record(path)
        if data is not None:
            data["_path"] = str(path)
            found.append(data)
    return found


def now() -> str:
    """The current UTC time in the form records carry in ``date``."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def step_verdict(
    version: str, names: tuple[str, ...] | list[str], since: str, root: Path | None = None
) -> verdicts.Verdict:
    """A pipeline step's verdict from the records `names` it wrote at or after `since`
    (`now()` when it started): their outcomes combined (`verdicts.combine`), the reason the
    first line of each worst record's reason; a record not written since then is `not run`."""
    found = {r["step"]: r for r in load_all(version, root) if r.get("step") in names}
    parts = []
    for name in names:
        record = found.get(name)
        if record is None or str(record.get("date", "")) < since:
            parts.append(verdicts.Verdict(verdicts.NOT_RUN, f"{name}: no record from this run"))
            continue
        outcome = verdicts.NOT_APPLICABLE if record["outcome"] == "n/a" else record["outcome"]
        first = (record.get("reason") or "").strip().splitlines()[:1]
        parts.append(verdicts.Verdict(outcome, f"{name}: {first[0] if first else outcome}"))
    return verdicts.combine(parts)
