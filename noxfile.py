"""nox sessions of vllm-patchbench, one per pinned vLLM version where it applies.

Main job: `nox -s verify-0.22.0` (apply, check, equivalence, the CPU tier, report; summary table).
Tags: `nox -t fast` (seconds to ~3 min, no vLLM runtime), `nox -t heavy` (installs torch/vLLM or
runs engines; the description gives a rough time), `nox -t cpu-tier`, `nox -t gpu` (CUDA machine),
`nox -t equivalence`. Tooling sessions run in the current environment (`pip install -e .` first);
sessions that import vLLM or torch build their own cached virtualenvs."""

from __future__ import annotations

import contextlib
import glob
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from verify import evidence, paths, pins  # noqa: E402
from verify.progress import Steps  # noqa: E402
from verify.runtime import PIP_RESUME_RETRIES, with_retries  # noqa: E402
from verify.verdicts import Verdict  # noqa: E402
from verify.versions import PINNED  # noqa: E402

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]
ROOT = Path(__file__).parent


def _cpu_torch() -> str:
    """A CPU build of torch when a local wheel has one (the CUDA build from PyPI is ~2 GB)."""
    for folder in filter(None, os.environ.get("PIP_FIND_LINKS", "/opt/wheels").split()):
        if glob.glob(os.path.join(folder, "torch-*+cpu-*.whl")):
            return "torch==2.13.0+cpu"
    return "torch"


def _install(session: nox.Session, *args: str) -> None:
    """`session.install` with pip's resumes, tried again after a failure (a download that broke
    off: a CI run once lost the 286 MB triton wheel at 136 MB): `runtime.with_retries`."""
    env = {"PIP_RESUME_RETRIES": PIP_RESUME_RETRIES}
    with_retries(lambda: session.install(*args, env=env), nox.command.CommandFailed, session.warn)


def _tool(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "verify", *args, external=True)


def _record_flags(session: nox.Session) -> tuple[bool, bool, list[str]]:
    """(`--record`, `--force`, the other arguments after `--`). A `--record` followed by a
    name is verify.e2e's own option (the tokens step's record name) and is passed on."""
    args, record, force, rest = list(session.posargs), False, False, []
    for i, arg in enumerate(args):
        if arg == "--record" and (args[i + 1 : i + 2] or ["-"])[0].startswith("-"):
            record = True
        elif arg == "--force":
            force = True
        else:
            rest.append(arg)
    if force and not record:
        session.error("--force only applies to --record (`-- --record --force`); nothing was run")
    return record, force, rest


@contextlib.contextmanager
def _run_folders(session: nox.Session, version: str) -> Iterator[list[str]]:
    """Run the block with this run's results/reports folders set (verify/evidence.py), yielding
    the arguments other than --record/--force; then say where it wrote and, with `--record`,
    record into the checkout's results/ and reports/ (`_record`)."""
    record, force, rest = _record_flags(session)
    with evidence.run_folders(version) as run:
        session.log(f"records of this run: {run.results}; reports: {run.reports}")
        try:
            yield rest
        finally:
            print(_where(session.name, run, record), flush=True)
            if record:
                _record(session, version, run, force)


def _where(name: str, run: evidence.RunFolders, record: bool) -> str:
    """Where the run `name` wrote, and whether the committed evidence was touched."""
    text = f"{name} wrote its records to {run.results} and its reports to {run.reports}"
    if record:
        return f"{text}; recording them into results/ and reports/ (--record)"
    if run.own:
        return f"{text}; results/ and reports/ are unchanged (`-- --record` records into them)"
    return f"{text} (set by PATCHBENCH_RESULTS_DIR / PATCHBENCH_REPORTS_DIR)"


def _record(session: nox.Session, version: str, run: evidence.RunFolders, force: bool) -> None:
    """Copy the run's records into results/ where each is at least as strong as the committed
    one (or `force`), print which were replaced and which kept (why), then write
    reports/<version>/ from results/."""
    from verify import locks

    tracked = paths.repo_root()
    with locks.pin_lock(version):
        decisions = evidence.promote(version, run.results, force, tracked / "results")
    lines = [d.line() for d in decisions] or ["no record of this run differs from results/"]
    print(f"recorded into {tracked / 'results'}:\n  " + "\n  ".join(lines), flush=True)
    folders = {evidence.RESULTS_VAR: str(tracked / "results"),
               evidence.REPORTS_VAR: str(tracked / "reports")}  # fmt: skip
    session.run(sys.executable, "-m", "verify", "report", version, env=folders, external=True)


def _per_version(name: str, help_text: str, pins=PINNED, **kwargs):
    """Register `name-<version>` for every pinned version (or `pins`)."""

    def register(func):
        for version in pins:

            def session_func(session: nox.Session, _v: str = version) -> None:
                func(session, _v)

            session_func.__doc__ = f"{help_text} (vLLM {version})"
            nox.session(name=f"{name}-{version}", **kwargs)(session_func)
        return func

    return register


FAST = ["fast"]
PASSING = ("pass", "not applicable")
HEAVY = ["heavy"]


@_per_version("apply", "[~1 min cold, seconds warm] pristine sdist -> build tree -> series applied",
              venv_backend="none", tags=FAST)  # fmt: skip
def apply(session: nox.Session, version: str) -> None:
    _tool(session, "apply", version, *session.posargs)


@_per_version("check", "[seconds] fail if patches/<v>/ is not exactly the build tree's export",
              venv_backend="none", tags=FAST)  # fmt: skip
def check(session: nox.Session, version: str) -> None:
    _tool(session, "check", version, *session.posargs)


@_per_version("export", "[seconds] regenerate patches/<v>/ from the build tree's commits",
              venv_backend="none", tags=FAST)  # fmt: skip
def export(session: nox.Session, version: str) -> None:
    _tool(session, "export", version, *session.posargs)
    session.notify(f"check-{version}")


@_per_version("equivalence", "heavy, ~5-15 min (torch + the pin's requirements): pristine vs "
              "patched equivalence tests on this CPU", tags=[*HEAVY, "equivalence"])  # fmt: skip
def equivalence(session: nox.Session, version: str) -> None:
    with _run_folders(session, version) as args:
        _tool(session, "apply", version)
        _equivalence(session, version, args)


def _equivalence_env(session: nox.Session, version: str) -> None:
    """Install torch, triton, pytest and the pin's requirements into the session."""
    requirements = _relaxed_requirements(session, version)
    _install(session, _cpu_torch(), "triton", "numpy", "hypothesis", "pytest", "gitpython")
    _install(session, "-r", str(requirements), "--constraint", str(_torch_pin_file(session)))
    session.install("--no-deps", "-e", ".")
    session.env["PATCHBENCH_PIN"] = version


@_per_version("forward", "heavy, ~5 min (the equivalence environment): the tests of the release "
              "that merged a backported change, on the patched pin and pristine",
              tags=HEAVY)  # fmt: skip
def forward(session: nox.Session, version: str) -> None:
    _tool(session, "apply", version)
    _equivalence_env(session, version)
    session.run("python", "-m", "verify.forward_tests", version)


def _equivalence(session: nox.Session, version: str, pytest_args: list[str] = ()) -> None:
    """Install the equivalence dependencies into the session and run tests/equivalence."""
    _equivalence_env(session, version)
    junit = paths.build_root() / f"junit-equivalence-{version}.xml"
    # exit 5 = no test covers this pin yet; exit 1 = failures, recorded below, then fatal
    session.run(
        "python", "-m", "pytest", "tests/equivalence", "--pin", version, "-q",
        f"--junitxml={junit}", *pytest_args, success_codes=[0, 1, 5],
    )  # fmt: skip
    if pytest_args:  # a record holds every test of its module; a narrowed run would replace it
        session.warn(f"not recorded: the run was narrowed by {' '.join(pytest_args)!r}")
    elif junit.exists():
        session.run("python", "-m", "verify.equivalence.record", version, str(junit))


#: Requirement floors of a pin that the package index here cannot satisfy, and why each is
#: irrelevant to equivalence testing (pins.toml's `relaxed`). Printed whenever applied.
RELAXED = pins.with_key("relaxed")


def _relaxed_requirements(session: nox.Session, version: str) -> Path:
    """The pin's requirements/common.txt, minus version floors listed in RELAXED."""
    source = paths.build_root() / version / "requirements" / "common.txt"
    relax = RELAXED.get(version, {})
    if not relax:
        return source
    lines = []
    for line in source.read_text().splitlines():
        name = line.split("#", 1)[0].strip().split(" ", 1)[0].split(">", 1)[0].split("=", 1)[0]
        if name in relax:
            session.warn(f"relaxing {line.strip()!r} to {name!r}: {relax[name]}")
            line = name
        lines.append(line)
    target = Path(session.virtualenv.location) / f"requirements-{version}-relaxed.txt"
    target.write_text("\n".join(lines) + "\n")
    return target


def _torch_pin_file(session: nox.Session) -> Path:
    """A constraints file that keeps the torch installed by `_cpu_torch` (read in the install
    step, so `--install-only` makes it too; installs skipped by `--no-install` need none)."""
    path = Path(session.virtualenv.location) / "torch-constraint.txt"
    out = session.run_install("python", "-c", "import torch; print(torch.__version__)", silent=True)
    if isinstance(out, str):
        path.write_text(f"torch=={out.strip().splitlines()[-1]}\n")
    return path


@_per_version("wheel", "heavy, ~2 min (downloads the official wheel): patched wheel, version "
              "<v>+pb.<hash>", venv_backend="none", tags=HEAVY)  # fmt: skip
def wheel(session: nox.Session, version: str) -> None:
    """`nox -s wheel-0.22.0 -- --flavor cuda` for the CUDA wheel (default: cpu)."""
    _tool(session, "wheel", version, *session.posargs)


@_per_version("report", "[seconds] PR-ready report per patch from results/, into a run folder "
              "(`-- --record`: into reports/<v>/)",
              venv_backend="none", tags=FAST)  # fmt: skip
def report(session: nox.Session, version: str) -> None:
    """`-- --record`: into reports/ (from results/); by default into a run folder."""
    with _run_folders(session, version):
        _tool(session, "report", version)


@nox.session(venv_backend="none", tags=FAST)
def status(session: nox.Session) -> None:
    """[~1 min cold] every patch x every pinned version (needed / upstream / conflicts ...)."""
    _tool(session, "status", *session.posargs)


@nox.session(venv_backend="none")  # untagged: it needs arguments, so CI's matrix leaves it out
def port(session: nox.Session) -> None:
    """[~1-5 min, seconds warm] `-- <from-pin> <to-version>`: carry a pin's series to another
    release (`-- --continue` / `-- --abort` after a conflict); see verify/port.py."""
    if not session.posargs:
        session.error("usage: nox -s port -- <from-pin> <to-version> (or -- --continue/--abort)")
    _tool(session, "port", *session.posargs)


@nox.session(tags=FAST)
def tests(session: nox.Session) -> None:
    """[~3 min] the project's own test suite (temporary folders; no vLLM runtime needed)."""
    session.install("-e", ".[dev]")
    # the no-assert check (tests/assert_count.py) counts through pytest's assertion pass hook,
    # on here only: it doubled the equivalence suites' time (a hook call per passing assert)
    session.run("python", "-m", "pytest", "tests", "--ignore=tests/equivalence",
                "-o", "enable_assertion_pass_hook=true", *session.posargs)  # fmt: skip


@nox.session(tags=FAST)
def lint(session: nox.Session) -> None:
    """[seconds] ruff check + format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


# --- CPU tier ---
# Sessions exist for every pin that has a CPU runtime recipe (pins.toml's `cpu_runtime`). They
# run in the current environment: the steps build their own cached runtime venv. Arguments after
# `--` go to `python -m verify.e2e` (e.g. `nox -s e2e-0.22.0 -- --quick --tree DIR --model M`).
def _cpu_pins() -> list[str]:
    from verify.runtime import RECIPES

    return [v for v in PINNED if v in RECIPES]


def _e2e(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "verify.e2e", *args, external=True)


def _cpu_session(version: str, body: Callable[[nox.Session, list[str]], None]):
    """A CPU-tier session of `version`: `body(session, arguments for verify.e2e)` in a run
    folder (`_run_folders`)."""

    def session_func(session: nox.Session) -> None:
        with _run_folders(session, version) as args:
            body(session, args)

    return session_func


def _e2e_tier(session: nox.Session, v: str, args: list[str]) -> None:
    _e2e(session, "tokens", "--version", v, *args)
    _e2e(session, "embed", "--version", v, *args)
    session.run(sys.executable, "-m", "pytest", "tests/cpu_tier", "-m", "slow", "-q",
                env={"PATCHBENCH_SLOW": "1"}, external=True)  # fmt: skip


for _v in _cpu_pins():
    _cpu = {"venv_backend": "none", "tags": [*HEAVY, "cpu-tier"]}
    _s = _cpu_session(_v, lambda s, a, v=_v: _e2e_tier(s, v, a))
    _s.__doc__ = "heavy, ~15 min (+6 GB venv once): CPU tokens + embeddings A/B, broken-patch test."
    nox.session(name=f"e2e-{_v}", **_cpu)(_s)
    _s = _cpu_session(_v, lambda s, a, v=_v: _e2e(s, "serve-bench", "--version", v, *a))
    _s.__doc__ = "heavy, ~15 min: CPU vllm serve + vllm bench serve, interleaved A/B, ratio + CI."
    nox.session(name=f"serve-bench-{_v}", **_cpu)(_s)
    _s = _cpu_session(_v, lambda s, a, v=_v: _e2e(s, "gsm8k", "--version", v, *a))
    _s.__doc__ = "heavy, ~20 min: CPU lm_eval gsm8k (local data), both roots; identical responses."
    nox.session(name=f"gsm8k-{_v}", **_cpu)(_s)


# --- the main job: one command per pin ---
@_per_version("verify", "heavy, ~1 h (~25 min with `-- --quick`; the CPU tier only where a runtime "
              "recipe exists): the main job: apply, check, equivalence, CPU tier, report, "
              "summary table", tags=[*HEAVY, "main-job"])  # fmt: skip
def verify(session: nox.Session, version: str) -> None:
    """`-- --quick` runs the CPU tier reduced (as CI does); `-- --record` records into results/
    and reports/ (a record only over a weaker one; `--force`: over any)."""
    with _run_folders(session, version) as args:
        steps = _main_steps(session, version, ["--quick"] if "--quick" in args else [])
        print(steps.table(), flush=True)
    if steps.failed:
        session.error(f"verify-{version}: {', '.join(steps.failed)} did not pass")
    unresolved = [r.name for r in steps.results.values() if r.outcome not in PASSING]
    if unresolved:
        session.warn(f"verify-{version}: {', '.join(unresolved)} did not resolve (see the table)")


def _main_steps(session: nox.Session, version: str, quick: list[str]) -> Steps:
    """Run the main job's steps; their results."""
    cpu = ["cpu tier: tokens", "cpu tier: embed", "cpu tier: serve + gsm8k"]
    steps = Steps(f"verify-{version}", ["apply", "check", "equivalence", *cpu, "report"])
    steps.run("apply", lambda: _tool(session, "apply", version))
    steps.run("check", lambda: _tool(session, "check", version, "--no-apply"), needs=("apply",))
    steps.run("equivalence", lambda: _equivalence(session, version), needs=("check",))
    if version in _cpu_pins():
        for name, step in zip(cpu, ("tokens", "embed", "serve"), strict=True):
            steps.run(name, lambda s=step: _e2e_step(session, s, version, quick),
                      needs=("check",))  # fmt: skip
    else:
        for name in cpu:
            steps.not_applicable(name, f"no CPU runtime recipe for vLLM {version}")
    steps.run("report", lambda: _tool(session, "report", version), needs=("apply",))
    return steps


#: The records each CPU-tier step of the main job writes (results/cpu/<v>/<name>.json).
E2E_RECORDS = {
    "tokens": ("e2e-token-identity",),
    "embed": ("e2e-embeddings",),
    "serve": ("e2e-serve-bench", "e2e-gsm8k"),
}


def _e2e_step(session: nox.Session, step: str, version: str, quick: list[str]) -> Verdict:
    """Run one CPU-tier step; its verdict is its records' (exit 1 = an A/B difference, which
    the records say), so a serve bench that resolved nothing is not shown as a pass."""
    from verify import results

    since = results.now()
    session.run(sys.executable, "-m", "verify.e2e", step, "--version", version, *quick,
                external=True, success_codes=[0, 1])  # fmt: skip
    return results.step_verdict(version, E2E_RECORDS[step], since)


# --- GPU tier (a CUDA machine; without network: the offline bundle, ../shared/gpu/README.md) ---
#: Pins the GPU tier has been run for (results/gpu/<v>/; pins.toml's `gpu_tier`).
GPU_PINS = tuple(pins.with_key("gpu_tier"))


@_per_version("gpu", "gpu, heavy, 10-60 min per workload (CUDA machine): the pin's CUDA runtime "
              "from the index, then `-- WORKLOAD TAG PB_KEY=VALUE...` (`-- --install-only`: the "
              "runtime alone); pins without a CUDA recipe: scripts/gpu_verify.py over the bundle",
              pins=GPU_PINS, venv_backend="none", tags=[*HEAVY, "gpu"])  # fmt: skip
def gpu(session: nox.Session, version: str) -> None:
    from verify.runtime import CUDA_RECIPES

    if version in CUDA_RECIPES:
        if "--install-only" not in session.posargs:
            _tool(session, "apply", version)
        session.run(sys.executable, "-m", "verify.gpu.tier", version, *session.posargs,
                    external=True)  # fmt: skip
        return
    _tool(session, "apply", version)
    overlay = paths.build_root() / "gpu-overlay"
    session.run(sys.executable, "-m", "verify.gpu_overlay", version, "--out", str(overlay),
                "--tests", str(overlay / version / "tests"), external=True)  # fmt: skip
    out = paths.results_root() / "gpu-raw" / version
    session.run(sys.executable, "scripts/gpu_verify.py", "--version", version,
                "--overlay", str(overlay / version), "--tests", str(overlay / version / "tests"),
                "--out", str(out), *(session.posargs or ["--steps", "embed-gritlm"]),
                external=True)  # fmt: skip
