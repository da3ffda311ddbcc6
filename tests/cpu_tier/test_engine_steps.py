"""(slow) The A/B core's engine worker on real vLLM (the CPU runtime, the tiny chat model):
one penalized batch comes back with its engine steps and CPU shares, so the GPU runs of issue
22 record them too (verify.ab.engines.step_stats, cpu_shares)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verify.ab.engines import Engine, worker_command

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {
    "batch": 4,
    "output_len": 48,
    "input_len": 8,
    "temperature": 1.0,
    "presence_penalty": 1.5,
    "frequency_penalty": 0.5,
    "repetition_penalty": 1.1,
}


@pytest.mark.slow
def test_a_real_engine_reports_its_steps_and_cpus(tmp_path):
    from verify import runtime, tinymodel

    venv = runtime.ensure_venv("0.22.0")
    python = str(venv / "bin" / "python")
    model, _ = tinymodel.ensure_model("chat", python)
    engine_args = {"max_model_len": 256, "enforce_eager": True}
    env = {**os.environ, **runtime.RUNTIME_ENV, "PYTHONPATH": str(ROOT)}
    cmd = worker_command(python, str(model), engine_args, tmp_path / "worker")
    engine = Engine(cmd, env, tmp_path / "worker", label="cpu engine").start()
    try:
        engine.wait_ready(timeout=600)
        result = engine.call({"config": CONFIG}, timeout=600)
    finally:
        engine.stop(grace=30)
    assert result["output_tokens"] == 4 * 48
    steps = result["steps"]
    # 48 output batches at least, the first the prefill's (more where requests reach the engine
    # core over two steps: each decodes 48 tokens, some in steps of their own)
    assert 47 <= steps["steps"] < 2 * 48, steps
    assert 0 < steps["median_step_ms"] <= steps["p99_step_ms"] <= steps["max_step_ms"]
    assert steps["median_tok_per_s"] == pytest.approx(4 / (steps["median_step_ms"] / 1000))
    assert sum(result["cpus"].values()) == pytest.approx(1.0), result["cpus"]
