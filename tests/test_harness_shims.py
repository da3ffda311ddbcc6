"""The harness shims (sitecustomize.py on a variant's PYTHONPATH) hook the vLLM module they
target in a fresh Python, through verify/after_import.py, on a stand-in vLLM package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from verify.ab.variants import PLANT_SITE
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
    calls, slept, gpu = count.read_text().split()
    assert int(calls) == 16 and float(slept) >= 16 * 0.002 and float(gpu) == 0  # no GPU spin


def test_the_host_plant_busy_waits_holding_the_cpu_only_when_asked(tmp_path: Path):
    """PATCHBENCH_PLANT_SPIN=1: the planted wait is a busy wait (CPU time near the wall time
    it waits, which the engine's other threads cannot use); without it, a sleep (no CPU)."""
    _fake_vllm(tmp_path, "vllm.v1.core.sched.scheduler", "class Scheduler:\n"
               "    def schedule(self):\n        pass\n")  # fmt: skip
    code = (
        "import time; from vllm.v1.core.sched.scheduler import Scheduler; s = Scheduler()\n"
        "c, w = time.process_time(), time.perf_counter()\n"
        "for _ in range(5): s.schedule()\n"
        "print(time.process_time() - c, time.perf_counter() - w)"
    )
    sleep = _run([PLANT_SITE, tmp_path], code, PATCHBENCH_PLANT_DELAY_MS="20")
    spin = _run([PLANT_SITE, tmp_path], code, PATCHBENCH_PLANT_DELAY_MS="20",
                PATCHBENCH_PLANT_SPIN="1")  # fmt: skip
    (cpu_sleep, wall_sleep), (cpu_spin, wall_spin) = (map(float, o.split()) for o in (sleep, spin))
    assert wall_sleep >= 0.1 and cpu_sleep < 0.015
    assert wall_spin >= 0.1 and cpu_spin > 0.025  # a quarter of the wait, on a busy machine


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


FAKE_LOGITS = (
    "class LogitsProcessor:\n"
    "    def __init__(self, vocab, scale=1.0):\n"
    "        self.vocab, self.scale = vocab, scale\n"
    "    def forward(self, x):\n"
    "        return x * self.scale\n"
)


def test_the_logit_scale_shim_scales_every_logits_processor(tmp_path: Path):
    from verify.ab.variants import LOGIT_SCALE_SITE

    _fake_vllm(tmp_path, "vllm.model_executor.layers.logits_processor", FAKE_LOGITS)
    code = "from vllm.model_executor.layers.logits_processor import LogitsProcessor as L\n"
    code += "print(L(10).scale, L(10, scale=3.0).forward(2))"
    out = _run([LOGIT_SCALE_SITE, tmp_path], code, PATCHBENCH_LOGIT_SCALE="250000")
    assert out == "250000.0 500000.0"
    assert _run([LOGIT_SCALE_SITE, tmp_path], code) == "1.0 6.0"  # unset: untouched


def test_a_planted_variant_stacks_its_shim_on_the_logit_scale(tmp_path: Path):
    """Two shims fix the same module: the planted one chains to the logit scale's, and both
    fix-ups run (verify.after_import passes a module through every finder that wants it)."""
    from verify.ab.variants import LOGIT_SCALE_SITE

    _fake_vllm(tmp_path, "vllm.model_executor.layers.logits_processor", FAKE_LOGITS)
    code = "import vllm.model_executor.layers.logits_processor as m\n"
    code += "print(m.PATCHBENCH_LOGIT_SCALE, m.PATCHBENCH_PLANTED_GPU_DELAY_S)"
    out = _run([PLANT_SITE, LOGIT_SCALE_SITE, tmp_path], code, PATCHBENCH_LOGIT_SCALE="2",
               PATCHBENCH_PLANT_GPU_US="50")  # fmt: skip
    assert out == "2.0 5e-05"


def test_a_variant_gets_the_logit_scale_shim_only_when_a_scale_is_asked(tmp_path, monkeypatch):
    from verify.ab.variants import LOGIT_SCALE_SITE, variant_env

    monkeypatch.delenv("PATCHBENCH_LOGIT_SCALE", raising=False)
    plain = variant_env("a", ["/site"], {}, tmp_path)
    assert plain["PYTHONPATH"] == "/site"
    scaled = variant_env("a", ["/site"], {"PATCHBENCH_LOGIT_SCALE": "5"}, tmp_path)
    assert scaled["PYTHONPATH"].split(os.pathsep) == ["/site", str(LOGIT_SCALE_SITE)]
