"""The generated CI files: current, accepted by actionlint, and shaped like vLLM's pipeline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verify import ci_config

REPO = Path(__file__).resolve().parent.parent
#: Step keys of vLLM's .buildkite/test-pipeline.yaml that this pipeline may use.
VLLM_STEP_KEYS = {
    "label", "timeout_in_minutes", "gpu", "num_gpus", "source_file_dependencies", "commands",
    "working_dir", "optional", "fast_check", "mirror_hardwares", "soft_fail",
}  # fmt: skip
VLLM_GPUS = {"a100", "h100", "h200", "b200"}


@pytest.fixture(scope="module")
def sessions() -> list[dict]:
    return ci_config.nox_sessions(REPO)


def _actionlint() -> str:
    beside_python = str(Path(sys.executable).parent)
    found = shutil.which("actionlint", path=beside_python) or shutil.which("actionlint")
    assert found, "actionlint is missing: `pip install -e '.[dev]'` installs it"
    return found


def test_committed_files_are_the_generators_output():
    assert ci_config.write(REPO, check=True) == [], "run `python -m verify ci-config`"


def test_check_mode_names_a_stale_file_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(ci_config, "render", lambda root: {ci_config.PIPELINE: "steps: []\n"})
    target = tmp_path / ci_config.PIPELINE
    target.parent.mkdir(parents=True)
    target.write_text("old\n")
    assert ci_config.write(tmp_path, check=True) == [ci_config.PIPELINE]
    assert target.read_text() == "old\n"
    assert ci_config.write(tmp_path) == [ci_config.PIPELINE]
    assert ci_config.write(tmp_path, check=True) == []


def test_workflow_passes_actionlint():
    run = subprocess.run([_actionlint(), str(ci_config.WORKFLOW)], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The check above can fail: a matrix key that does not exist and an undeclared label."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / ci_config.ACTIONLINT, tmp_path / ci_config.ACTIONLINT)
    text = (REPO / ci_config.WORKFLOW).read_text()
    broken = text.replace("${{ matrix.step }}", "${{ matrix.stp }}").replace("- h100", "- h1OO")
    (tmp_path / ci_config.WORKFLOW).write_text(broken)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    run = subprocess.run([_actionlint(), str(ci_config.WORKFLOW)], cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1
    assert "stp" in run.stdout and "h1OO" in run.stdout


def test_workflow_matrix_is_pins_x_sessions(sessions):
    jobs = yaml.safe_load((REPO / ci_config.WORKFLOW).read_text())["jobs"]
    cpu = {e["session"] for e in jobs["cpu"]["strategy"]["matrix"]["include"]}
    gpu = {(e["session"], e["step"]) for e in jobs["gpu"]["strategy"]["matrix"]["include"]}
    fast = set(jobs["fast"]["strategy"]["matrix"]["session"])
    steps = ci_config.gpu_steps(REPO)
    for session in sessions:
        name, tags = session["name"], session["tags"]
        kind, pin = ci_config.split_name(name)
        if "gpu" in tags:
            assert {(name, step) for step in ci_config.steps_of(pin, steps)} <= gpu
        elif kind in ci_config.NOT_IN_MATRIX:
            assert name not in cpu | fast
        elif "heavy" in tags and pin:
            assert name in cpu
        elif "fast" in tags:
            assert name in fast
    assert jobs["gpu"]["runs-on"][0] == "self-hosted" and "gpu" in jobs["gpu"]["runs-on"]
    assert jobs["cpu"]["runs-on"] == ci_config.CPU_RUNNER
    assert set(jobs["gather"]["needs"]) == {"cpu", "gpu"}


def test_buildkite_pipeline_has_vllms_step_shape(sessions):
    data = yaml.safe_load((REPO / ci_config.PIPELINE).read_text())
    assert list(data) == ["steps"] and data["steps"]
    gpu_sessions = {s["name"] for s in sessions if "gpu" in s["tags"]}
    labels = [step["label"] for step in data["steps"]]
    assert len(labels) == len(set(labels))
    for step in data["steps"]:
        assert set(step) <= VLLM_STEP_KEYS, step["label"]
        assert step["gpu"] in VLLM_GPUS
        assert isinstance(step["num_gpus"], int) and step["num_gpus"] >= 1
        for dependency in step["source_file_dependencies"]:
            assert (REPO / dependency).exists(), dependency
        assert all(isinstance(c, str) for c in step["commands"])
        nox = [c for c in step["commands"] if c.startswith("nox -s ")]
        assert len(nox) == 1 and nox[0].split()[2] in gpu_sessions, step["label"]
    steps = ci_config.gpu_steps(REPO)
    expected = sum(len(ci_config.steps_of(ci_config.split_name(s)[1], steps)) for s in gpu_sessions)
    assert len(data["steps"]) == expected
