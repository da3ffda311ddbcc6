# SPDX-License-Identifier: Apache-2.0
"""Candidate for issue 10: patch 0006's split kernel with the slice reduction fused in.

Patch 0006 (``patch010_0.22.0.py``) launches two kernels when a draft token's vocabulary is
split: the split kernel writes one (maximum, lowest index) pair per slice, then a one-warp
kernel picks the lowest slice holding the maximum. At the shapes issue 10 still misses
(4-8 requests x 4 draft tokens, 10.8-19.3 us on the H100) the second launch and the gap
before it are a fixed share of a ~10 us budget.

Here the program that finishes a token's last slice does that reduction itself: each slice
program stores its pair, then increments the token's counter (``atomic_add``, acq_rel, GPU
scope, after a CTA barrier, so the pair is visible to whoever sees the count); the program
that sees ``num_splits - 1`` reads every pair of that token (bypassing L1), picks the
winner exactly as the reduce kernel does, stores the id and resets the counter to 0 for the
next launch. The atomic only orders the programs; the winner is computed from the stored
pairs in slice order, so the result is deterministic and equal to the two-kernel version.
Counters live in a per-device int32 buffer that is zeroed once and grown when a launch has
more tokens than it holds.

Only torch + triton are needed: runs on the GPU machine without vLLM (`gpu_kernel_bench.py
--variants ... fused=scripts/kernels/split_recovered_fused.py`) and under
``TRITON_INTERPRET=1`` on a CPU (tests/test_split_recovered_kernel.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SPLIT_BLOCK_SIZE = 1024
SPLIT_NUM_WARPS = 4
_PROGRAMS_PER_SM = 8

_counters: dict[torch.device, torch.Tensor] = {}


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def choose_config(num_tokens: int, vocab_size: int, num_sms: int) -> tuple[int, int, int]:
    """(num_splits, block_size, num_warps): patch 0006's recovered_tokens_launch_config."""
    if num_tokens <= 0 or vocab_size <= 0:
        return 1, SPLIT_BLOCK_SIZE, SPLIT_NUM_WARPS
    s = _PROGRAMS_PER_SM * num_sms // num_tokens
    if 2 <= s <= 4:
        block = 2 * SPLIT_BLOCK_SIZE
        return max(1, min(s // 2, triton.cdiv(vocab_size, block))), block, 2 * SPLIT_NUM_WARPS
    return (
        max(1, min(s, triton.cdiv(vocab_size, SPLIT_BLOCK_SIZE))),
        SPLIT_BLOCK_SIZE,
        SPLIT_NUM_WARPS,
    )


def _counter_buffer(num_tokens: int, device: torch.device) -> torch.Tensor:
    buf = _counters.get(device)
    if buf is None or buf.numel() < num_tokens:
        buf = torch.zeros(max(num_tokens, 1024), dtype=torch.int32, device=device)
        _counters[device] = buf
    return buf


@triton.jit
def fused_split_kernel(
    output_token_ids_ptr,  # [num_tokens]
    partial_max_ptr,  # [num_tokens, num_splits] float32, or None
    partial_id_ptr,  # [num_tokens, num_splits] int32, or None
    counter_ptr,  # [>= num_tokens] int32, zero between launches, or None
    cu_num_draft_tokens_ptr,  # [batch_size]
    draft_token_ids_ptr,  # [num_tokens]
    draft_probs_ptr,  # [num_tokens, vocab_size] or None
    target_probs_ptr,  # [num_tokens, vocab_size]
    inv_q_ptr,  # [batch_size, vocab_size]
    vocab_size,
    split_size,  # multiple of BLOCK_SIZE
    num_splits,
    BLOCK_SIZE: tl.constexpr,
    NO_DRAFT_PROBS: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    PADDED_NUM_SPLITS: tl.constexpr,
):
    req_idx = tl.program_id(0)
    start_idx = 0 if req_idx == 0 else tl.load(cu_num_draft_tokens_ptr + req_idx - 1)
    end_idx = tl.load(cu_num_draft_tokens_ptr + req_idx)
    pos = tl.program_id(1)
    if pos >= end_idx - start_idx:
        return
    token_idx = start_idx + pos
    split_idx = tl.program_id(2)
    if NO_DRAFT_PROBS:
        draft_token_id = tl.load(draft_token_ids_ptr + token_idx)

    lanes = tl.arange(0, BLOCK_SIZE)
    best_val = tl.full((BLOCK_SIZE,), float("-inf"), tl.float32)
    best_id = tl.zeros((BLOCK_SIZE,), tl.int32)
    split_start = split_idx * split_size
    split_end = tl.minimum(split_start + split_size, vocab_size)
    for v in range(split_start, split_end, BLOCK_SIZE):
        offs = v + lanes
        mask = offs < vocab_size
        target = tl.load(target_probs_ptr + token_idx * vocab_size + offs, mask=mask, other=0.0)
        if NO_DRAFT_PROBS:
            prob = tl.where(offs == draft_token_id, 0.0, target)
        else:
            draft = tl.load(draft_probs_ptr + token_idx * vocab_size + offs, mask=mask, other=0.0)
            prob = tl.maximum(target - draft, 0.0)
        inv_q = tl.load(inv_q_ptr + req_idx * vocab_size + offs, mask=mask, other=0.0)
        score = prob * inv_q
        better = (score > best_val) & mask
        best_val = tl.where(better, score, best_val)
        best_id = tl.where(better, offs, best_id)

    max_val = tl.max(best_val, axis=0)
    recovered_id = tl.min(tl.where(best_val == max_val, best_id, 2147483647), axis=0)
    if SINGLE_SPLIT:
        tl.store(output_token_ids_ptr + token_idx, tl.minimum(recovered_id, vocab_size - 1))
    else:
        row = token_idx * num_splits
        tl.store(partial_max_ptr + row + split_idx, max_val)
        tl.store(partial_id_ptr + row + split_idx, recovered_id)
        # Every thread's stores are issued before the release below.
        tl.debug_barrier()
        done = tl.atomic_add(counter_ptr + token_idx, 1, sem="acq_rel", scope="gpu")
        if done == num_splits - 1:
            # Last slice of this token: reduce in slice order (lowest slice among equal
            # maxima, so the lowest index overall), as the separate reduce kernel does.
            splits = tl.arange(0, PADDED_NUM_SPLITS)
            maxima = tl.load(
                partial_max_ptr + row + splits,
                mask=splits < num_splits,
                other=float("-inf"),
                cache_modifier=".cg",
            )
            top = tl.max(maxima, axis=0)
            best_split = tl.min(tl.where(maxima == top, splits, num_splits), axis=0)
            winner = tl.load(partial_id_ptr + row + best_split, cache_modifier=".cg")
            tl.store(output_token_ids_ptr + token_idx, tl.minimum(winner, vocab_size - 1))
            tl.store(counter_ptr + token_idx, 0)


def sample_recovered_tokens(
    out: torch.Tensor,
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    inv_q: torch.Tensor,
    max_spec_len: int,
    num_splits: int | None = None,
    split_block_size: int | None = None,
    split_num_warps: int | None = None,
) -> torch.Tensor:
    """Recovered token ids into `out`; the keyword arguments override the launch config."""
    batch_size = cu_num_draft_tokens.shape[0]
    num_tokens = draft_token_ids.shape[0]
    vocab_size = target_probs.shape[-1]
    splits, block_size, num_warps = choose_config(
        num_tokens, vocab_size, _num_sms(target_probs.device)
    )
    splits = num_splits or splits
    block_size = split_block_size or block_size
    num_warps = split_num_warps or num_warps
    num_tiles = triton.cdiv(vocab_size, block_size)
    split_size = triton.cdiv(num_tiles, min(splits, num_tiles)) * block_size
    splits = triton.cdiv(vocab_size, split_size)
    if splits == 1:
        partial_max = partial_id = counters = None
    else:
        device = target_probs.device
        partial_max = torch.empty((num_tokens, splits), dtype=torch.float32, device=device)
        partial_id = torch.empty((num_tokens, splits), dtype=torch.int32, device=device)
        counters = _counter_buffer(num_tokens, device)
    fused_split_kernel[(batch_size, max_spec_len, splits)](
        out,
        partial_max,
        partial_id,
        counters,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        inv_q,
        vocab_size,
        split_size,
        splits,
        BLOCK_SIZE=block_size,
        NO_DRAFT_PROBS=draft_probs is None,
        SINGLE_SPLIT=splits == 1,
        PADDED_NUM_SPLITS=triton.next_power_of_2(splits),
        num_warps=num_warps,
    )
    return out
