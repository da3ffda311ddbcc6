"""scripts/gpu_penalties_ab_parallel.sh without a GPU: stand-ins for `nvidia-smi` (the GPU
count) and scripts/gpu_penalties_ab.sh (one job: it records
its environment and writes a record) show each job alone on its GPU and cores, its knobs as a
shell reads them, the records and one log tarball back, and a failing job failing the call."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_penalties_ab_parallel.sh"
FAKE_JOB = """#!/usr/bin/env bash
mkdir -p "$OUT/gpu"
printf '{"gpu": "%s", "parallel": "%s", "sampling": "%s", "cache": "%s", "port": "%s"}' \\
  "$CUDA_VISIBLE_DEVICES" "$PB_PARALLEL" "${PB_SAMPLING:-}" "$PB_CACHE_ROOT" "$VLLM_PORT" \\
  > "$OUT/gpu/$1.json"
echo "engine log of $1" > "$OUT/gpu/$1-patched.log"
echo "gpu_penalties_ab $1: rc ${PB_TEST_RC:-0}"
exit "${PB_TEST_RC:-0}"
"""


def run(tmp_path: Path, *jobs: str, gpus: int = 4) -> tuple[int, str, Path]:
    """(exit code, output, $OUT) of the script run from `tmp_path` with stand-ins."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "scripts")
    stand_ins = {
        "scripts/gpu_penalties_ab.sh": FAKE_JOB,
        "bin/nvidia-smi": "#!/usr/bin/env bash\n" + "echo GPU\n" * gpus,
        "bin/nproc": "#!/usr/bin/env bash\necho 64\n",
        "bin/taskset": '#!/usr/bin/env bash\nshift 2\nexec "$@"\n',  # this machine's cores differ
    }
    for rel, text in stand_ins.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        (tmp_path / rel).chmod(0o755)
    (tmp_path / "bundle" / "site").mkdir(parents=True)
    (tmp_path / "bundle" / "site" / ".ready").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out)}
    env |= {"PB_BUNDLE": str(tmp_path / "bundle"), "PB_LOGS": str(tmp_path / "logs")}
    done = subprocess.run(
        ["bash", "scripts/gpu_penalties_ab_parallel.sh", *jobs],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode, done.stdout + done.stderr, out


def test_each_job_runs_alone_on_its_gpu_and_cores_with_its_knobs(tmp_path):
    code, text, out = run(
        tmp_path,
        "t0 PB_SHAPES=256x2048 PB_SAMPLING='plain pen plain-topkp pen-topkp'",
        "t1 PB_SHAPES=64x2048",
    )
    assert code == 0, text
    first, second = (json.loads((out / "gpu" / f"{t}.json").read_text()) for t in ("t0", "t1"))
    assert (first["gpu"], second["gpu"]) == ("0", "1")
    assert first["sampling"] == "plain pen plain-topkp pen-topkp"
    assert "GPU 0 of 4, CPUs 0-15" in first["parallel"]
    assert "GPU 1 of 4, CPUs 16-31" in second["parallel"]
    assert first["cache"] != second["cache"]
    assert (first["port"], second["port"]) == ("20000", "21000")  # engines' ports kept apart
    with tarfile.open(out / "gpu" / "logs-t0.tgz") as tar:
        names = tar.getnames()
    assert "./t1/gpu/t1-patched.log" in names and "./t0.out" in names
    assert sorted(p.name for p in (out / "gpu").iterdir()) == ["logs-t0.tgz", "t0.json", "t1.json"]


def test_a_failing_job_fails_the_call_and_keeps_the_others_records(tmp_path):
    code, text, out = run(tmp_path, "ok PB_SHAPES=64x2048", "bad PB_TEST_RC=5")
    assert code == 1 and "job bad: rc 5" in text
    assert (out / "gpu" / "ok.json").exists() and (out / "gpu" / "logs-ok.tgz").exists()


def test_more_jobs_than_gpus_are_refused_before_anything_runs(tmp_path):
    code, text, out = run(tmp_path, "a", "b", "c", gpus=2)
    assert code == 2 and "3 jobs need 3 GPUs; this machine has 2" in text
    assert not (out / "gpu").exists()
    code, text, out = run(tmp_path / "x", "a PB_GPU_PER_VARIANT=1", "b", gpus=2)
    assert code == 2 and "2 jobs need 3 GPUs" in text  # series and patched: a GPU each


def test_a_job_with_a_gpu_per_variant_takes_the_next_gpus_and_their_cores(tmp_path):
    code, text, out = run(
        tmp_path,
        "alone PB_VARIANTS=patched PB_SHAPES=128x2048",
        "both PB_GPU_PER_VARIANT=1 PB_VARIANTS='series patched' PB_SHAPES=256x2048",
        "last PB_VARIANTS=patched PB_SHAPES=256x2048",
    )
    assert code == 0, text
    alone, both, last = (
        json.loads((out / "gpu" / f"{t}.json").read_text()) for t in ("alone", "both", "last")
    )
    assert (alone["gpu"], both["gpu"], last["gpu"]) == ("0", "1,2", "3")
    assert "GPU 1,2 of 4, CPUs 16-47" in both["parallel"]
    assert "GPU 3 of 4, CPUs 48-63 (taskset), beside 2 other jobs" in last["parallel"]
    assert len({alone["cache"], both["cache"], last["cache"]}) == 3
