"""Turn a pytest JUnit XML of `tests/equivalence` into one result file per test module.

`python -m verify.equivalence.record <version> <junit.xml> [--command ...]` writes
``results/cpu/<version>/equivalence-<module>.json`` (counts, failing test ids; the module's
name without ``test_``, dashed) and exits 1 if any test failed, 0 otherwise.
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from verify import registry, results

_MODULE = re.compile(r"(?:^|\.)test_(\w+)$")


def group_of(classname: str) -> str | None:
    """The record group of a test: its module's name (`test_penalty_state_device` ->
    `penalty-state-device`), one record per module, so each record's harness is its file."""
    found = _MODULE.search(classname)
    return found.group(1).replace("_", "-") if found else None


def summarize(junit: Path) -> dict[str, dict[str, list[str]]]:
    """{group: {"passed": [...], "failed": [...], "skipped": [...]}} from a JUnit XML file (the
    group: `group_of`)."""
    groups: dict[str, dict[str, list[str]]] = defaultdict(
        lambda: {"passed": [], "failed": [], "skipped": []}
    )
    for case in ET.parse(junit).getroot().iter("testcase"):
        where = f"{case.get('classname', '')}.{case.get('name', '')}"
        group = group_of(case.get("classname", ""))
        if group is None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            kind = "failed"
        elif case.find("skipped") is not None:
            kind = "skipped"
        else:
            kind = "passed"
        groups[group][kind].append(where)
    return dict(groups)


def per_file(groups: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """{tests/equivalence/<file>.py: {passed, failed, skipped}}: the registry names test files,
    so a report can count the tests of one patch's files."""
    files: dict[str, dict[str, int]] = {}
    for kind, ids in groups.items():
        for where in ids:
            module = where.rsplit(".", 1)[0] if "." in where else where
            path = module.replace(".", "/") + ".py"
            files.setdefault(path, {"passed": 0, "failed": 0, "skipped": 0})[kind] += 1
    return files


def modules_named_on(pin: str) -> set[str]:
    """The files that the registry's steps on `pin` name as their harness: the equivalence
    modules that run there (tests/equivalence/conftest.py skips the others)."""
    return {
        path
        for entry in registry.load().values()
        if pin in entry.pins
        for step in entry.steps_on(pin)
        for path in step.harness
    }


def record(
    version: str,
    junit: Path,
    command: str,
    root: Path | None = None,
    stamped: str | None = None,
) -> bool:
    """Write the per-module result files, stamped with what the tested build tree holds
    (`results.tree_stamp`, unless given); True if nothing failed."""
    ok = True
    stamped = stamped if stamped is not None else results.tree_stamp(version)
    named = modules_named_on(version)
    for group, groups in sorted(summarize(junit).items()):
        files = per_file(groups)
        if not any(f in named for f in files):
            continue  # the module does not run on this pin: no record of it there
        counts = {kind: len(ids) for kind, ids in groups.items()}
        if groups["failed"]:
            outcome, reason, ok = "fail", f"{counts['failed']} test(s) failed", False
        elif groups["passed"]:
            outcome, reason = "pass", ""
        else:
            outcome, reason = "not run", "every test was skipped for this pin"
        numbers = {**counts, "failed_tests": groups["failed"][:20], "files": files}
        result = results.make(
            f"equivalence-{group}", group, version, outcome, numbers, reason=reason,
            command=command, stamped_series=stamped,
        )  # fmt: skip
        results.write(result, "cpu", f"equivalence-{group}", root)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("version")
    parser.add_argument("junit", type=Path)
    parser.add_argument("--command", default="")
    args = parser.parse_args(argv)
    command = args.command or f"nox -s equivalence-{args.version}"
    return 0 if record(args.version, args.junit, command) else 1


if __name__ == "__main__":
    raise SystemExit(main())
