# SPDX-License-Identifier: Apache-2.0
"""Standalone split-vocabulary recovered-token sampler (issue 10).

Only torch + triton are needed, so this file runs on the GPU machine without
vLLM and under ``TRITON_INTERPRET=1`` on a CPU.

Math (same as vLLM >= 0.17.1's tiled kernel, with the out-of-vocab guard of
0.24.0+): for each draft token t of request r

    prob[v]  = target[t, v] - draft[t, v] clamped at 0      (with draft probs)
             = target[t, v], 0 at v == draft_token_id[t]    (without)
    score[v] = prob[v] * inv_q[r, v]
    out[t]   = lowest v among the maxima of score

Two paths:

* ``num_splits == 1``: one program per draft token walks the vocabulary in
  8192-wide tiles (upstream's kernel).  It is already close to the bandwidth
  roofline once there are enough tokens to fill the GPU.
* ``num_splits > 1``: a (batch, max_spec_len, num_splits) grid; each program
  scans a contiguous, tile-aligned slice of the vocabulary and writes its
  slice maximum and the lowest index reaching it to a small scratch buffer.
  A second, tiny kernel (one program per token) picks the winner with
  ``tl.max(..., return_indices=True)``, whose tie-break takes the lowest
  split index; slices are ordered, so the lowest vocabulary index among equal
  scores wins, exactly as in the one-pass kernel.  No atomics, so the result
  is deterministic.

Equality with the one-pass kernel: scores are computed elementwise with the
same float32 operations, and both kernels return the lowest index among the
maxima of the finite scores, so outputs are identical token for token.  (The
one case that depends on reduction order is a NaN score, which needs
``inv_q == inf`` or NaN probabilities; neither kernel produces a meaningful
token then.)
"""

import torch
import triton
import triton.language as tl

# Tile and warps of a program.  1024 lanes x 4 warps (8 floats per thread)
# keeps many programs resident per SM; on the H100 it was the fastest tile at
# most benchmarked shapes (results/gpu/0.22.0/kernel_001_run2_sweep.md).
SPLIT_BLOCK_SIZE = 1024
SPLIT_NUM_WARPS = 4
# Aim for about this many 4-warp programs per SM (8 x 132 = 1056 on the H100:
# the best split count in the sweep gave ~1024 programs at every token count
# from 16 to 1024).
_PROGRAMS_PER_SM = 8


def choose_config(num_tokens: int, vocab_size: int, num_sms: int) -> tuple[int, int, int]:
    """(num_splits, block_size, num_warps) for a batch of draft tokens.

    ``s = (_PROGRAMS_PER_SM * num_sms) // num_tokens`` 1024-lane, 4-warp
    programs per token, at most one per tile:

    * ``s >= 5`` (few tokens): ``s`` slices, so that ~8 programs run per SM;
    * ``2 <= s <= 4``: the second pass costs more than the extra slices win,
      so use half as many slices of a 2048-lane, 8-warp tile (same warps per SM);
      ``s // 2 == 1`` means no second pass;
    * ``s <= 1`` (the tokens alone fill the GPU): one 1024-lane program per token.
    """
    if num_tokens <= 0 or vocab_size <= 0:
        return 1, SPLIT_BLOCK_SIZE, SPLIT_NUM_WARPS
    s = (_PROGRAMS_PER_SM * num_sms) // num_tokens
    if 2 <= s <= 4:
        block = 2 * SPLIT_BLOCK_SIZE
        return max(1, min(s // 2, triton.cdiv(vocab_size, block))), block, 2 * SPLIT_NUM_WARPS
    num_tiles = triton.cdiv(vocab_size, SPLIT_BLOCK_SIZE)
    return max(1, min(num_tiles, s)), SPLIT_BLOCK_SIZE, SPLIT_NUM_WARPS


def choose_num_splits(num_tokens: int, vocab_size: int, num_sms: int) -> int:
    return choose_config(num_tokens, vocab_size, num_sms)[0]


@triton.jit
def sample_recovered_tokens_split_kernel(
    output_token_ids_ptr,  # [num_tokens] (written when WRITE_OUTPUT)
    partial_max_ptr,  # [num_tokens, num_splits] float32
    partial_id_ptr,  # [num_tokens, num_splits] int32
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
    WRITE_OUTPUT: tl.constexpr,
):
    """Maximum score and lowest arg-max of one vocabulary slice.

    Each lane keeps a running maximum over the slice's tiles (updated only on
    a strictly larger score, so within a lane the earliest tile wins ties);
    one reduction at the end takes the maximum over lanes and the lowest
    vocabulary index reaching it.
    """
    req_idx = tl.program_id(0)
    start_idx = 0 if req_idx == 0 else tl.load(cu_num_draft_tokens_ptr + req_idx - 1)
    end_idx = tl.load(cu_num_draft_tokens_ptr + req_idx)
    num_draft_tokens = end_idx - start_idx
    pos = tl.program_id(1)
    if pos >= num_draft_tokens:
        return
    token_idx = start_idx + pos
    split_idx = tl.program_id(2)
    if NO_DRAFT_PROBS:
        draft_token_id = tl.load(draft_token_ids_ptr + token_idx)

    split_start = split_idx * split_size
    split_end = tl.minimum(split_start + split_size, vocab_size)
    lanes = tl.arange(0, BLOCK_SIZE)
    best_val = tl.full((BLOCK_SIZE,), float("-inf"), tl.float32)
    best_id = tl.zeros((BLOCK_SIZE,), tl.int32)
    for v in range(split_start, split_end, BLOCK_SIZE):
        vocab_offset = v + lanes
        # Slices are whole tiles, so only the vocabulary end cuts a tile.
        vocab_mask = vocab_offset < vocab_size
        if NO_DRAFT_PROBS:
            # Load the whole tile (16-byte vector loads) and zero the draft
            # token afterwards; masking it in the load made the loads scalar.
            prob = tl.load(
                target_probs_ptr + token_idx * vocab_size + vocab_offset,
                mask=vocab_mask,
                other=0.0,
            )
            prob = tl.where(vocab_offset == draft_token_id, 0.0, prob)
        else:
            draft_prob = tl.load(
                draft_probs_ptr + token_idx * vocab_size + vocab_offset,
                mask=vocab_mask,
                other=0.0,
            )
            target_prob = tl.load(
                target_probs_ptr + token_idx * vocab_size + vocab_offset,
                mask=vocab_mask,
                other=0.0,
            )
            prob = tl.maximum(target_prob - draft_prob, 0.0)
        inv_q = tl.load(
            inv_q_ptr + req_idx * vocab_size + vocab_offset,
            mask=vocab_mask,
            other=0.0,
        )
        score = prob * inv_q
        # Strict '>': a lane keeps its earliest (lowest) index among ties.
        # Lanes past the vocabulary never update.
        better = (score > best_val) & vocab_mask
        best_val = tl.where(better, score, best_val)
        best_id = tl.where(better, vocab_offset, best_id)

    max_val = tl.max(best_val, axis=0)
    # Lowest index among the lanes holding the maximum.  If no lane was ever
    # updated (NaN scores only), every lane holds (-inf, 0) and 0 is returned,
    # like the one-pass kernel.
    cand = tl.where(best_val == max_val, best_id, 2147483647)
    recovered_id = tl.min(cand, axis=0)
    if WRITE_OUTPUT:
        recovered_id = tl.minimum(recovered_id, vocab_size - 1)
        tl.store(output_token_ids_ptr + token_idx, recovered_id)
    else:
        out_offset = token_idx * num_splits + split_idx
        tl.store(partial_max_ptr + out_offset, max_val)
        tl.store(partial_id_ptr + out_offset, recovered_id)


@triton.jit
def sample_recovered_tokens_reduce_kernel(
    output_token_ids_ptr,  # [num_tokens]
    partial_max_ptr,  # [num_tokens, num_splits] float32
    partial_id_ptr,  # [num_tokens, num_splits] int32
    vocab_size,
    num_splits,
    PADDED_NUM_SPLITS: tl.constexpr,
):
    """Pass 2: the winning slice of one token (lowest slice among ties)."""
    token_idx = tl.program_id(0)
    offset = tl.arange(0, PADDED_NUM_SPLITS)
    mask = offset < num_splits
    max_vals = tl.load(
        partial_max_ptr + token_idx * num_splits + offset,
        mask=mask,
        other=float("-inf"),
    )
    # tie-break-left: among equal slice maxima the lowest slice wins, and
    # slices are in vocabulary order.
    _, best_split = tl.max(
        max_vals, axis=0, return_indices=True, return_indices_tie_break_left=True
    )
    recovered_id = tl.load(partial_id_ptr + token_idx * num_splits + best_split)
    recovered_id = tl.minimum(recovered_id, vocab_size - 1)
    tl.store(output_token_ids_ptr + token_idx, recovered_id)


_NUM_SMS: dict[int, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132  # H100; only used by the CPU interpreter tests
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _NUM_SMS:
        _NUM_SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _NUM_SMS[idx]


def sample_recovered_tokens(
    output_token_ids: torch.Tensor,  # [num_tokens] int32 (written)
    cu_num_draft_tokens: torch.Tensor,  # [batch_size]
    draft_token_ids: torch.Tensor,  # [num_tokens]
    draft_probs: torch.Tensor | None,  # [num_tokens, vocab_size]
    target_probs: torch.Tensor,  # [num_tokens, vocab_size]
    inv_q: torch.Tensor,  # [batch_size, vocab_size]
    max_spec_len: int,
    num_splits: int | None = None,
    split_block_size: int | None = None,
    split_num_warps: int | None = None,
) -> torch.Tensor:
    batch_size = cu_num_draft_tokens.shape[0]
    num_tokens = draft_token_ids.shape[0]
    vocab_size = target_probs.shape[-1]
    auto_splits, auto_block, auto_warps = choose_config(
        num_tokens, vocab_size, _num_sms(target_probs.device)
    )
    if num_splits is None:
        num_splits = auto_splits
    if split_block_size is None:
        split_block_size = auto_block
    if split_num_warps is None:
        split_num_warps = auto_warps
    num_tiles = triton.cdiv(vocab_size, split_block_size)
    split_size = triton.cdiv(num_tiles, num_splits) * split_block_size
    # Slices are tile-aligned; drop slices that would start past the end.
    num_splits = triton.cdiv(vocab_size, split_size)
    grid = (batch_size, max_spec_len, num_splits)
    if num_splits == 1:
        sample_recovered_tokens_split_kernel[grid](
            output_token_ids, None, None, cu_num_draft_tokens, draft_token_ids,
            draft_probs, target_probs, inv_q, vocab_size, split_size, num_splits,
            BLOCK_SIZE=split_block_size,
            NO_DRAFT_PROBS=draft_probs is None,
            WRITE_OUTPUT=True,
            num_warps=split_num_warps,
        )
        return output_token_ids
    partial_max = torch.empty(
        (num_tokens, num_splits), dtype=torch.float32, device=target_probs.device
    )
    partial_id = torch.empty(
        (num_tokens, num_splits), dtype=torch.int32, device=target_probs.device
    )
    sample_recovered_tokens_split_kernel[grid](
        output_token_ids,
        partial_max,
        partial_id,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        inv_q,
        vocab_size,
        split_size,
        num_splits,
        BLOCK_SIZE=split_block_size,
        NO_DRAFT_PROBS=draft_probs is None,
        WRITE_OUTPUT=False,
        num_warps=split_num_warps,
    )
    sample_recovered_tokens_reduce_kernel[(num_tokens,)](
        output_token_ids,
        partial_max,
        partial_id,
        vocab_size,
        num_splits,
        PADDED_NUM_SPLITS=triton.next_power_of_2(num_splits),
        num_warps=1,
    )
    return output_token_ids
