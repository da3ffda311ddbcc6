"""The generated workflow's scheduled watch job: it ports to a newer release only when the index
has one, and its decision script says so (run here with stand-ins for the tool)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from verify import ci_config

REPO = Path(__file__).resolve().parent.parent


def test_the_watch_job_runs_port_and_drift_on_schedule():
    workflow = yaml.safe_load((REPO / ci_config.WORKFLOW).read_text())
    job = workflow["jobs"]["watch"]
    assert "schedule" in job["if"]
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert 'python -m verify port "$PIN" "$RELEASE"' in runs and "status --drift" in runs
    assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in job["steps"])
    assert "gh pr create --draft" in runs


@pytest.mark.parametrize(("newest", "ports"), [("0.34.1", True), ("0.33.0", False),
                                                ("0.9.0", False)])  # fmt: skip
def test_the_watch_decision(tmp_path, newest, ports):
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$*" in\n  "-m verify.pins newest") echo 0.33.0 ;;\n'
                    f'  "-m verify status --newest") echo {newest} ;;\nesac\n')  # fmt: skip
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.write_text("")
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "GITHUB_OUTPUT": str(out)}
    subprocess.run(["bash", "-c", ci_config.WATCH_SCRIPT], env=env, check=True)
    assert (f"release={newest}" in out.read_text()) is ports
