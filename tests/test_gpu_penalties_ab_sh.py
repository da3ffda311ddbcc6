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


def run_script(tmp_path: Path, gpus: int = 1, **knobs: str) -> subprocess.CompletedProcess:
    """`gpu_penalties_ab.sh t` run with `knobs` on a machine whose `nvidia-smi -L` lists `gpus`
    GPUs; the `verify.ab engine` command line goes to tmp_path/argv."""
    bin_dir, bundle = tmp_path / "bin", tmp_path / "bundle"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3\n" for i in range(gpus))
    smi = f'#!/usr/bin/env bash\n[ "$1" = -L ] && printf %s {shlex.quote(listing)}\nexit 0\n'
    (bin_dir / "nvidia-smi").write_text(smi)
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bundle / "site").mkdir(parents=True)
    (bundle / "site" / ".ready").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env |= {"PB_BUNDLE": str(bundle), "PB_WORK": str(tmp_path / "work")}
    env |= {"PB_TEST_ARGV": str(tmp_path / "argv"), **knobs}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run(
        ["bash", str(SCRIPT), "t"], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def engine_args(tmp_path: Path, gpus: int = 1, **knobs: str):
    """The parsed `verify.ab engine` arguments of `run_script`."""
    done = run_script(tmp_path, gpus, **knobs)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = (tmp_path / "argv").read_text().splitlines()
    return build_parser().parse_args(shlex.split(line))


def test_rounds_knob_reaches_the_engine_ab(tmp_path):
    args = engine_args(tmp_path, PB_ROUNDS="60")
    assert args.command == "engine" and args.rounds == 60
    assert args.base_site == str(tmp_path / "bundle" / "site")


def test_rounds_default_is_twenty(tmp_path):
    assert engine_args(tmp_path).rounds == 20


def test_engines_that_do_not_fit_one_gpu_together_are_refused(tmp_path):
    done = run_script(tmp_path, gpus=2, PB_VARIANTS="series patched", PB_SHAPES="256x2048")
    assert done.returncode == 5 and "do not fit the GPU" in done.stderr
    assert not (tmp_path / "argv").exists()


def test_one_gpu_per_variant_puts_each_engine_on_its_own_card(tmp_path):
    args = engine_args(
        tmp_path, gpus=2, PB_GPU_PER_VARIANT="1", PB_VARIANTS="series patched", PB_SHAPES="256x2048"
    )
    series, patched = args.variant
    assert series.startswith("series=") and series.endswith(",CUDA_VISIBLE_DEVICES=0")
    assert "VLLM_V1_PENALTY_STATE=0" in series
    assert patched.startswith("patched=") and patched.endswith(",CUDA_VISIBLE_DEVICES=1")


def test_one_gpu_per_variant_needs_a_gpu_for_each(tmp_path):
    done = run_script(tmp_path, PB_GPU_PER_VARIANT="1", PB_VARIANTS="series patched")
    assert done.returncode == 5 and "2 variants, 1 GPU(s) (0)" in done.stderr


def test_engines_in_turn_fit_one_gpu_each_alone(tmp_path):
    args = engine_args(
        tmp_path, PB_ENGINES_IN_TURN="1", PB_VARIANTS="series patched", PB_SHAPES="256x2048"
    )
    assert args.in_turn and [v.split("=", 1)[0] for v in args.variant] == ["series", "patched"]
    assert not any("CUDA_VISIBLE_DEVICES" in v for v in args.variant)
