"""The GPU tier's front (`python -m verify.gpu.tier`, `nox -s gpu-<v>`): the CUDA runtime from
the index, and a workload run with that runtime's Python and site (stand-in runtime here)."""

from __future__ import annotations

import pytest

from verify import runtime
from verify.errors import PatchbenchError
from verify.gpu import tier


@pytest.fixture
def cuda_runtime(tmp_path) -> runtime.Runtime:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return runtime.Runtime("0.22.0", tmp_path / "venv", site, None, None, "cuda")


def test_a_workload_runs_on_the_runtime_python_and_site(cuda_runtime, tmp_path):
    env = tier.workload_env(cuda_runtime, tmp_path / "ov", tmp_path / "out",
                            ["PB_MODEL_SHAPE=qwen3-8b", "PB_ENTROPY=1.0"])  # fmt: skip
    assert env["PB_PYTHON"] == str(cuda_runtime.venv / "bin" / "python")
    assert env["PB_SITE"] == str(cuda_runtime.site) and env["PB_PIN"] == "0.22.0"
    assert env["PB_MODEL_SHAPE"] == "qwen3-8b" and env["OUT"] == str(tmp_path / "out")
    assert "PYTHONPATH" not in env and "VLLM_TARGET_DEVICE" not in env


@pytest.mark.parametrize("knob", ["MODEL=x", "PB_SHAPES"])
def test_a_knob_that_is_not_pb_key_value_is_a_named_error(cuda_runtime, tmp_path, knob):
    with pytest.raises(PatchbenchError, match="PB_KEY=VALUE"):
        tier.workload_env(cuda_runtime, tmp_path, tmp_path, [knob])


def test_install_only_builds_the_cuda_runtime_and_runs_nothing(monkeypatch, cuda_runtime, capsys):
    asked = []

    def get_runtime(version, tree=None, *, patched=True, say=print, flavor="cpu"):
        asked.append((version, patched, flavor))
        return cuda_runtime

    monkeypatch.setattr(runtime, "get_runtime", get_runtime)
    monkeypatch.setattr(tier, "pack_overlay", lambda v: pytest.fail("no workload asked"))
    assert tier.main(["0.22.0", "--install-only"]) == 0
    assert asked == [("0.22.0", False, "cuda")]
    assert str(cuda_runtime.site) in capsys.readouterr().out


def test_a_workload_without_a_tag_is_refused():
    with pytest.raises(SystemExit):
        tier.main(["0.22.0", "engine-aa"])


def test_every_workload_script_exists_and_reads_the_runtime_knobs():
    for script in tier.WORKLOADS.values():
        text = (tier.REPO / script).read_text()
        assert "PB_SITE" in text and "PB_PYTHON" in text, script
