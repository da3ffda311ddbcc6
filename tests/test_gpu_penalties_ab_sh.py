"""scripts/gpu_penalties_ab.sh without a GPU: a stand-in `python3` on PATH runs the real
planner, skips the device steps (model, sites, meta) and records the `python -m verify.ab
engine` command line, which must parse with the A/B core's own parser and carry the knobs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from verify.ab.__main__ import build_parser

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_penalties_ab.sh"
FAKE_PYTHON = f"""#!/usr/bin/env bash
if [ "$1" = - ]; then cat > /dev/null; exit 0; fi   # the device steps (model, sites, meta)
if [ "$2" = verify.gpu.penalty_plan ]; then exec {sys.executable} "$@"; fi
shift 2  # -m verify.ab
{{ printf '%q ' "$@"; echo; }} >> "$PB_TEST_ARGV"
"""


def engine_args(tmp_path: Path, **knobs: str):
    """The parsed `verify.ab engine` arguments of `gpu_penalties_ab.sh t` run with `knobs`."""
    bin_dir, bundle, argv = tmp_path / "bin", tmp_path / "bundle", tmp_path / "argv"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bundle / "site").mkdir(parents=True)
    (bundle / "site" / ".ready").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env |= {"PB_BUNDLE": str(bundle), "PB_WORK": str(tmp_path / "work")}
    env |= {"PB_TEST_ARGV": str(argv), **knobs}
    done = subprocess.run(
        ["bash", str(SCRIPT), "t"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = argv.read_text().splitlines()
    return build_parser().parse_args(shlex.split(line))


def test_rounds_knob_reaches_the_engine_ab(tmp_path):
    args = engine_args(tmp_path, PB_ROUNDS="60")
    assert args.command == "engine" and args.rounds == 60
    assert args.base_site == str(tmp_path / "bundle" / "site")


def test_rounds_default_is_twenty(tmp_path):
    assert engine_args(tmp_path).rounds == 20
