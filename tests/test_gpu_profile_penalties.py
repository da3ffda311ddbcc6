"""scripts/gpu_profile_penalties.py without a GPU: the configs it profiles are the penalty A/B's
(verify/gpu/penalty_plan.py names and samplings), seeded unless --unseeded. A CPU run of the
whole script: `VLLM_USE_V2_MODEL_RUNNER=0 <a 0.22.0 CPU runtime>/bin/python
scripts/gpu_profile_penalties.py --batch 2 --output-len 8 --model <a small model> --out DIR`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from verify.gpu import penalty_plan

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_profile_penalties.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_profile_penalties", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_profiled_pair_is_the_penalty_ab_pair_by_name_and_sampling():
    script = _load()
    args = script.parse_args(["--out", "x", "--batch", "8", "--output-len", "64"])
    configs = script.configs(args)
    assert list(configs) == ["plain-k20p95-b8-l64", "presence-k20p95-b8-l64"]
    for name, config in configs.items():
        sampling = name.rsplit("-b8", 1)[0]
        assert config == {"batch": 8, "output_len": 64, "input_len": penalty_plan.INPUT_LEN,
                          **penalty_plan.SAMPLINGS[sampling]}  # fmt: skip


def test_unseeded_requests_carry_no_seed_and_seeded_ones_the_harness_default():
    script = _load()
    unseeded = script.configs(
        script.parse_args(["--out", "x", "--unseeded", "--pair", "plain:pen"])
    )
    assert [c["seed"] for c in unseeded.values()] == [None, None]
    seeded = script.configs(script.parse_args(["--out", "x", "--pair", "plain:pen"]))
    assert all("seed" not in c for c in seeded.values())


def test_a_pair_the_penalty_plan_does_not_have_is_refused():
    with pytest.raises(SystemExit):
        _load().parse_args(["--out", "x", "--pair", "plain:presence-k20p95"])
