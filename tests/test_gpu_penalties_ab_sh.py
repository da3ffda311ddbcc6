"""scripts/gpu_penalties_ab.sh without a GPU: a stand-in `python3` records each call's
arguments (and writes the planner's argument file), so the knobs can be seen reaching
`python -m verify.ab engine`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_penalties_ab.sh"
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$PB_TEST_CALLS"
prev=
for a in "$@"; do [ "$prev" = --out-args ] && echo "--config=x" > "$a"; prev=$a; done
exit 0
"""


def engine_call(tmp_path: Path, **knobs: str) -> str:
    """The arguments the script gave `python3 -m verify.ab engine`, run with `knobs`."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts")
    for name, text in {"python3": FAKE_PYTHON, "nvidia-smi": "#!/usr/bin/env bash\n"}.items():
        (bin_dir / name).parent.mkdir(exist_ok=True)
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "bundle" / "site").mkdir(parents=True)
    (tmp_path / "bundle" / "site" / ".ready").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env |= {"PB_BUNDLE": str(tmp_path / "bundle"), "PB_WORK": str(tmp_path / "work")}
    env |= {"PB_TEST_CALLS": str(calls), **knobs}
    done = subprocess.run(
        ["bash", "scripts/gpu_penalties_ab.sh", "t"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = [line for line in calls.read_text().splitlines() if "verify.ab engine" in line]
    assert len(found) == 1, calls.read_text()
    return found[0]


def test_rounds_knob_reaches_the_engine_ab(tmp_path):
    call = engine_call(tmp_path, PB_ROUNDS="60")
    assert "--rounds 60 " in call
    assert f"--base-site {tmp_path}/bundle/site " in call


def test_rounds_default_is_twenty(tmp_path):
    assert "--rounds 20 " in engine_call(tmp_path)
