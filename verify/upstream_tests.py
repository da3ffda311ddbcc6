"""Upstream tests as shipped: the pin's own test files of every touched area, unmodified, on the
pristine and the patched code, and separately the series' edited versions on the patched code.

`python -m verify.upstream_tests 0.22.0` runs, through the CPU runtime (`verify/runtime.py`),
three pytest sessions over the same files:

1. ``shipped/pristine``: the sdist's test files on the wheel's vLLM;
2. ``shipped/patched``: the same files on the patched root (the series' ``.py`` overlay);
3. ``edited/patched``: the series' versions of those files plus the test files it adds.

A test that passes in 1 and fails in 2 is a behaviour the series changes on purpose or a
regression: it must be explained in patches/upstream-tests.toml (test id -> the patch that
changes that behaviour and why), else the step fails; an explanation whose failure did not
happen fails the step too (it is stale). A test failing in 3 but not in 1 fails the step. The record
(``results/cpu/<v>/upstream-tests.json``) keeps the counts of all three runs side by side.

Pins with a CPU runtime recipe (0.22.0) run against the runtime's wheel and its patched
overlay; other pins run against the build tree's source roots in the current interpreter (torch
and triton, as the equivalence sessions have), without vLLM's tests/conftest.py.

Touched areas: for every ``vllm/<dir>/<name>.py`` the series changes, the pin's
``tests/<dir>/test_<name>.py`` (or one folder up), plus every pin test file the series edits.
Triton kernels run through the interpreter (``TRITON_INTERPRET=1``), as in the equivalence tier.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from verify import paths, pins, results
from verify.buildtree import BASELINE_TAG, BuildTree
from verify.errors import PatchbenchError
from verify.progress import say
from verify.series import read_series
from verify.versions import require_pinned


def explained(version: str) -> dict[str, tuple[str, str]]:
    """Shipped test id -> (subject of the patch that changes that behaviour, why), of the pin
    (patches/upstream-tests.toml's [[explained]])."""
    return {e["test"]: (e["patch"], e["why"]) for e in pins.upstream_tests("explained", version)}


def not_run(version: str) -> dict[str, str]:
    """Tests not run here (deselected on every run of the pin) and why; the record lists them
    (patches/upstream-tests.toml's [[not_run]])."""
    return {e["test"]: e["why"] for e in pins.upstream_tests("not_run", version)}


#: Added to every pytest run (interpreted Triton; the conftest's tblib comes from the add-on).
TEST_ENV = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
PYTEST_ADDON = ["pytest==9.2.0", "tblib"]
RUN_TIMEOUT_S = 3600


def touched_test_files(tree: BuildTree) -> tuple[list[str], list[str]]:
    """(the pin's test files of the touched areas, the series' test files that run instead:
    the same paths plus the test files the series adds)."""
    changed = tree.changed_files()
    shipped = []
    for path in changed:
        if path.startswith("vllm/") and path.endswith(".py"):
            parts = Path(path[len("vllm/") :])
            for folder in (parts.parent, parts.parent.parent):
                candidate = f"tests/{folder.as_posix()}/test_{parts.stem}.py".replace("/./", "/")
                if tree.read_bytes(BASELINE_TAG, candidate) is not None:
                    shipped.append(candidate)
                    break
        elif path.startswith("tests/") and Path(path).name.startswith("test_"):
            if tree.read_bytes(BASELINE_TAG, path) is not None:
                shipped.append(path)
    shipped = sorted(dict.fromkeys(shipped))
    added = [
        p
        for p in changed
        if p.startswith("tests/")
        and Path(p).name.startswith("test_")
        and tree.read_bytes(BASELINE_TAG, p) is None
        and tree.read_bytes("HEAD", p) is not None
    ]
    return shipped, sorted(dict.fromkeys(shipped + added))


# -- running ------------------------------------------------------------------------------------
@dataclass
class Run:
    """One pytest session: which tests, on which code, and each test's outcome."""

    tests: str  # shipped | edited
    code: str  # pristine | patched
    command: str
    returncode: int
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> passed/failed/skipped

    def counts(self) -> dict[str, int]:
        out = {"passed": 0, "failed": 0, "skipped": 0}
        for outcome in self.outcomes.values():
            out[outcome] += 1
        return out

    def failed(self) -> set[str]:
        return {t for t, o in self.outcomes.items() if o == "failed"}

    def ran(self) -> set[str]:
        """The tests that ran: not a module's collection error (``::module`` in JUnit)."""
        return {t for t in self.outcomes if not (t.startswith("::") or t.endswith("::"))}


def parse_junit(path: Path, files: list[str]) -> dict[str, str]:
    """{test id: passed | failed | skipped} with ids as ``path::[Class::]name``."""
    modules = sorted(((f[:-3].replace("/", "."), f) for f in files), key=lambda m: -len(m[0]))
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        test_id = f"{classname}::{name}"
        for module, file in modules:
            if classname == module or classname.startswith(module + "."):
                rest = classname[len(module) + 1 :]
                test_id = f"{file}::{rest + '::' if rest else ''}{name}"
                break
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[test_id] = "failed"
        elif case.find("skipped") is not None:
            outcomes[test_id] = "skipped"
        else:
            outcomes[test_id] = "passed"
    return outcomes


def _pytest_addon(python: str) -> Path:
    """pytest (and tblib, which vLLM's tests/conftest.py imports) for the runtime's Python,
    installed once beside the runtime venvs, never into them."""
    target = paths.cache_dir() / "venvs" / "pytest-addon"
    if not (target / ".complete").exists():
        say(f"installing {' '.join(PYTEST_ADDON)} into {target}")
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--target", str(target), *PYTEST_ADDON],
            check=True,
        )
        (target / ".complete").write_text("ok\n")
    return target


class RuntimeLauncher:
    """Tests against the CPU runtime's wheel (pristine) and its overlay (patched)."""

    extra: tuple[str, ...] = ()

    def __init__(self, runtime):
        self.runtime = runtime
        self.python = runtime.python

    def env(self, code: str) -> dict[str, str]:
        env = self.runtime.env(code)
        env.update(TEST_ENV)
        addon = str(_pytest_addon(self.python))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), addon]))
        return env

    def describe(self) -> dict:
        return {"kind": "cpu-runtime", **self.runtime.versions()}


class SourceLauncher:
    """Tests against the build tree's source roots in this interpreter (torch + triton), for
    pins without a CPU runtime; vLLM's tests/conftest.py is not loaded (its test-only imports
    are not installed here), so tests that need its fixtures error on both sides."""

    extra = ("--noconftest",)

    def __init__(self, version: str, scratch: Path, python: str | None = None):
        from verify.equivalence.roots import materialize

        self.python = python or sys.executable  # another interpreter gets the pytest addon
        self.addon = str(_pytest_addon(self.python)) if python else None
        pristine, patched = materialize(version)
        self.roots = {"pristine": pristine, "patched": patched}
        # vLLM picks its CPU platform when its distribution version says "+cpu" (as the CPU
        # runtime's dist-info does); found before the root's own vllm.egg-info.
        self.platform = scratch / "cpu-platform"
        info = self.platform / f"vllm-{version}+cpu.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
        )

    def env(self, code: str) -> dict[str, str]:
        from verify.runtime import RUNTIME_ENV  # offline: no model hub here

        env = dict(os.environ, **RUNTIME_ENV, **TEST_ENV)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(self.platform), str(self.roots[code]), self.addon])
        )
        env["VLLM_TARGET_DEVICE"] = "cpu"
        return env

    def describe(self) -> dict:
        code = "import torch, triton, platform; print(torch.__version__, triton.__version__, "
        code += "platform.python_version())"
        out = subprocess.run([self.python, "-c", code], capture_output=True, text=True)
        torch_v, triton_v, python_v = (out.stdout.split() + ["?"] * 3)[:3]
        return {"kind": "source roots, vllm-<v>+cpu dist-info (CPU platform)", "torch": torch_v,
                "triton": triton_v, "python": python_v}  # fmt: skip


def run_pytest(
    launcher, code: str, tests_root: Path, files: list[str], label: str, skip: list[str]
) -> Run:
    """pytest over `files` in `tests_root` (a folder holding ``tests/``) on one root."""
    junit = tests_root / f"junit-{label}.xml"
    deselect = [f"--deselect={test}" for test in skip]
    cmd = [launcher.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "--continue-on-collection-errors", *launcher.extra, f"--junitxml={junit}",
           *deselect, *files]  # fmt: skip
    say(f"upstream-tests {label}: pytest {len(files)} file(s) on the {code} code")
    with open(tests_root / f"log-{label}.txt", "w") as log:
        proc = subprocess.run(cmd, cwd=tests_root, env=launcher.env(code), stdout=log,
                              stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)  # fmt: skip
    tests, _ = label.split("-", 1)
    outcomes = parse_junit(junit, files) if junit.exists() else {}
    shown = shlex.join(["python", "-m", "pytest", *launcher.extra, *deselect, *files])
    run = Run(tests, code, shown, proc.returncode, outcomes)
    say(f"upstream-tests {label}: rc {proc.returncode} {run.counts()}")
    return run


# -- the upstream pytest commands of a PR body ---------------------------------------------------
def body_pytest_commands(text: str) -> list[str]:
    """The upstream pytest commands of a PR body: the `pytest ...` lines of its first bash
    block after "with this PR applied" (this project's own commands come later)."""
    start = text.find("with this PR applied")
    block = re.search(r"```bash\n(.*?)```", text[start:], flags=re.S) if start >= 0 else None
    lines = block.group(1).splitlines() if block else []
    return [line.strip() for line in lines if line.strip().startswith("pytest ")]


def launcher_for(version: str, tree: BuildTree, scratch: Path):
    """The CPU runtime's launcher where the pin has a recipe, else the source roots' (in this
    interpreter where it has torch, else in the main pin's CPU runtime, torch and triton)."""
    import importlib.util

    from verify import runtime as runtime_mod
    from verify.versions import MAIN

    if version in runtime_mod.RECIPES:
        return RuntimeLauncher(runtime_mod.get_runtime(version, tree.path, say=say))
    if importlib.util.find_spec("torch") is not None:
        return SourceLauncher(version, scratch)
    venv = runtime_mod.ensure_venv(MAIN, say=say)
    return SourceLauncher(version, scratch, str(venv / "bin" / "python"))


def collect(version: str, command: str, launcher, tests_root: Path) -> tuple[int, str]:
    """(tests selected, output tail) of `pytest --collect-only -q` with `command`'s arguments
    over the patched tests exported to `tests_root`, on the patched code. Modules that cannot be
    imported where the tests run (a source-roots run lacks some of vLLM's requirements) do not
    hide the others, as in `run`; pytest's exit 1 then only says that some errored."""
    args = shlex.split(command)[1:]
    cmd = [launcher.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
           "-o", "addopts=", "--continue-on-collection-errors", *launcher.extra, *args]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tests_root, env=launcher.env("patched"), text=True,
                          capture_output=True, timeout=RUN_TIMEOUT_S)  # fmt: skip
    out = proc.stdout + proc.stderr
    selected = sum(1 for line in proc.stdout.splitlines() if "::" in line)
    return (selected if proc.returncode in (0, 1) else 0), out[-1500:]


# -- verdict ------------------------------------------------------------------------------------
def judge(
    shipped_pristine: Run,
    shipped_patched: Run,
    edited_patched: Run,
    explained: dict[str, tuple[str, str]],
    patch_names: dict[str, str],
) -> tuple[str, str, dict]:
    """(outcome, reason, details): patched-only failures of the shipped tests must each be
    explained, every explanation must still happen, the edited tests must not fail anew. A run
    in which no test ran (collection errors, pytest interrupted), or a pristine run in which
    none passed, is "not run"; patched code failing every test is judged like any failure."""
    for run_ in (shipped_pristine, shipped_patched, edited_patched):
        if run_.returncode not in (0, 1) or not run_.ran():
            why = f"pytest rc {run_.returncode}, no test ran in {run_.tests}/{run_.code}"
            return "not run", f"{why} (collection errors? see the log tails)", {}
    passed_before = {t for t, o in shipped_pristine.outcomes.items() if o == "passed"}
    if not passed_before:  # the pristine code is the reference: a patched failure needs one
        why = f"pytest rc {shipped_pristine.returncode}, no test passed in shipped/pristine"
        return "not run", f"{why} (see the log tails)", {}
    patched_only = sorted(shipped_patched.failed() & passed_before)
    listed, unexplained = [], []
    for test in patched_only:
        if test in explained:
            subject, why = explained[test]
            patch = patch_names.get(subject, f"(no patch with subject {subject!r})")
            listed.append({"test": test, "patch": patch, "subject": subject, "reason": why})
        else:
            unexplained.append(test)
    stale = sorted(set(explained) - set(patched_only))
    unknown = sorted({s for s, _ in explained.values()} - set(patch_names))
    edited_new = sorted(edited_patched.failed() - shipped_pristine.failed())
    details = {
        "patched_only_failures": listed,
        "unexplained": unexplained,
        "stale_explanations": stale,
        "explained_by_unknown_patch": unknown,
        "edited_new_failures": edited_new,
        "pre_existing_failures": sorted(shipped_pristine.failed()),
    }
    problems = []
    if unexplained:
        problems.append(f"{len(unexplained)} unexplained patched-only failure(s)")
    if stale:
        problems.append(f"{len(stale)} explained failure(s) did not happen (stale)")
    if unknown:
        problems.append(f"explanations name {len(unknown)} patch(es) not in the series")
    if edited_new:
        problems.append(f"{len(edited_new)} failure(s) of the series' tests not failing before")
    if problems:
        return "fail", "; ".join(problems), details
    return "pass", "", details


def run(version: str, tree_path: Path | None = None, files: list[str] | None = None) -> dict:
    """All three sessions for `version`; returns the result record (not yet written)."""
    from verify import runtime as runtime_mod

    tree = BuildTree(version) if tree_path is None else BuildTree(version, tree_path.parent)
    if not tree.exists():
        raise PatchbenchError(f"no build tree for vLLM {version}; run `python -m verify apply`")
    shipped, edited = touched_test_files(tree)
    if files:
        shipped = [f for f in shipped if f in files]
        edited = [f for f in edited if f in files]
    names = {p.subject: p.name for p in read_series(version)}
    with tempfile.TemporaryDirectory(prefix="upstream-tests-") as tmp:
        if version in runtime_mod.RECIPES:
            launcher = RuntimeLauncher(runtime_mod.get_runtime(version, tree.path, say=say))
        else:
            launcher = SourceLauncher(version, Path(tmp))
        roots = {"shipped": Path(tmp) / "shipped", "edited": Path(tmp) / "edited"}
        for label, rev in (("shipped", BASELINE_TAG), ("edited", "HEAD")):
            tree.export_tree(rev, roots[label], ["tests", "pyproject.toml"])
        skip = sorted(not_run(version))
        runs = [
            run_pytest(launcher, "pristine", roots["shipped"], shipped, "shipped-pristine", skip),
            run_pytest(launcher, "patched", roots["shipped"], shipped, "shipped-patched", skip),
            run_pytest(launcher, "patched", roots["edited"], edited, "edited-patched", skip),
        ]
        tails = {
            f"{r.tests}-{r.code}": (roots[r.tests] / f"log-{r.tests}-{r.code}.txt").read_text()[
                -1500:
            ]
            for r in runs
        }
    outcome, reason, details = judge(*runs, explained(version), names)
    numbers = {
        "shipped_files": shipped,
        "edited_files": edited,
        "runs": {
            f"{r.tests}/{r.code}": {"command": r.command, "returncode": r.returncode, **r.counts()}
            for r in runs
        },
        **details,
        "not_run": not_run(version),
        "env": TEST_ENV,
        "runtime": launcher.describe(),
        "log_tails": tails,
    }
    table = _table(runs)
    return results.make(
        "upstream-tests", "series", version, outcome, numbers, reason=reason,
        command=f"python -m verify.upstream_tests {version}", tables=[table],
    )  # fmt: skip


def _table(runs: list[Run]) -> str:
    lines = ["| tests | code | passed | failed | skipped |", "|---|---|---|---|---|"]
    for r in runs:
        c = r.counts()
        lines.append(f"| {r.tests} | {r.code} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.upstream_tests", description=__doc__)
    parser.add_argument("version")
    parser.add_argument("--tree", type=Path, help="build tree (default build/<version>)")
    parser.add_argument("--only", nargs="*", help="restrict to these test files")
    args = parser.parse_args(argv)
    version = require_pinned(args.version)
    try:
        record = run(version, args.tree, args.only)
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = results.write(record, "cpu", "upstream-tests")
    print(record["tables"][0])
    print(json.dumps({k: record["numbers"][k] for k in ("patched_only_failures", "unexplained",
                      "stale_explanations", "edited_new_failures")}, indent=1))  # fmt: skip
    say(f"upstream-tests {args.version}: {record['outcome']} {record['reason']} -> {path}")
    return 0 if record["outcome"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
