"""V1 penalties in one Triton pass vs upstream's dense path (0.22.0 patch 0010, 0.33.0 patch
0007).

Pristine: `vllm.model_executor.layers.utils.apply_penalties` (int64 bin counts, bool masks,
the repetition-penalty op, then `logits -= f * counts` and `logits -= p * mask`). On CUDA
its repetition op is vLLM's compiled kernel (divide positive logits, multiply the others);
without a GPU that op is replaced here by the same arithmetic in torch (`_cuda_repetition_op`),
since the patched path is only taken where the compiled op runs. Patched:
`apply_penalties_one_pass`, its Triton kernel executed by the Triton interpreter.

Checked: identical bits (int32 views) on randomized batches with pads, duplicates, the last
vocabulary id, exact +0.0 / -0.0 logits, negative penalties, rows without penalties and
vocabularies that are not a multiple of the block; and which logits take the path. The
comparison against vLLM's compiled op itself is the GPU tier's micro step
(scripts/bench_penalties_apply.py --device cuda).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch

from tests.equivalence.test_mrv2_sampler_logits_copy import _two_roots_importable
from tests.equivalence.test_penalties_sparse_apply import _inputs as sparse_inputs
from tests.equivalence.test_penalty_output_tokens import (  # noqa: F401  (fixtures)
    _custom_ops_once,
    _opaque_types_once,
    mods,
)
from verify.equivalence.roots import ImportRoot


@pytest.fixture(scope="module")
def one_pass(patched):
    """The patched penalties module, imported with the Triton interpreter on."""
    fresh = ImportRoot(patched.path, f"{patched.label} (triton interpreter)")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_INTERPRET", "1")
        env.setenv("CUDA_VISIBLE_DEVICES", "")
        with _two_roots_importable([fresh]):
            with fresh.active():
                if not importlib.import_module("vllm.triton_utils").HAS_TRITON:
                    pytest.skip("vllm.triton_utils did not enable Triton on CPU")
                mod = importlib.import_module("vllm.v1.sample.ops.penalties")
            yield SimpleNamespace(root=fresh, mod=mod)


def _cuda_repetition_op(logits, prompt_mask, output_mask, repetition_penalties):
    """csrc/sampler.cu apply_repetition_penalties_kernel, in torch: at repeated ids,
    positive logits are divided by the penalty, the others multiplied."""
    rep = repetition_penalties.unsqueeze(1)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(prompt_mask | output_mask, penalized, logits))


@pytest.fixture(scope="module")
def dense(mods):  # noqa: F811
    with mods.pristine.active():
        ops = importlib.import_module("vllm._custom_ops")
        utils = importlib.import_module("vllm.model_executor.layers.utils")
    with pytest.MonkeyPatch.context() as mp:
        # apply_penalties imports it at call time, from the pristine root's module.
        mp.setattr(ops, "apply_repetition_penalties", _cuda_repetition_op)

        def run(*args):
            with mods.pristine.active():
                return utils.apply_penalties(*args)

        yield run


def _inputs(seed: int, num_reqs: int, vocab: int, prompt_len: int, output_len: int):
    """The sparse path's randomized batches (float32), plus some -0.0 logits."""
    logits, *rest = sparse_inputs(seed, num_reqs, vocab, prompt_len, output_len, torch.float32)
    g = torch.Generator().manual_seed(1000 + seed)
    logits[torch.rand(num_reqs, vocab, generator=g) < 0.02] = -0.0
    return logits, *rest


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


@pytest.mark.parametrize("vocab", [97, 1024, 1500, 3 * 1024 + 17])
@pytest.mark.parametrize(
    "num_reqs,prompt_len,output_len", [(1, 1, 0), (1, 7, 1), (3, 7, 40), (8, 16, 200)]
)
@pytest.mark.parametrize("seed", range(2))
def test_matches_dense_bit_for_bit(one_pass, dense, seed, num_reqs, prompt_len, output_len, vocab):
    logits, *rest = _inputs(seed, num_reqs, vocab, prompt_len, output_len)
    ref = dense(logits.clone(), *rest)
    with one_pass.root.active():
        got = one_pass.mod.apply_penalties_one_pass(logits.clone(), *rest)
    assert got.shape == ref.shape and got.dtype == ref.dtype == torch.float32
    assert torch.equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("block_size", [16, 128])
def test_small_blocks_span_many_programs(one_pass, dense, block_size):
    logits, *rest = _inputs(7, 5, 1000, 12, 60)
    ref = dense(logits.clone(), *rest)
    with one_pass.root.active():
        got = one_pass.mod.apply_penalties_one_pass(logits.clone(), *rest, block_size=block_size)
    assert torch.equal(_bits(got), _bits(ref))


def test_in_place_and_empty_batch(one_pass):
    logits, *rest = _inputs(3, 4, 200, 5, 9)
    with one_pass.root.active():
        out = one_pass.mod.apply_penalties_one_pass(logits, *rest)
        assert out.data_ptr() == logits.data_ptr()
        empty = torch.empty(0, 200)
        none = [torch.empty(0, 5, dtype=torch.long), torch.empty(0, 9, dtype=torch.long)]
        none += [torch.empty(0)] * 3
        assert one_pass.mod.apply_penalties_one_pass(empty, *none) is empty


class _FakeLogits:
    """What `_penalize_in_one_pass` reads of a tensor, for devices this machine lacks."""

    def __init__(self, is_cuda: bool, dtype: torch.dtype, contiguous: bool):
        self.is_cuda, self.dtype, self._contiguous = is_cuda, dtype, contiguous

    def is_contiguous(self) -> bool:
        return self._contiguous


@pytest.mark.parametrize(
    "platform_cuda,logits,expected",
    [
        (True, _FakeLogits(True, torch.float32, True), True),
        (True, _FakeLogits(True, torch.bfloat16, True), False),
        (True, _FakeLogits(True, torch.float32, False), False),  # pristine: torch fallback
        (False, _FakeLogits(True, torch.float32, True), False),  # e.g. ROCm
        (True, _FakeLogits(False, torch.float32, True), False),
    ],
)
def test_only_where_the_cuda_op_runs(one_pass, monkeypatch, platform_cuda, logits, expected):
    mod = one_pass.mod
    monkeypatch.setattr(mod, "HAS_TRITON", True)
    monkeypatch.setattr(mod.current_platform, "is_cuda", lambda: platform_cuda)
    assert mod._penalize_in_one_pass(logits) is expected


def test_cpu_logits_keep_their_paths(one_pass):
    assert one_pass.mod._penalize_in_one_pass(torch.zeros(2, 8)) is False
