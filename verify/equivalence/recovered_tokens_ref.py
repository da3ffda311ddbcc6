"""Pure-PyTorch reference of vLLM's ``sample_recovered_tokens`` (rejection sampler).

For draft token ``t`` of request ``r`` the recovered token is::

    prob  = fmax(target_probs[t] - draft_probs[t], 0)     # with draft probs
    prob  = target_probs[t] with prob[draft_token_ids[t]] = 0   # without
    score = prob * inv_q[r]      (vLLM >= 0.17.0, inv_q = q.reciprocal() on the host)
    score = prob / q[r]          (vLLM <= 0.16.0, pass ``q=`` to get this rounding)
    id    = lowest index among the maximal scores

``q`` is one Exp(1) draw per request and vocabulary entry (`draw_q`). ``prob * (1/q)``
and ``prob / q`` round differently, so the two forms can rank scores that are within
about one ulp of each other differently; everything else is bit-exact.

NaN scores (``0 * inf`` when q == 0, NaN target probs) never win; a row without any
non-NaN score gives id 0. That is what the out-of-vocab-guarded kernel (vLLM >= 0.24.0,
patch 001 on 0.22.0) returns under ``TRITON_INTERPRET=1``, whose reductions are
``np.nanmax``/``np.nanargmax``. Unguarded kernels can return ``vocab_size`` for such
rows, and on a GPU the NaN semantics of Triton's argmax combine differ (only the guard's
"always < vocab_size" holds there). The fmax in the draft-probs form mirrors Triton's
default ``tl.maximum`` (maxnum: ``maximum(NaN, 0) == 0``).

API (all CPU or all same-device tensors):

- `recovered_token_ids(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
  *, inv_q=None, q=None)`: int32 ids, shape [num_tokens], exactly one of inv_q / q.
- `recovered_scores(...)`: same arguments, the float32 [num_tokens, vocab] scores.
- `draw_q(num_draft_tokens, vocab_size, generators)`: the q that vLLM's
  ``sample_recovered_tokens`` will draw next, without consuming any RNG state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["draw_q", "recovered_scores", "recovered_token_ids", "request_of_token"]


def request_of_token(cu_num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """Request index of every draft token, from the cumulative draft counts [batch]."""
    cu = cu_num_draft_tokens.to(torch.long)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    return torch.repeat_interleave(torch.arange(cu.numel(), device=cu.device), counts)


def recovered_scores(
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    *,
    inv_q: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scores [num_tokens, vocab] whose row-wise argmax is the recovered token."""
    if (inv_q is None) == (q is None):
        raise ValueError("pass exactly one of inv_q= (multiply form) or q= (divide form)")
    if draft_probs is None:
        prob = target_probs.to(torch.float32).clone()
        rows = torch.arange(prob.shape[0], device=prob.device)
        prob[rows, draft_token_ids.reshape(-1).long()] = 0.0
    else:
        diff = target_probs.to(torch.float32) - draft_probs.to(torch.float32)
        prob = torch.fmax(diff, torch.zeros_like(diff))
    req = request_of_token(cu_num_draft_tokens)
    if req.numel() != prob.shape[0]:
        raise ValueError(
            f"cu_num_draft_tokens covers {req.numel()} tokens, probs have {prob.shape[0]}"
        )
    if inv_q is not None:
        return prob * inv_q.to(torch.float32)[req]
    return prob / q.to(torch.float32)[req]


def recovered_token_ids(
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    *,
    inv_q: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Recovered token ids (int32, [num_tokens]): lowest index of the maximal score."""
    score = recovered_scores(
        cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q=inv_q, q=q
    )
    score = torch.where(torch.isnan(score), torch.full_like(score, float("-inf")), score)
    # torch.argmax returns the first maximal index; an all -inf row gives 0.
    return score.argmax(dim=-1).to(torch.int32)


def draw_q(
    num_draft_tokens: Sequence[int],
    vocab_size: int,
    generators: Mapping[int, torch.Generator] | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The q [batch, vocab] that ``sample_recovered_tokens`` draws on its next call.

    vLLM fills q from the global RNG, then redraws the rows of seeded requests that have
    draft tokens from their own generator. This replays that and restores the global
    RNG and every generator afterwards, so the vLLM call that follows sees the same
    random numbers.
    """
    generators = dict(generators or {})
    saved_gens = {i: g.get_state() for i, g in generators.items()}
    with torch.random.fork_rng(devices=[]):
        q = torch.empty((len(num_draft_tokens), vocab_size), dtype=torch.float32, device=device)
        q.exponential_()
        for i, g in generators.items():
            if num_draft_tokens[i] > 0:
                q[i].exponential_(generator=g)
    for i, g in generators.items():
        g.set_state(saved_gens[i])
    return q
