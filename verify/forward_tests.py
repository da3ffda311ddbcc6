"""Forward tests: the tests of the release that merged a change, run against the older pin that
carries the change as a backport.

`python -m verify.forward_tests 0.16.0` runs every [[forward]] entry of the pin in
patches/upstream-tests.toml: release X's test file (read from X's sdist, cached) with the
smallest adapter that lets it run here (exact text replacements, each of which must match,
recorded in the result), placed into the pin's own
``tests/`` tree, under pytest on the pin's patched code and, as a control, on its pristine code.
Per test: ``pass`` / ``fail`` / ``not applicable`` (it covers another change of X, named) /
``not run`` (skipped, with pytest's reason). The step fails if an applicable test fails on the
patched code, and is ``not run`` if none ran.

Runs on CPU in the current interpreter (torch, triton and the pin's requirements, as the
equivalence sessions have), vLLM imported from the build tree's roots (`verify.equivalence.
roots`), Triton kernels interpreted (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from verify import pins, results
from verify.errors import PatchbenchError
from verify.progress import say
from verify.series import read_series
from verify.upstream_code import ReleaseFiles
from verify.upstream_tests import parse_junit
from verify.versions import require_pinned

TEST_ENV = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
RUN_TIMEOUT_S = 1800


@dataclass(frozen=True)
class ForwardSpec:
    """Release `release`'s tests of `test_file` (pytest ``-k select``) against patch `subject`."""

    seed: str
    subject: str
    release: str
    test_file: str
    select: str
    adapter: tuple[tuple[str, str], ...] = ()
    adapter_why: str = ""
    not_applicable: dict[str, str] = field(default_factory=dict)  # test-name prefix -> change


def specs(version: str) -> list[ForwardSpec]:
    """The pin's forward specs (patches/upstream-tests.toml's [[forward]])."""
    return [
        ForwardSpec(
            seed=e["seed"],
            subject=e["subject"],
            release=e["release"],
            test_file=e["test_file"],
            select=e["select"],
            adapter=tuple((old, new) for old, new in e["adapter"]),
            adapter_why=e["adapter_why"],
            not_applicable=dict(e.get("not_applicable", {})),
        )  # fmt: skip
        for e in pins.upstream_tests("forward", version)
    ]


def adapt(text: str, spec: ForwardSpec) -> str:
    """Apply the spec's adapter; every replacement must match exactly once."""
    for old, new in spec.adapter:
        count = text.count(old)
        if count != 1:
            raise PatchbenchError(
                f"forward-test adapter for {spec.release}:{spec.test_file} expects {old!r} "
                f"once, found it {count} time(s); update patches/upstream-tests.toml's [[forward]]"
            )
        text = text.replace(old, new)
    return text


def classify(outcomes: dict[str, str], spec: ForwardSpec, skips: dict[str, str]) -> list[dict]:
    """Per test of the patched run: pass / fail / not applicable / not run."""
    rows = []
    for test, outcome in sorted(outcomes.items()):
        name = test.split("::")[-1]
        other = next((c for p, c in spec.not_applicable.items() if name.startswith(p)), None)
        row = {"test": test, "pytest": outcome}
        if other:
            row.update(verdict="not applicable", reason=f"covers {other}")
        elif outcome == "skipped":
            row.update(verdict="not run", reason=skips.get(test, "skipped by pytest"))
        else:
            row.update(verdict="pass" if outcome == "passed" else "fail", reason="")
        rows.append(row)
    return rows


def _skip_reasons(junit: Path, files: list[str]) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    out = {}
    ids = list(parse_junit(junit, files))
    for case, test in zip(ET.parse(junit).getroot().iter("testcase"), ids, strict=True):
        skipped = case.find("skipped")
        if skipped is not None:
            out[test] = skipped.get("message", "skipped")
    return out


def _run_side(root: Path, spec: ForwardSpec, text: str, python: str, label: str) -> tuple:
    """pytest on X's adapted file inside a copy of `root`'s tests tree; (outcomes, skips, rc)."""
    with tempfile.TemporaryDirectory(prefix=f"forward-{label}-") as tmp:
        work = Path(tmp)
        for name in ("vllm", "vllm.egg-info"):
            if (root / name).exists():
                (work / name).symlink_to(root / name)
        shutil.copytree(root / "tests", work / "tests")
        (work / spec.test_file).write_text(text)
        junit = work / "junit.xml"
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--noconftest", f"--junitxml={junit}", spec.test_file,
               "-k", spec.select]  # fmt: skip
        env = dict(os.environ, **TEST_ENV)
        env.pop("PYTHONPATH", None)
        say(f"forward {spec.release} -> {label}: pytest {spec.test_file} -k {spec.select}")
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)  # fmt: skip
        if not junit.exists():
            said = (proc.stdout + proc.stderr)[-2000:]
            raise PatchbenchError(
                f"pytest wrote no report ({label}; does {python} have pytest, torch and "
                f"triton? `nox -s equivalence-<pin>` makes such an interpreter): {said}"
            )
        outcomes = parse_junit(junit, [spec.test_file])
        return outcomes, _skip_reasons(junit, [spec.test_file]), proc.returncode, proc.stdout


def run_spec(version: str, spec: ForwardSpec, python: str, files: ReleaseFiles) -> dict:
    from verify.equivalence.roots import materialize

    names = {p.subject: p.name for p in read_series(version)}
    if spec.subject not in names:
        raise PatchbenchError(f"no patch {spec.subject!r} in the {version} series")
    source = files.read(spec.release, spec.test_file)
    if source is None:
        raise PatchbenchError(f"vLLM {spec.release} ships no {spec.test_file}")
    text = adapt(source, spec)
    pristine_root, patched_root = materialize(version)
    patched, skips, rc, log = _run_side(patched_root, spec, text, python, "patched")
    control, _, _, _ = _run_side(pristine_root, spec, text, python, "pristine")
    rows = classify(patched, spec, skips)
    for row in rows:
        row["pristine_control"] = control.get(row["test"], "absent")
    verdicts = [r["verdict"] for r in rows]
    counts = {v: verdicts.count(v) for v in ("pass", "fail", "not applicable", "not run")}
    if counts["fail"]:
        outcome, reason = "fail", f"{counts['fail']} applicable test(s) of {spec.release} fail"
    elif counts["pass"]:
        outcome, reason = "pass", ""
    else:
        outcome, reason = "not run", "no applicable test of the release ran here"
    numbers = {
        "patch": names[spec.subject],
        "subject": spec.subject,
        "release": spec.release,
        "test_file": spec.test_file,
        "select": spec.select,
        "adapter": [{"replace": old, "with": new} for old, new in spec.adapter],
        "adapter_why": spec.adapter_why,
        "not_applicable": spec.not_applicable,
        "counts": counts,
        "tests": rows,
        "pytest_returncode": rc,
        "env": TEST_ENV,
        "log_tail": log[-1500:],
    }
    command = shlex.join(["python", "-m", "verify.forward_tests", version])
    table = ["| test | patched | pristine (control) | note |", "|---|---|---|---|"]
    table += [
        f"| {r['test'].split('::')[-1]} | {r['verdict']} | {r['pristine_control']} | "
        f"{r['reason'][:80]} |"
        for r in rows
    ]
    return results.make(
        f"forward-tests-{spec.release}", spec.seed, version, outcome, numbers,
        reason=reason, command=command, tables=["\n".join(table)],
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.forward_tests", description=__doc__)
    parser.add_argument("version")
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch/triton")
    args = parser.parse_args(argv)
    if os.sep in args.python:  # pytest runs in a temporary folder: a relative path must hold
        args.python = str(Path(args.python).absolute())
    version = require_pinned(args.version)
    specs_ = specs(version)
    if not specs_:
        print(f"no forward tests are defined for vLLM {version}", file=sys.stderr)
        return 0
    worst = 0
    files = ReleaseFiles()
    for spec in specs_:
        try:
            record = run_spec(version, spec, args.python, files)
        except PatchbenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        name = record["step"]  # one record per step and pin, as the importer writes it
        path = results.write(record, "cpu", name)
        print(record["tables"][0])
        say(f"{name}: {record['outcome']} {record['numbers']['counts']} -> {path}")
        worst = max(worst, int(record["outcome"] == "fail"))
    return worst


if __name__ == "__main__":
    sys.exit(main())
