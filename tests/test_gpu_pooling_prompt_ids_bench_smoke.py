"""Torch-free checks of scripts/gpu_pooling_prompt_ids_bench.py and
scripts/pack_pooling_bench_roots.py.

The benchmark itself needs torch and the 0.18.1 roots; its CPU smoke run is
``python scripts/gpu_pooling_prompt_ids_bench.py --device cpu --quick ...`` (see the script's
docstring).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import commit_change
from verify.buildtree import BuildTree

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def micro() -> ModuleType:
    return _load("gpu_pooling_prompt_ids_bench")


@pytest.fixture(scope="module")
def packer() -> ModuleType:
    return _load("pack_pooling_bench_roots")


def test_pack_then_unpack(
    make_tree: Callable[..., BuildTree], tmp_path: Path, micro: ModuleType, packer: ModuleType
) -> None:
    tree = make_tree("0.18.1")
    tree.ensure_baseline()
    commit_change(tree, "vllm/pooling.py", "True", "False", "Keep ids on host")
    tree.git("rm", "-q", "vllm/sampler.py")
    tree.git("commit", "-q", "-m", "Drop sampler")

    out = tmp_path / "roots"
    manifest = packer.pack(tree, out)
    assert manifest["overlay"] == ["vllm/pooling.py"]
    assert manifest["deleted"] == ["vllm/sampler.py"]
    assert manifest["root_paths"] == ["vllm"]  # the synthetic release has no egg-info
    assert (out / "SERIES_HASH").read_text().strip() == manifest["series_hash"]

    work = tmp_path / "work"
    _, pristine, patched = micro.unpack_roots(out, work)
    assert "True" in (pristine / "vllm/pooling.py").read_text()
    assert "False" in (patched / "vllm/pooling.py").read_text()
    assert (pristine / "vllm/sampler.py").exists()
    assert not (patched / "vllm/sampler.py").exists()

    marker = pristine / "marker"
    marker.write_text("kept")
    micro.unpack_roots(out, work)  # unchanged pack: reused as is
    assert marker.exists()
    (out / "overlay/vllm/pooling.py").write_text("TOKENS_ON_DEVICE = None\n")
    micro.unpack_roots(out, work)  # changed pack: unpacked again
    assert not marker.exists()
    assert "None" in (work / "patched/vllm/pooling.py").read_text()


def test_missing_roots_say_how_to_pack(tmp_path: Path, micro: ModuleType) -> None:
    out = tmp_path / "m.json"
    argv = ["--device", "cpu", "--quick", "--roots", str(tmp_path / "none"), "--out", str(out)]
    assert micro.main(argv) == 2
    record = json.loads(out.read_text())
    assert record["status"] == "error"
    assert "pack_pooling_bench_roots.py" in record["error"]
    assert record["vllm_version"] == "0.18.1"


def test_paired_speedup_and_ci(micro: ModuleType) -> None:
    same = micro._paired([2e-6, 2e-6, 2e-6], [1e-6, 1e-6, 1e-6])
    assert same["speedup"] == pytest.approx(2.0)
    assert same["ci95"] == pytest.approx([2.0, 2.0])
    assert same["median_us"] == pytest.approx({"pristine": 2.0, "patched": 1.0})
    spread = micro._paired([3.0, 1.0], [1.0, 1.0])
    # verify.stats: geometric mean sqrt(3), a log-scale interval that stays positive
    assert spread["speedup"] == pytest.approx(3**0.5)
    assert 0 < spread["ci95"][0] < 3**0.5 < spread["ci95"][1]
