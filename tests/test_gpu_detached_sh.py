"""scripts/gpu_detached.sh: a job started in a session of its own outlives the process group
of the call that started it, and `watch` follows it, hands back what it wrote so far and says
whether it ended (with its status), still runs, or vanished."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_detached.sh"
#: A job like gpu_penalties_ab.sh: progress lines, a record under $OUT/gpu, then more time.
JOB = 'echo "round 0"; mkdir -p "$OUT/gpu"; echo "{\\"rounds\\": 1}" > "$OUT/gpu/r.json"; '


def detached(
    tmp_path: Path, *args: str, out: Path | None = None, **env_extra: str
) -> subprocess.CompletedProcess:
    """gpu_detached.sh ARGS from tmp_path/tree (a folder with one file: the job's copy of it)."""
    env = {**os.environ, "PB_DETACHED_ROOT": str(tmp_path / "jobs"), **env_extra}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "in-the-tree").write_text("x")
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _stop(tmp_path: Path, name: str) -> None:
    pid = tmp_path / "jobs" / name / "pid"
    if pid.exists():
        try:
            os.killpg(int(pid.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_watch_follows_the_job_to_its_end_and_hands_back_its_record_and_status(tmp_path):
    job = JOB + "pwd; cat in-the-tree; rm in-the-tree; exit 3"
    started = detached(tmp_path, "start", "j", "bash", "-c", job)
    assert started.returncode == 0 and "started j" in started.stdout
    done = detached(tmp_path, "watch", "j", "20", out=tmp_path / "out")
    assert done.returncode == 11, done.stdout + done.stderr
    assert "round 0" in done.stdout and "j ended with status 3" in done.stdout
    # it ran in its own copy of the caller's folder, which it left alone
    assert f"{tmp_path / 'jobs' / 'j' / 'tree'}\nx" in done.stdout
    assert (tmp_path / "tree" / "in-the-tree").exists()
    assert (tmp_path / "out" / "gpu" / "r.json").read_text().strip() == '{"rounds": 1}'
    assert "round 0" in (tmp_path / "out" / "gpu" / "detached-j.log").read_text()


def test_a_watch_shorter_than_the_job_hands_back_the_partial_record(tmp_path):
    try:
        detached(tmp_path, "start", "j", "bash", "-c", JOB + "sleep 30")
        time.sleep(0.5)
        t0 = time.monotonic()
        done = detached(tmp_path, "watch", "j", "1", out=tmp_path / "out")
        assert done.returncode == 10 and "still running" in done.stdout
        assert time.monotonic() - t0 < 10 and (tmp_path / "out" / "gpu" / "r.json").exists()
        again = detached(tmp_path, "start", "j", "true")
        assert again.returncode == 3 and "running already" in again.stderr
    finally:
        _stop(tmp_path, "j")
    gone = detached(tmp_path, "watch", "j", "0")
    assert gone.returncode == 12 and "vanished" in gone.stderr


def test_the_job_outlives_the_process_group_of_the_call_that_started_it(tmp_path):
    # The device tool ends a call's processes when it returns, all but new sessions.
    env = {**os.environ, "PB_DETACHED_ROOT": str(tmp_path / "jobs")}
    call = subprocess.Popen(
        ["bash", "-c", f"bash {SCRIPT} start j sleep 30; sleep 30"],
        cwd=tmp_path.joinpath("tree").mkdir() or tmp_path / "tree",
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        pid_file = tmp_path / "jobs" / "j" / "pid"
        for _ in range(100):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.1)
        os.killpg(call.pid, signal.SIGKILL)
        call.wait()
        time.sleep(0.3)
        os.kill(int(pid_file.read_text()), 0)  # raises if the job died with the call
        assert detached(tmp_path, "watch", "j", "0").returncode == 10
    finally:
        _stop(tmp_path, "j")


@pytest.mark.parametrize(
    "args, code, says",
    [
        (("start", "a/b", "true"), 2, "NAME: letters"),
        (("start", "j"), 2, "usage"),
        (("watch", "j", "soon"), 2, "usage"),
        (("watch", "nobody", "1"), 12, "no job nobody"),
        (("stop", "j"), 2, "usage"),
    ],
)
def test_bad_calls_are_named(tmp_path, args, code, says):
    done = detached(tmp_path, *args)
    assert done.returncode == code and says in done.stderr


def test_a_folder_too_large_to_copy_is_refused_and_loses_nothing(tmp_path):
    earlier = tmp_path / "jobs" / "j" / "out" / "gpu" / "r.json"  # an ended job's record
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    done = detached(tmp_path, "start", "j", "true", PB_DETACHED_MAX_MB="0")
    assert done.returncode == 4 and "more than PB_DETACHED_MAX_MB" in done.stderr
    assert not (tmp_path / "jobs" / "j" / "tree").exists()
    assert earlier.read_text() == "{}"
