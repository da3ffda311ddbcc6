"""Candidate (not in a series yet): V1 penalties with one pass over the logits on the GPU.

Upstream's dense `apply_penalties` (vllm/model_executor/layers/utils.py) makes two int64
[B, V+1] bin-count tensors, two masks and about ten full [B, V] passes per decode step; on
an H100 at B=64, V=151936 that is 0.41-0.51 ms per step (results/gpu/0.22.0/
micro-003-apply.json), about 5% of a decode step there, which is most of the V1 penalty cost
left after the series (issue 8). Here the host side builds int32 output counts and a uint8
prompt mask with one scatter each, and one Triton kernel applies the repetition, frequency
and presence penalties in upstream's order with upstream's arithmetic:

    repeated = prompt_mask | (count > 0)
    logit = where(repeated, logit > 0 ? logit / r : logit * r, logit)   # CUDA op: divides
    logit = logit - f * float(count)
    logit = logit - p * float(count > 0)

Float32 logits only (the V1 sampler's dtype); the division is round-to-nearest and the
multiply-subtracts are not fused into FMAs, so results are bit-identical to upstream's CUDA
path. Tokens equal to `vocab_size` are padding, as upstream.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _apply_penalties_kernel(
    logits_ptr,
    logits_stride,
    counts_ptr,
    counts_stride,
    prompt_ptr,
    prompt_stride,
    presence_ptr,
    frequency_ptr,
    repetition_ptr,
    vocab_size,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < vocab_size
    logit = tl.load(logits_ptr + row * logits_stride + cols, mask=inside, other=0.0)
    count = tl.load(counts_ptr + row * counts_stride + cols, mask=inside, other=0)
    in_prompt = tl.load(prompt_ptr + row * prompt_stride + cols, mask=inside, other=0)
    p = tl.load(presence_ptr + row)
    f = tl.load(frequency_ptr + row)
    r = tl.load(repetition_ptr + row)
    in_output = count > 0
    repeated = in_output | (in_prompt != 0)
    penalized = tl.where(logit > 0, tl.math.div_rn(logit, r), logit * r)
    logit = tl.where(repeated, penalized, logit)
    logit = logit - f * count.to(tl.float32)
    logit = logit - p * in_output.to(tl.float32)
    tl.store(logits_ptr + row * logits_stride + cols, logit, mask=inside)


def counts_and_prompt_mask(
    prompt_tokens: torch.Tensor, output_tokens: torch.Tensor, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """int32 output counts and uint8 prompt membership, [B, vocab_size + 1] (last: padding)."""
    num_seqs = output_tokens.shape[0]
    device = output_tokens.device
    counts = torch.zeros((num_seqs, vocab_size + 1), dtype=torch.int32, device=device)
    ones = torch.ones(1, dtype=torch.int32, device=device).expand(output_tokens.shape)
    counts.scatter_add_(1, output_tokens, ones)
    prompt = torch.zeros((num_seqs, vocab_size + 1), dtype=torch.uint8, device=device)
    prompt.scatter_(1, prompt_tokens, 1)
    return counts, prompt


def apply_penalties_fused(
    logits: torch.Tensor,
    prompt_tokens: torch.Tensor,
    output_tokens: torch.Tensor,
    presence_penalties: torch.Tensor,
    frequency_penalties: torch.Tensor,
    repetition_penalties: torch.Tensor,
    block: int = 1024,
) -> torch.Tensor:
    """In place, like upstream's apply_penalties (float32 logits)."""
    if logits.dtype != torch.float32:
        raise TypeError(f"float32 logits only, got {logits.dtype}")
    num_seqs, vocab_size = logits.shape
    if num_seqs == 0:
        return logits
    counts, prompt = counts_and_prompt_mask(prompt_tokens, output_tokens, vocab_size)
    grid = (num_seqs, triton.cdiv(vocab_size, block))
    _apply_penalties_kernel[grid](
        logits,
        logits.stride(0),
        counts,
        counts.stride(0),
        prompt,
        prompt.stride(0),
        presence_penalties,
        frequency_penalties,
        repetition_penalties,
        vocab_size,
        BLOCK=block,
        **({} if logits.device.type == "cpu" else {"enable_fp_fusion": False}),
    )
    return logits
