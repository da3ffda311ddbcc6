"""CPU (Triton interpreter) checks of the fused V1 penalty kernel candidate.

scripts/kernels/penalties_fused.py must give upstream's dense `apply_penalties` bit for bit
(with the CUDA repetition op's arithmetic: divide positive logits, multiply the others) on
randomized batches with padding, duplicates, the last vocabulary id, zero and negative
logits, negative penalties and vocabularies that are not a multiple of the block.
"""

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

KFILE = Path(__file__).resolve().parents[1] / "scripts" / "kernels" / "penalties_fused.py"


@pytest.fixture(scope="module")
def kmod():
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 or a GPU")
    spec = importlib.util.spec_from_file_location(KFILE.stem, KFILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bins(tokens, vocab_size, num_seqs):
    """Upstream's get_token_bin_counts_and_mask (vllm/model_executor/layers/utils.py)."""
    bin_counts = torch.zeros((num_seqs, vocab_size + 1), dtype=torch.long, device=tokens.device)
    bin_counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    bin_counts = bin_counts[:, :vocab_size]
    return bin_counts, bin_counts > 0


def upstream_apply_penalties(logits, prompt, output, presence, frequency, repetition):
    """Upstream's apply_penalties, the CUDA repetition op written out in torch."""
    num_seqs, vocab_size = logits.shape
    _, prompt_mask = _bins(prompt, vocab_size, num_seqs)
    output_bin_counts, output_mask = _bins(output, vocab_size, num_seqs)
    rep = repetition.unsqueeze(1).expand_as(logits)
    penalized = torch.where(logits > 0, logits / rep, logits * rep)
    logits.copy_(torch.where(prompt_mask | output_mask, penalized, logits))
    logits -= frequency.unsqueeze(dim=1) * output_bin_counts
    logits -= presence.unsqueeze(dim=1) * output_mask
    return logits


def _inputs(seed, num_seqs, vocab, prompt_len, output_len):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_seqs, vocab, generator=g) * 3
    logits[torch.rand(num_seqs, vocab, generator=g) < 0.05] = 0.0
    logits[torch.rand(num_seqs, vocab, generator=g) < 0.02] = -0.0
    pool = torch.randint(0, vocab, (num_seqs, 16), generator=g)
    pool[:, 0] = vocab - 1  # the last id
    prompt = pool.gather(1, torch.randint(0, 16, (num_seqs, prompt_len), generator=g))
    output = pool.gather(1, torch.randint(0, 16, (num_seqs, output_len), generator=g))
    prompt[num_seqs // 2 :, prompt_len // 2 :] = vocab  # padding
    output[: num_seqs // 2, output_len // 2 :] = vocab
    presence = torch.rand(num_seqs, generator=g) * 4 - 2
    frequency = torch.rand(num_seqs, generator=g) * 4 - 2
    repetition = torch.rand(num_seqs, generator=g) * 1.5 + 0.5
    return logits, prompt, output, presence, frequency, repetition


@pytest.mark.parametrize("vocab", [100, 1024, 1500, 3 * 1024 + 17])
@pytest.mark.parametrize("num_seqs,prompt_len,output_len", [(1, 4, 1), (3, 7, 40), (8, 16, 200)])
@pytest.mark.parametrize("seed", [0, 1])
def test_bit_identical_to_upstream(kmod, seed, num_seqs, prompt_len, output_len, vocab):
    logits, prompt, output, pres, freq, rep = _inputs(seed, num_seqs, vocab, prompt_len, output_len)
    ref = upstream_apply_penalties(logits.clone(), prompt, output, pres, freq, rep)
    got = kmod.apply_penalties_fused(logits.clone(), prompt, output, pres, freq, rep)
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))


def test_small_block_spans_many_programs(kmod):
    logits, prompt, output, pres, freq, rep = _inputs(5, 4, 1000, 9, 30)
    ref = upstream_apply_penalties(logits.clone(), prompt, output, pres, freq, rep)
    got = kmod.apply_penalties_fused(logits.clone(), prompt, output, pres, freq, rep, block=64)
    assert torch.equal(got.view(torch.int32), ref.view(torch.int32))


def test_order_of_the_penalties_matters(kmod):
    """The check can see a wrong order: presence before frequency changes some bits."""
    logits, prompt, output, pres, freq, rep = _inputs(2, 8, 1500, 16, 200)
    _, prompt_mask = _bins(prompt, 1500, 8)
    counts, mask = _bins(output, 1500, 8)
    r = rep.unsqueeze(1).expand_as(logits)
    swapped = torch.where(
        prompt_mask | mask, torch.where(logits > 0, logits / r, logits * r), logits
    )
    swapped -= pres.unsqueeze(1) * mask
    swapped -= freq.unsqueeze(1) * counts
    got = kmod.apply_penalties_fused(logits.clone(), prompt, output, pres, freq, rep)
    assert not torch.equal(got.view(torch.int32), swapped.view(torch.int32))
    assert torch.allclose(got, swapped, atol=1e-4)  # the same values up to rounding


def test_rejects_non_float32(kmod):
    logits, prompt, output, pres, freq, rep = _inputs(0, 2, 100, 4, 4)
    with pytest.raises(TypeError):
        kmod.apply_penalties_fused(logits.bfloat16(), prompt, output, pres, freq, rep)
