"""Production-shaped models on dummy weights: the shapes' configs, the device plans that size
engines for them, the logit-scale search that gives them a realistic next-token entropy, and
the GPU-side planted effect (on stand-in torch and vLLM modules: no GPU here)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verify.ab import output_entropy
from verify.ab.__main__ import build_parser, parse_variant
from verify.ab.variants import PLANT_SITE
from verify.gpu import engine_aa, penalty_plan, shapes


@pytest.mark.parametrize(
    ("name", "billions", "kv_kib"),
    [("qwen3-8b", 8.19, 144), ("llama-3.1-8b", 8.03, 128), ("mistral-7b", 7.24, 128),
     ("qwen3-30b-a3b", 30.5, 96)],
)  # fmt: skip
def test_shapes_have_their_published_size(name, billions, kv_kib, tmp_path):
    cfg = shapes.config(name)
    assert shapes.parameters(cfg) / 1e9 == pytest.approx(billions, rel=0.01)
    assert shapes.kv_bytes_per_token(cfg) == kv_kib * 1024
    written = json.loads((shapes.write(name, tmp_path / name) / "config.json").read_text())
    assert written["architectures"] and written["torch_dtype"] == "bfloat16"


def test_an_unknown_shape_is_a_named_error(tmp_path, capsys):
    with pytest.raises(shapes.ShapeError, match="qwen3-8b"):
        shapes.config("qwen3-9b")
    assert shapes.main(["qwen3-9b", str(tmp_path / "m")]) == 2
    assert "expected one of" in capsys.readouterr().err and not (tmp_path / "m").exists()


def test_a_shape_plan_runs_dummy_weights_and_counts_them_in_the_memory():
    small = penalty_plan.engine_args(3, [(64, 1024)], 130 * 2**30)
    big = penalty_plan.engine_args(3, [(64, 1024)], 130 * 2**30, "qwen3-8b")
    assert "load_format" not in small
    assert big["load_format"] == "dummy" and big["skip_tokenizer_init"] is True
    assert big["kv_cache_memory_bytes"] > small["kv_cache_memory_bytes"]  # 36 layers, not 28
    with pytest.raises(SystemExit, match="do not fit"):  # 3 x 16 GB of weights on an H100
        penalty_plan.engine_args(3, [(128, 2048)], 74 * 2**30, "qwen3-8b")
    with pytest.raises(SystemExit, match="expected one of"):
        penalty_plan.engine_args(1, [(64, 1024)], 130 * 2**30, "qwen3-9b")


def test_the_aa_plan_plants_a_gpu_delay_for_a_gpu_bound_shape(monkeypatch):
    monkeypatch.setattr(engine_aa.importlib.metadata, "version", lambda name: "0.22.0")
    items = engine_aa.plan(64, 512, 0.1, gpu_budget=130 * 2**30, model_shape="qwen3-8b",
                           plant_gpu_us=100)  # fmt: skip
    args = build_parser().parse_args(["engine", "--model", "m", *items, "--out", "x",
                                      "--target-entropy", "1.0"])  # fmt: skip
    variants = {n: e for n, _, e in (parse_variant(v, "/site") for v in args.variant)}
    assert variants["planted"] == {"PATCHBENCH_PLANT_GPU_US": "100"}
    assert json.loads(args.engine_args)["load_format"] == "dummy"
    assert args.target_entropy == 1.0
    meta = engine_aa.meta("c", 0.1, Path("/nonexistent"), "qwen3-8b", 100)
    assert meta["model"] == "qwen3-8b" and meta["planted_gpu_delay_us"] == 100
    assert "planted_delay_ms" not in meta


def test_the_penalty_plan_adds_the_recommended_sampling_and_an_mrv2_engine():
    items = penalty_plan.plan(["pristine", "pristine2", "patched", "mrv2"], [(128, 512)],
                              [(128, 512)], ["plain-k20p95", "presence-k20p95"],
                              gpu_budget=130 * 2**30, model_shape="qwen3-8b")  # fmt: skip
    variants = [i for i in items if i.startswith("--variant=")]
    assert "--variant=mrv2=,VLLM_USE_V2_MODEL_RUNNER=1" in variants
    compares = {i.removeprefix("--compare=") for i in items if i.startswith("--compare=")}
    for v in ("pristine", "pristine2", "patched", "mrv2"):  # every variant's penalty cost
        assert f"{v}/plain-k20p95-b128-l512:{v}/presence-k20p95-b128-l512" in compares
    config = json.loads(next(i for i in items if "presence-k20p95-b128" in i).split("=", 2)[2])
    assert (config["top_k"], config["top_p"], config["presence_penalty"]) == (20, 0.95, 1.5)


# ---------------------------------------------------------------------------------------------
# the logit-scale search (the engine side needs a GPU; the search is pure)


def _entropy_curve(vocab: int, knee: float):
    """Entropy that falls from ln(vocab) towards 0 as the scale passes `knee`."""
    return lambda scale: math.log(vocab) / (1 + (scale / knee) ** 2)


@pytest.mark.parametrize("target", [0.5, 1.0, 3.0])
def test_the_search_finds_the_scale_of_the_target_entropy(target):
    curve = _entropy_curve(151936, knee=2.5e4)
    scale, probes = output_entropy.search(curve, target)
    assert curve(scale) == pytest.approx(target, abs=output_entropy.TOLERANCE_NATS)
    assert probes[0] == (0.0, curve(1.0)) and len(probes) == output_entropy.PROBES + 1


def test_a_head_that_ignores_the_scale_fails_the_search():
    with pytest.raises(output_entropy.CalibrationError, match="target 1.0"):
        output_entropy.search(lambda scale: 11.93, 1.0)


def test_a_target_past_the_range_fails_the_search():
    curve = _entropy_curve(151936, knee=1e9)  # needs a scale beyond 1e8
    with pytest.raises(output_entropy.CalibrationError):
        output_entropy.search(curve, 1.0)


# ---------------------------------------------------------------------------------------------
# the GPU plant, on stand-in torch and vLLM modules

FAKE_TORCH = """
SLEPT = []
class _Event:
    t = 0.0
    def __init__(self, enable_timing=False): self.at = None
    def record(self): self.at = _Event.t
    def synchronize(self): pass
    def query(self): return True
    def elapsed_time(self, end): return (end.at - self.at) * 1000
class cuda:
    Event = _Event
    @staticmethod
    def synchronize(): pass
    @staticmethod
    def _sleep(cycles):  # a GPU of 2 GHz: the clock advances cycles / 2e9 s
        SLEPT.append(cycles); _Event.t += cycles / 2e9
"""
FAKE_LOGITS = "class LogitsProcessor:\n    def forward(self, x):\n        return x * 2\n"


def test_the_gpu_plant_spins_its_delay_once_per_step_and_counts_it(tmp_path: Path):
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    module = tmp_path / "vllm" / "model_executor" / "layers"
    module.mkdir(parents=True)
    for folder in (module.parent.parent, module.parent, module):
        (folder / "__init__.py").touch()
    (module / "logits_processor.py").write_text(FAKE_LOGITS)
    count = tmp_path / "count"
    code = (
        "from vllm.model_executor.layers.logits_processor import LogitsProcessor as L\n"
        "import torch\nprint([L().forward(3) for _ in range(8)][-1], torch.SLEPT)"
    )
    env = {**os.environ, "PYTHONPATH": f"{PLANT_SITE}{os.pathsep}{tmp_path}",
           "PATCHBENCH_PLANT_GPU_US": "250", "PATCHBENCH_PLANT_COUNT": str(count)}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    result, slept = out.stdout.split(" ", 1)
    assert result == "6"  # the step itself still runs
    spins = json.loads(slept)
    assert spins[0] == 10**7 and spins[1:] == [500_000] * 8  # 250 µs at 2 GHz, every step
    calls, planted, spun = count.read_text().split()
    assert int(calls) == 8 and float(planted) == pytest.approx(8 * 250e-6)
    assert float(spun) == pytest.approx(7 * 250e-6)  # each spin is timed once it has finished


def test_distinct_outputs_are_kept_whole_once(tmp_path):
    from verify.ab.engines import KEEP_TOKENS_ENV, digest, keep_tokens

    env = {KEEP_TOKENS_ENV: str(tmp_path / "tokens")}
    first = keep_tokens([[1, 2], [3]], env)
    assert json.loads(first.read_text()) == [[1, 2], [3]]
    assert first.name == f"tokens-{digest([[1, 2], [3]])[:16]}.json"
    assert keep_tokens([[1, 2], [3]], env) == first  # the same output: the same file
    assert keep_tokens([[1, 2], [4]], env) != first
    assert len(list((tmp_path / "tokens").iterdir())) == 2
    assert keep_tokens([[1]], {}) is None


def test_the_word_level_tokenizer_covers_the_whole_vocabulary_and_round_trips(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    path = shapes.write_tokenizer(tmp_path / "tok", 151936)
    tok = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tok.get_vocab_size() == 151936
    ids = [5, 151935, 4000, 2]
    text = tok.decode(ids, skip_special_tokens=False)
    assert text == "t5 t151935 t4000 </s>" and tok.encode(text).ids == ids
    config = json.loads((path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "</s>" and config["unk_token"] == "<unk>"
