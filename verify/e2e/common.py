"""Shared plumbing of the CPU e2e steps: runtime + model setup, running a worker in a root,
result files (verify.results schema, tier ``cpu``)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from verify.ab.servers import log_tail  # noqa: F401  (re-exported for the e2e steps)
from verify.errors import PatchbenchError

WORKER = Path(__file__).resolve().parent / "worker.py"
SHIMS = Path(__file__).resolve().parent / "shims"
ROOTS = ("pristine", "patched")


def say(msg: str) -> None:
    print(f"[e2e] {msg}", flush=True)


def check_model_path(model: str | Path) -> Path:
    path = Path(model).expanduser()
    if not path.exists():
        raise PatchbenchError(
            f"model path does not exist: {path} (give a local model directory with --model, "
            "or leave --model out to use the built-in tiny model)"
        )
    if path.is_dir() and not (path / "config.json").is_file():
        raise PatchbenchError(f"model path {path} has no config.json: not a model directory")
    return path.resolve()


@dataclass
class Context:
    """What every step needs: the runtime, the model(s), and timings of the setup."""

    version: str
    runtime: object  # verify.runtime.Runtime
    model: Path
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    patched_env: dict[str, str] = field(default_factory=dict)  # the patched root's workers only

    def env(self, root: str) -> dict[str, str]:
        """The runtime's environment of `root`, with --patched-env for the patched root."""
        env = self.runtime.env(root)
        return {**env, **self.patched_env} if root == "patched" else env

    def numbers_header(self) -> dict:
        rt = self.runtime
        return {
            "versions": self.versions,
            "runtime_venv": str(rt.venv),
            "tree": str(rt.series.tree) if rt.series else None,
            "tree_head": rt.series.head if rt.series else None,
            "tree_diff_hash": rt.series.hash if rt.series else None,
            "overlaid_files": _overlaid(rt),
            "model": str(self.model),
            "setup_seconds": self.timings,
            **({"patched_env": self.patched_env} if self.patched_env else {}),
        }


def _overlaid(rt) -> list[str]:
    if not rt.overlay:
        return []
    marker = Path(rt.overlay) / ".patchbench-complete"
    try:
        return json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return []


def setup(version: str, model: str | None, tree: str | None, kind: str = "chat") -> Context:
    from verify import runtime, tinymodel

    if model is not None:  # fail fast, before a multi-minute install
        model_path = check_model_path(model)
    timings = {}
    started = time.monotonic()
    venv_was_ready = runtime.is_complete(runtime.venv_dir(version))
    rt = runtime.get_runtime(version, Path(tree) if tree else None, say=say)
    timings["runtime_s"] = round(time.monotonic() - started, 1)
    timings["runtime_was_cached"] = venv_was_ready
    if model is None:
        model_path, built = tinymodel.ensure_model(kind, rt.python, say=say)
        timings["model_build_s"] = round(built, 1)
    ctx = Context(version, rt, model_path, timings)
    ctx.versions = rt.versions()
    return ctx


def run_worker(
    ctx: Context,
    root: str,
    mode: str,
    out: Path,
    *extra: str,
    timeout: float = 1800,
    model: Path | None = None,
) -> dict:
    rt = ctx.runtime
    cmd = [
        rt.python,
        str(WORKER),
        mode,
        "--model",
        str(model or ctx.model),
        "--out",
        str(out),
        *extra,
    ]
    log = out.with_suffix(".log")
    env = ctx.env(root)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(SHIMS)]))
    say(f"{root}: {shlex.join(cmd[1:])}  (log {log})")
    started = time.monotonic()
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=timeout,
                cwd=tempfile.gettempdir(),
            )
        except subprocess.TimeoutExpired:
            raise PatchbenchError(
                f"{mode} worker ({root}) ran past {timeout:.0f}s; log tail:\n{log_tail(log)}"
            ) from None
    if proc.returncode:
        raise PatchbenchError(
            f"{mode} worker ({root}) failed with exit code {proc.returncode}; log tail:\n"
            f"{log_tail(log)}"
        )
    data = json.loads(out.read_text())
    data["wall_s"] = round(time.monotonic() - started, 1)
    in_overlay = bool(rt.overlay) and str(rt.overlay) in data.get("vllm_file", "")
    if in_overlay != (root == "patched"):
        raise PatchbenchError(f"{root} worker imported vllm from {data.get('vllm_file')}")
    return data


def write_result(
    ctx: Context,
    step: str,
    seed: str,
    outcome: str,
    numbers: dict,
    reason: str = "",
    tables: list[str] | None = None,
) -> Path:
    from verify import results

    command = shlex.join(["python", "-m", "verify.e2e", *sys.argv[1:]])
    result = results.make(
        step,
        seed,
        ctx.version,
        outcome,
        {**ctx.numbers_header(), **numbers},
        reason=reason,
        command=command,
        tables=tables,
    )
    path = results.write(result, "cpu", step, root=results_root())
    say(f"{step}: {outcome.upper()}{' - ' + reason if reason else ''} -> {path}")
    return path


def results_root() -> Path:
    """`PATCHBENCH_RESULTS_DIR` (tests point it at a temp dir), else the repo's results/."""
    from verify import paths

    return paths.results_root()


def workdir(version: str, step: str) -> Path:
    from verify.runtime import cache_root

    path = cache_root() / "e2e" / version / step / time.strftime("%Y%m%dT%H%M%S")
    path.mkdir(parents=True, exist_ok=True)
    return path


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
