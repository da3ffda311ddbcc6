"""The harness shims (sitecustomize.py on a variant's PYTHONPATH) hook the vLLM module they
target in a fresh Python, through verify/after_import.py, on a stand-in vLLM package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from verify.ab.__main__ import PLANT_SITE
from verify.e2e.common import SHIMS


def _fake_vllm(root: Path, module: str, body: str) -> None:
    path = root / Path(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        if parent.parts:
            (root / parent / "__init__.py").touch()
    path.write_text(body)


def _run(paths: list[Path], code: str, **env: str) -> str:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)), **env}
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_planted_delay_sleeps_in_every_schedule_call_and_counts(tmp_path: Path):
    _fake_vllm(tmp_path, "vllm.v1.core.sched.scheduler", "class Scheduler:\n"
               "    def schedule(self):\n        return 'scheduled'\n")  # fmt: skip
    count = tmp_path / "count"
    code = (
        "from vllm.v1.core.sched.scheduler import Scheduler as S\n"
        "print([S().schedule() for _ in range(16)][-1])"
    )
    out = _run([PLANT_SITE, tmp_path], code, PATCHBENCH_PLANT_DELAY_MS="2",
               PATCHBENCH_PLANT_COUNT=str(count))  # fmt: skip
    assert out == "scheduled"
    calls, slept = count.read_text().split()
    assert int(calls) == 16 and float(slept) >= 16 * 0.002


def test_planted_count_can_be_written_at_every_step(tmp_path: Path):
    """A pooling run has a few engine steps: counted every 8, its count would be 0."""
    _fake_vllm(tmp_path, "vllm.v1.core.sched.scheduler", "class Scheduler:\n"
               "    def schedule(self):\n        return 'scheduled'\n")  # fmt: skip
    code = "from vllm.v1.core.sched.scheduler import Scheduler as S\n"
    code += "[S().schedule() for _ in range(3)]"
    for every, expected in (("8", None), ("1", "3")):
        count = tmp_path / f"count-{every}"
        _run([PLANT_SITE, tmp_path], code, PATCHBENCH_PLANT_DELAY_MS="1",
             PATCHBENCH_PLANT_COUNT=str(count), PATCHBENCH_PLANT_COUNT_EVERY=every)  # fmt: skip
        calls = count.read_text().split()[0] if count.exists() else None
        assert calls == expected


def test_no_delay_no_hook(tmp_path: Path):
    _fake_vllm(tmp_path, "vllm.v1.core.sched.scheduler", "class Scheduler:\n    pass\n")
    code = (
        "import vllm.v1.core.sched.scheduler as m; print(hasattr(m, 'PATCHBENCH_PLANTED_DELAY_S'))"
    )
    assert _run([PLANT_SITE, tmp_path], code) == "False"


def test_cpu_shim_turns_pinning_off(tmp_path: Path):
    _fake_vllm(tmp_path, "vllm.utils.torch_utils",
               "def async_tensor_h2d(data, dtype, target_device, pin_memory=True):\n"
               "    return pin_memory\n")  # fmt: skip
    code = "from vllm.utils.torch_utils import async_tensor_h2d as f; print(f(1, 2, 3))"
    assert _run([SHIMS, tmp_path], code) == "False"
    assert _run([tmp_path], code) == "True"  # without the shim: upstream's default


def test_planted_shim_chains_the_cpu_shim(tmp_path: Path):
    _fake_vllm(tmp_path, "vllm.utils.torch_utils",
               "def async_tensor_h2d(data, dtype, target_device, pin_memory=True):\n"
               "    return pin_memory\n")  # fmt: skip
    code = "from vllm.utils.torch_utils import async_tensor_h2d as f; print(f(1, 2, 3))"
    out = _run([PLANT_SITE, SHIMS, tmp_path], code, PATCHBENCH_PLANT_DELAY_MS="1")
    assert out == "False"
