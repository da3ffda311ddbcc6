"""nox sessions of vllm-patchbench; `nox -l` lists them, one per pinned vLLM version where it
applies. Tooling sessions run in the current environment (`pip install -e .` first); sessions
that import vLLM or torch build their own cached virtualenvs."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
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


def _tool(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "verify", *args, external=True)


def _per_version(name: str, help_text: str, **kwargs):
    """Register `name-<version>` for every pinned version."""

    def register(func):
        for version in PINNED:

            def session_func(session: nox.Session, _v: str = version) -> None:
                func(session, _v)

            session_func.__doc__ = f"{help_text} (vLLM {version})"
            nox.session(name=f"{name}-{version}", **kwargs)(session_func)
        return func

    return register


@_per_version("apply", "pristine source -> build tree -> series applied", venv_backend="none")
def apply(session: nox.Session, version: str) -> None:
    _tool(session, "apply", version, *session.posargs)


@_per_version("check", "fail if patches/<v>/ is not exactly the build tree's export",
              venv_backend="none")  # fmt: skip
def check(session: nox.Session, version: str) -> None:
    _tool(session, "check", version, *session.posargs)


@_per_version("export", "regenerate patches/<v>/ from the build tree's commits",
              venv_backend="none")  # fmt: skip
def export(session: nox.Session, version: str) -> None:
    _tool(session, "export", version)
    session.notify(f"check-{version}")


@_per_version("equivalence", "pristine vs patched equivalence tests on this CPU")
def equivalence(session: nox.Session, version: str) -> None:
    _tool(session, "apply", version)
    requirements = _relaxed_requirements(session, version)
    session.install(_cpu_torch(), "triton", "numpy", "hypothesis", "pytest", "gitpython")
    session.install("-r", str(requirements), "--constraint", str(_torch_pin_file(session)))
    session.install("--no-deps", "-e", ".")
    session.env["PATCHBENCH_PIN"] = version
    junit = ROOT / "build" / f"junit-equivalence-{version}.xml"
    # exit 5 = no test covers this pin yet; exit 1 = failures, recorded below, then fatal
    session.run(
        "python", "-m", "pytest", "tests/equivalence", "--pin", version, "-q",
        f"--junitxml={junit}", *session.posargs, success_codes=[0, 1, 5],
    )  # fmt: skip
    if junit.exists():
        session.run("python", "-m", "verify.equivalence.record", version, str(junit))


#: Requirement floors of a pin that the package index here cannot satisfy, and why each is
#: irrelevant to equivalence testing. Printed whenever applied.
RELAXED = {
    "0.33.0": {"certifi": "CA bundle floor 2026.10.19; the index serves up to 2026.10.18"},
}


def _relaxed_requirements(session: nox.Session, version: str) -> Path:
    """The pin's requirements/common.txt, minus version floors listed in RELAXED."""
    source = ROOT / "build" / version / "requirements" / "common.txt"
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
    """A constraints file that keeps the torch installed by `_cpu_torch`."""
    out = session.run("python", "-c", "import torch; print(torch.__version__)", silent=True)
    path = Path(session.virtualenv.location) / "torch-constraint.txt"
    path.write_text(f"torch=={out.strip().splitlines()[-1]}\n")
    return path


@_per_version("wheel", "patched wheel: official wheel + series, version <v>+pb.<hash>",
              venv_backend="none")  # fmt: skip
def wheel(session: nox.Session, version: str) -> None:
    """`nox -s wheel-0.22.0 -- --flavor cuda` for the CUDA wheel (default: cpu)."""
    _tool(session, "wheel", version, *session.posargs)


@_per_version("report", "PR-ready report per patch (reports/<v>/) from results/",
              venv_backend="none")  # fmt: skip
def report(session: nox.Session, version: str) -> None:
    _tool(session, "report", version)


@nox.session(venv_backend="none")
def status(session: nox.Session) -> None:
    """Table: every patch x every pinned version (needed / upstream / obsolete / conflicts)."""
    _tool(session, "status", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The project's own pytest suite (tooling; slow tests use the real vLLM sdist)."""
    session.install("-e", ".[dev]")
    session.run(
        "python", "-m", "pytest", "tests", "--ignore=tests/equivalence",
        "--ignore=tests/test_split_recovered_kernel.py", *session.posargs,
    )  # fmt: skip


@nox.session
def kernels(session: nox.Session) -> None:
    """Standalone Triton kernels under development (scripts/kernels) on CPU via the interpreter."""
    session.install(_cpu_torch(), "triton", "numpy", "pytest", "gitpython")
    session.install("--no-deps", "-e", ".")
    session.env["TRITON_INTERPRET"] = "1"
    session.run("python", "-m", "pytest", "tests/test_split_recovered_kernel.py", "-q")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


# --- CPU tier (issue 7) ---
# Sessions exist for every pin that has a CPU runtime recipe (verify/runtime.py:RECIPES). They
# run in the current environment: the steps build their own cached runtime venv. Arguments after
# `--` go to `python -m verify.e2e` (e.g. `nox -s e2e-0.22.0 -- --quick --tree DIR --model M`).
def _cpu_pins() -> list[str]:
    from verify.runtime import RECIPES

    return [v for v in PINNED if v in RECIPES]


def _e2e(session: nox.Session, *args: str) -> None:
    session.run(sys.executable, "-m", "verify.e2e", *args, *session.posargs, external=True)


for _v in _cpu_pins():

    @nox.session(name=f"e2e-{_v}", venv_backend="none")
    def _e2e_session(session: nox.Session, _v: str = _v) -> None:
        """CPU e2e: token identity + embeddings A/B, then the broken-patch test (must fail)."""
        _e2e(session, "tokens", "--version", _v)
        _e2e(session, "embed", "--version", _v)
        session.run(sys.executable, "-m", "pytest", "tests/cpu_tier", "-m", "slow", "-q",
                    env={"PATCHBENCH_SLOW": "1"}, external=True)  # fmt: skip

    @nox.session(name=f"serve-bench-{_v}", venv_backend="none")
    def _serve_bench_session(session: nox.Session, _v: str = _v) -> None:
        """CPU: vllm serve + vllm bench serve, interleaved A/B, ratio with 95% CI."""
        _e2e(session, "serve-bench", "--version", _v)

    @nox.session(name=f"gsm8k-{_v}", venv_backend="none")
    def _gsm8k_session(session: nox.Session, _v: str = _v) -> None:
        """CPU: lm_eval gsm8k (local data) against both served roots; identical responses."""
        _e2e(session, "gsm8k", "--version", _v)
