"""The recovered tokens' out-of-vocabulary guard (GHSA-8wr5-jm2h-8r4f, upstream PR #44744, 0.24.0).

Every pin whose pristine ``sample_recovered_tokens_kernel`` lacks the guard carries it:
0.16.0/0002, 0.18.1/0002 and 0.22.0/0002. Inputs whose in-vocabulary scores are all NaN in
the last (partial) tile make the unguarded kernel pick a padding lane, i.e. return an id
``>= vocab_size``; the guarded kernel returns the reference's id (NaN never wins, lowest id).
Two triggers: q == 0 (``inv_q == inf``, ``0 * inf == NaN``) and NaN target probs.

`_out_of_vocab` is the verdict: the patched kernel must give no such id and equal the
reference; `test_pristine_has_the_flaw` runs the same verdict on pristine and requires it to
fail there, so the check is shown to catch the bug it claims to catch on each pin.
Triton runs through the interpreter on CPU, as in ``test_recovered_tokens``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.equivalence import test_recovered_tokens as base
from verify.equivalence import recovered_tokens_ref as ref

BLOCK, _call, torch = base.BLOCK, base._call, base.torch
sides = base.sides  # the module-scoped fixture: both kernels under the interpreter

VOCABS = [100, BLOCK + 5]
TRIGGERS = ("zero_q", "nan_target")


def _case(vocab: int, with_draft: bool, trigger: str) -> tuple[SimpleNamespace, torch.Tensor]:
    """Two requests, one draft token each; the last tile holds no usable score."""
    tail = (vocab - 1) // BLOCK * BLOCK
    g = torch.Generator().manual_seed(vocab + with_draft)
    target = torch.rand(2, vocab, generator=g)
    target[:, tail:] = 0.0 if trigger == "zero_q" else float("nan")
    q = torch.zeros(2, vocab) if trigger == "zero_q" else 1.0 + torch.rand(2, vocab, generator=g)
    case = SimpleNamespace(
        num_draft_tokens=[1, 1],
        max_spec_len=1,
        cu=torch.tensor([1, 2], dtype=torch.int32),
        draft_ids=torch.tensor([0, vocab - 1], dtype=torch.int32),
        draft_probs=torch.zeros(2, vocab) if with_draft else None,
        target_probs=target,
        global_seed=0,
        gen_seeds={},
    )
    return case, q


def _out_of_vocab(side, vocab: int, with_draft: bool, trigger: str) -> list[str]:
    """Problems of one kernel on one input: ids outside the vocabulary, or off the reference."""
    case, q = _case(vocab, with_draft, trigger)
    got = _call(side, case, q_fixed=q).tolist()
    expected = ref.recovered_token_ids(
        case.cu, case.draft_ids, case.draft_probs, case.target_probs, inv_q=q.reciprocal()
    ).tolist()
    problems = [f"id {i} >= vocab {vocab}" for i in got if not 0 <= i < vocab]
    if got != expected:
        problems.append(f"ids {got} != reference {expected}")
    return problems


@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("vocab", VOCABS)
def test_patched_stays_in_vocab(pin, sides, vocab, with_draft, trigger):
    assert _out_of_vocab(sides["patched"], vocab, with_draft, trigger) == []


def test_pristine_has_the_flaw(pin, sides):
    """The verdict above fails on pristine: vocab 100, q == 0 gives id 100 (both forms)."""
    for with_draft in (True, False):
        problems = _out_of_vocab(sides["pristine"], 100, with_draft, "zero_q")
        assert "id 100 >= vocab 100" in problems, (with_draft, problems)
