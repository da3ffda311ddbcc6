"""Penalties applied only at a row's token ids vs upstream's dense path (0.22.0 patch 0008,
0.33.0 patch 0005).

Pristine: `vllm.model_executor.layers.utils.apply_penalties` builds dense [B, V+1] bin
counts for prompt and output tokens and penalizes the whole [B, V] logits (on CPU the
repetition penalty goes through `apply_repetition_penalties_torch`). Patched:
`apply_penalties_at_token_ids` gathers the logits at the ids that occur, penalizes them and
scatters them back; `apply_all_penalties` picks it for CPU logits while prompt + output ids
are at most a twelfth of the vocabulary (on the GPU the dense path measured faster).

Checked: equal values (torch.equal) and equal bits except the sign of zero logits (the dense
path subtracts -0.0 at untouched ids when a penalty is negative), over randomized batches
with pads, duplicates, the last vocabulary id, exact zeros, float32 and bfloat16 logits.
"""

from __future__ import annotations

import pytest
import torch

from tests.equivalence.test_penalty_output_tokens import (  # noqa: F401  (fixtures)
    _custom_ops_once,
    _opaque_types_once,
    mods,
)


@pytest.fixture(scope="module")
def dense(mods):  # noqa: F811
    with mods.pristine.active():
        return mods.pristine.load("vllm.model_executor.layers.utils").apply_penalties


def _inputs(seed: int, num_reqs: int, vocab: int, prompt_len: int, output_len: int, dtype):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_reqs, vocab, generator=g).to(dtype)
    logits[torch.rand(num_reqs, vocab, generator=g) < 0.02] = 0.0
    # Ids drawn from a small pool so that rows repeat ids, plus the last id and pads.
    pool = torch.randint(0, vocab, (max(4, vocab // 8),), generator=g)
    pool[0] = vocab - 1
    prompt = pool[torch.randint(0, len(pool), (num_reqs, prompt_len), generator=g)]
    output = pool[torch.randint(0, len(pool), (num_reqs, output_len), generator=g)]
    prompt[torch.rand(num_reqs, prompt_len, generator=g) < 0.2] = vocab
    output[torch.rand(num_reqs, output_len, generator=g) < 0.2] = vocab
    pres = torch.rand(num_reqs, generator=g) * 4 - 2
    freq = torch.rand(num_reqs, generator=g) * 4 - 2
    rep = torch.rand(num_reqs, generator=g) * 1.5 + 0.5
    pres[0], freq[0], rep[0] = 0.0, 0.0, 1.0  # a row without penalties
    return logits, prompt, output, pres, freq, rep


def _assert_same(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert torch.equal(got, ref)
    int_type = torch.int16 if ref.element_size() == 2 else torch.int32
    differing_bits = got.view(int_type) != ref.view(int_type)
    assert not (differing_bits & (ref != 0)).any()


def _sparse(mods, *args):  # noqa: F811
    with mods.patched.active():
        return mods.pa_pen.apply_penalties_at_token_ids(*args)


def _dense(mods, dense, *args):  # noqa: F811
    with mods.pristine.active():
        return dense(*args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("vocab", [2, 97, 1000, 32003])
@pytest.mark.parametrize(
    "num_reqs,prompt_len,output_len", [(1, 1, 0), (1, 7, 1), (8, 16, 40), (64, 5, 300)]
)
@pytest.mark.parametrize("seed", range(3))
def test_matches_dense(mods, dense, seed, num_reqs, prompt_len, output_len, vocab, dtype):  # noqa: F811
    args = _inputs(seed, num_reqs, vocab, prompt_len, output_len, dtype)
    ref = _dense(mods, dense, args[0].clone(), *args[1:])
    got = _sparse(mods, args[0].clone(), *args[1:])
    _assert_same(got, ref)


def test_every_id_repeated_and_all_pads(mods, dense):  # noqa: F811
    vocab = 50
    logits, _, _, pres, freq, rep = _inputs(7, 3, vocab, 1, 1, torch.float32)
    prompt = torch.tensor([[vocab] * 4, list(range(4)), [vocab - 1] * 4])
    output = torch.tensor([[vocab] * 60, [i % vocab for i in range(60)], [vocab - 1] * 60])
    ref = _dense(mods, dense, logits.clone(), prompt, output, pres, freq, rep)
    got = _sparse(mods, logits.clone(), prompt, output, pres, freq, rep)
    _assert_same(got, ref)


def test_comparison_resolves_the_repetition_rounding(mods, dense):  # noqa: F811
    """The CPU reference multiplies by 1/penalty; dividing instead (the CUDA kernel's form)
    changes low bits, so the bit-level check above would catch the wrong branch."""
    logits, prompt, output, pres, freq, rep = _inputs(0, 64, 1000, 5, 300, torch.float32)
    divided = torch.where(logits > 0, logits / rep[:, None], logits * rep[:, None])
    multiplied = logits * torch.where(logits > 0, 1.0 / rep[:, None], rep[:, None])
    assert not torch.equal(divided, multiplied)


@pytest.mark.parametrize(
    "prompt_len,output_len,sparse_expected", [(8, 40, True), (8, 75, True), (8, 76, False)]
)
def test_apply_all_penalties_choice(mods, monkeypatch, prompt_len, output_len, sparse_expected):  # noqa: F811
    """Up to a twelfth of the vocabulary (1000 // 12 = 83 ids) the sparse path runs; either
    way the result equals pristine apply_all_penalties."""
    vocab = 1000
    logits, prompt, output, pres, freq, rep = _inputs(
        3, 4, vocab, prompt_len, output_len, torch.float32
    )
    lists = [[t if t < vocab else -1 for t in row] for row in output.tolist()]
    calls = []
    original = mods.pa_pen.apply_penalties_at_token_ids

    def spy(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(mods.pa_pen, "apply_penalties_at_token_ids", spy)
    with mods.pristine.active():
        ref = mods.pr_pen.apply_all_penalties(logits.clone(), prompt, pres, freq, rep, lists)
    with mods.patched.active():
        got = mods.pa_pen.apply_all_penalties(logits.clone(), prompt, pres, freq, rep, lists)
    assert bool(calls) is sparse_expected
    _assert_same(got, ref)


@pytest.mark.parametrize(
    "device,num_ids,expected",
    [("cpu", 83, True), ("cpu", 84, False), ("meta", 1, False), ("meta", 83, False)],
)
def test_sparse_path_only_for_cpu_logits(mods, device, num_ids, expected):  # noqa: F811
    """On a GPU the dense path measured faster at every length (H100, B=64: dense 0.49-0.51 ms,
    sparse 0.68-0.88 ms), so only CPU logits take the sparse path (non-CPU stands in as 'meta')."""
    logits = torch.empty(4, 1000, device=device)
    assert mods.pa_pen._penalize_at_token_ids(logits, num_ids) is expected
