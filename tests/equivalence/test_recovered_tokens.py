"""``sample_recovered_tokens`` (rejection sampler), pristine vs patched vs reference.

Patches: 0.16.0 0001 tiles the vocabulary (8192 per tile) and scores ``prob * inv_q``
instead of ``prob / q`` (upstream PR #34974); 0.16.0 0002 and 0.22.0 0001 mask out-of-vocab
lanes to -inf and clamp the id (upstream PR #44744). The Triton kernels run on CPU
through ``TRITON_INTERPRET=1`` (see `_interpreted_rejection_sampler`), at small shapes:
vocab 100 (< one tile), 8192 (one tile) and 3 * 8192 + 17 (three tiles and a partial one).

Expected relations (token ids compared bit-exactly):
- every kernel equals `recovered_tokens_ref` in its own score form: 0.16.0 pristine
  divides (``q=``), everything else multiplies (``inv_q=``);
- pristine == patched on the randomized inputs and forced ties (lowest id wins, also
  across tiles); on 0.16.0 the two forms can differ only where two scores are within
  about one ulp, shown by `test_near_tie_rounding_0_16_0` (both sides match their form);
- NaN scores (q == 0 so inv_q == inf, zero probs): the guarded kernels give the
  reference's id 0 where both pristine kernels return vocab_size (out of vocabulary).
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType, SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")  # interpreted without a GPU: see conftest.py

from verify.equivalence import recovered_tokens_ref as ref  # noqa: E402
from verify.equivalence.roots import ImportRoot  # noqa: E402

BLOCK = 8192
VOCABS = [100, BLOCK, 3 * BLOCK + 17]
# Per pin: does the patched side carry the out-of-vocab guard, does pristine divide by q?
GUARDED = {"0.16.0": True, "0.22.0": True}
PRISTINE_DIVIDES = {"0.16.0": True, "0.22.0": False}


@contextlib.contextmanager
def _interpreter_env():
    """Make vLLM import real Triton with kernels as interpreter functions.

    ``vllm.triton_utils.importing`` swaps in a placeholder Triton when no driver is
    active (no GPU), except when ``CUDA_VISIBLE_DEVICES`` is set and empty (its
    "distributed environment" case); ``@triton.jit`` returns an ``InterpretedFunction``
    when ``TRITON_INTERPRET=1`` at decoration time. Both only matter while importing.
    """
    keys = ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _second_vllm_import_tolerated():
    """Let one process import vLLM from several roots.

    Importing vLLM registers process-wide torch objects by name: an opaque type
    (``vllm.utils.torch_utils.LayerName``, torch >= 2.11) and ``torch.library`` ops.
    A second root's import fails with "already registered" / "multiple times". While
    importing, a duplicate opaque type reuses the first registration and duplicate
    library definitions are skipped. The rejection sampler uses neither (no custom
    ops, no torch.compile), so which root's registration wins does not matter here.
    """
    with pytest.MonkeyPatch.context() as mp:
        try:
            from torch._library import opaque_object
        except ImportError:  # torch without opaque types registers nothing
            opaque_object = None
        if opaque_object is not None and hasattr(opaque_object, "register_opaque_type"):
            register = opaque_object.register_opaque_type

            def register_unless_known(cls, *args, **kwargs):
                known = opaque_object._OPAQUE_TYPES_BY_NAME.get(
                    f"{cls.__module__}.{cls.__qualname__}"
                )
                if known is None:
                    return register(cls, *args, **kwargs)
                opaque_object._OPAQUE_TYPES[cls] = known
                return None

            mp.setattr(opaque_object, "register_opaque_type", register_unless_known)
        for name in ("define", "impl", "_register_fake"):
            method = getattr(torch.library.Library, name, None)
            if method is None:
                continue

            def skip_duplicate(self, *args, _method=method, **kwargs):
                try:
                    return _method(self, *args, **kwargs)
                except RuntimeError as e:
                    if "multiple times" in str(e) or "already" in str(e):
                        return None
                    raise

            mp.setattr(torch.library.Library, name, skip_duplicate)
        yield


def _interpreted_rejection_sampler(root: ImportRoot) -> tuple[ImportRoot, ModuleType]:
    """A private import root over `root.path` (its own module cache, so modules other
    tests imported with the Triton placeholder are not reused) and its rejection sampler."""
    if type(triton.language.max).__name__ != "InterpretedFunction":
        pytest.skip(
            "triton was imported before TRITON_INTERPRET=1 was set (or a GPU is present); "
            "run with TRITON_INTERPRET=1 in the environment"
        )
    own = ImportRoot(root.path, f"{root.label} (triton interpreter)")
    with _interpreter_env(), _second_vllm_import_tolerated():
        mod = own.load("vllm.v1.sample.rejection_sampler")
    kernel = mod.sample_recovered_tokens_kernel
    if type(kernel).__name__ != "InterpretedFunction":
        pytest.fail(f"{own}: kernel is {type(kernel)!r}, not a Triton InterpretedFunction")
    return own, mod


@pytest.fixture(scope="module")
def sides(pristine: ImportRoot, patched: ImportRoot):
    return {
        "pristine": _interpreted_rejection_sampler(pristine),
        "patched": _interpreted_rejection_sampler(patched),
    }


def _call(side, case, *, q_fixed: torch.Tensor | None = None) -> torch.Tensor:
    """Run ``sample_recovered_tokens`` of one side on `case` with a fixed RNG state.

    With `q_fixed`, every ``exponential_`` fill writes q_fixed instead (no generators)."""
    root, mod = side
    torch.manual_seed(case.global_seed)
    gens = {i: torch.Generator().manual_seed(s) for i, s in case.gen_seeds.items()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(root.active())
        if q_fixed is not None:
            assert not gens
            orig = torch.Tensor.exponential_

            def fill(t, *a, **k):
                return t.copy_(q_fixed)

            torch.Tensor.exponential_ = fill
            stack.callback(setattr, torch.Tensor, "exponential_", orig)
        out = mod.sample_recovered_tokens(
            case.max_spec_len,
            case.num_draft_tokens,
            case.cu,
            case.draft_ids,
            case.draft_probs,
            case.target_probs,
            SimpleNamespace(generators=gens),
            torch.device("cpu"),
        )
    return out


def _q_of(case) -> torch.Tensor:
    torch.manual_seed(case.global_seed)
    gens = {i: torch.Generator().manual_seed(s) for i, s in case.gen_seeds.items()}
    return ref.draw_q(case.num_draft_tokens, case.target_probs.shape[1], gens)


def _case(num_draft_tokens, vocab, with_draft, seed, gen_seeds=None, max_spec_len=None):
    g = torch.Generator().manual_seed(seed)
    t = sum(num_draft_tokens)
    target = torch.softmax(torch.randn(t, vocab, generator=g) * 3, -1)
    draft = torch.softmax(torch.randn(t, vocab, generator=g) * 3, -1)
    draft_ids = torch.randint(0, vocab, (t,), generator=g, dtype=torch.int32)
    # Draft tokens are usually likely under the draft distribution: make some of them
    # its argmax so that the no-draft-probs path zeroes the best target entry.
    draft_ids[::2] = draft[::2].argmax(-1).to(torch.int32)
    return SimpleNamespace(
        num_draft_tokens=list(num_draft_tokens),
        max_spec_len=max_spec_len or max(num_draft_tokens),
        cu=torch.tensor(num_draft_tokens).cumsum(0).to(torch.int32),
        draft_ids=draft_ids,
        draft_probs=draft if with_draft else None,
        target_probs=target,
        global_seed=seed + 1,
        gen_seeds=dict(gen_seeds or {}),
    )


def _expected(pin, case, q, side):
    divides = side == "pristine" and PRISTINE_DIVIDES[pin]
    args = (case.cu, case.draft_ids, case.draft_probs, case.target_probs)
    return (
        ref.recovered_token_ids(*args, q=q)
        if divides
        else ref.recovered_token_ids(*args, inv_q=q.reciprocal())
    )


LAYOUTS = {
    # batch 1, one draft token
    "b1": dict(num_draft_tokens=[1]),
    # 4 requests x up to 3 draft tokens; request 1 has none (its program exits early, its
    # generator is not drawn from); requests 0 and 3 are seeded, 2 uses the global RNG
    "ragged": dict(num_draft_tokens=[3, 0, 1, 3], gen_seeds={0: 11, 1: 12, 3: 13}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("vocab", VOCABS)
def test_random_inputs(pin, sides, vocab, with_draft, layout):
    case = _case(vocab=vocab, with_draft=with_draft, seed=vocab + 3 * with_draft, **LAYOUTS[layout])
    q = _q_of(case)
    got = {name: _call(side, case) for name, side in sides.items()}
    for name in got:
        assert torch.equal(got[name], _expected(pin, case, q, name)), name
    assert torch.equal(got["patched"], got["pristine"])
    assert int(got["patched"].max()) < vocab


def _tie_case(vocab, with_draft, winners, value=0.25):
    """One draft token; equal target mass at `winners`, q == 1 (so equal scores)."""
    target = torch.zeros(1, vocab)
    target[0, winners] = value
    # some smaller, non-winning mass elsewhere
    target[0, 1] = value / 2
    draft = torch.zeros(1, vocab)
    if with_draft:
        draft[0, 1] = value  # target - draft < 0 there: clamps to 0
        draft[0, 2] = 0.125
    return SimpleNamespace(
        num_draft_tokens=[1],
        max_spec_len=1,
        cu=torch.tensor([1], dtype=torch.int32),
        draft_ids=torch.tensor([vocab - 2], dtype=torch.int32),
        draft_probs=draft if with_draft else None,
        target_probs=target,
        global_seed=0,
        gen_seeds={},
    )


TIES = {
    "within_tile": (100, [7, 8, 60]),
    "last_lane": (100, [99]),
    "one_full_tile": (BLOCK, [BLOCK - 1, 4000]),
    "across_tiles": (3 * BLOCK + 17, [BLOCK + 3, 2 * BLOCK + 3, 3 * BLOCK + 16, 3 * BLOCK]),
    "first_and_last_tile": (3 * BLOCK + 17, [3 * BLOCK + 1, 5]),
    "only_partial_tile": (3 * BLOCK + 17, [3 * BLOCK + 16]),
    "all_zero": (3 * BLOCK + 17, []),
}


@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("name", sorted(TIES))
def test_forced_ties(pin, sides, name, with_draft):
    vocab, winners = TIES[name]
    case = _tie_case(vocab, with_draft, winners)
    q = torch.ones(1, vocab)
    # no winners: with draft probs every score is 0 (lowest id 0 wins), without them
    # target[1] is the only mass left
    expected = min(winners) if winners else (0 if with_draft else 1)
    for side in ("pristine", "patched"):
        assert torch.equal(
            _expected(pin, case, q, side), torch.tensor([expected], dtype=torch.int32)
        )
    got = {s: _call(sides[s], case, q_fixed=q) for s in sides}
    assert got["pristine"].tolist() == [expected], got
    assert got["patched"].tolist() == [expected], got


def test_tie_with_different_q(pin, sides):
    """Equal ratios from different (prob, q): 0.5 / 2 == 0.25 / 1, exact in both forms."""
    vocab = 2 * BLOCK + 9
    case = _tie_case(vocab, False, [])
    case.target_probs[0, BLOCK + 4] = 0.25
    case.target_probs[0, 6] = 0.5
    q = torch.ones(1, vocab)
    q[0, 6] = 2.0
    got = {s: _call(sides[s], case, q_fixed=q) for s in sides}
    assert got["pristine"].tolist() == got["patched"].tolist() == [6]


def test_near_tie_rounding_0_16_0(pin, sides):
    """prob / q and prob * (1 / q) round differently: a documented 1-ulp divergence.

    p2 / q2 rounds to exactly 0.68559295 (== lane 5's score in the divide form: a tie,
    lowest id 5 wins) while p2 * (1 / q2) rounds one ulp higher (lane BLOCK + 9 wins)."""
    if pin != "0.16.0":
        pytest.skip("only 0.16.0 changes the score form")
    import numpy as np

    vocab = 2 * BLOCK + 9
    p2 = float(np.uint32(1058753659).view(np.float32))  # 0.60663575
    q2 = float(np.uint32(1063421046).view(np.float32))  # 0.8848337
    d = torch.tensor(p2, dtype=torch.float32) / torch.tensor(q2, dtype=torch.float32)
    case = _tie_case(vocab, False, [])
    case.target_probs[0] = 0.0
    case.target_probs[0, 5] = d
    case.target_probs[0, BLOCK + 9] = p2
    q = torch.ones(1, vocab)
    q[0, BLOCK + 9] = q2
    assert _expected(pin, case, q, "pristine").tolist() == [5]
    assert _expected(pin, case, q, "patched").tolist() == [BLOCK + 9]
    got = {s: _call(sides[s], case, q_fixed=q) for s in sides}
    assert got["pristine"].tolist() == [5]
    assert got["patched"].tolist() == [BLOCK + 9]


@pytest.mark.parametrize("with_draft", [True, False], ids=["draft", "nodraft"])
@pytest.mark.parametrize("vocab", [100, BLOCK + 5])
def test_nan_scores_stay_in_vocab(pin, sides, vocab, with_draft):
    """q == 0 (inv_q == inf) and zero probs in the last tile: those scores are NaN.

    Below one tile every in-vocab score is NaN; the unguarded kernels then pick an
    out-of-vocab lane (id == vocab) under the interpreter, the guarded one returns the
    reference's 0. Above one tile the first tile wins either way."""
    tail = (vocab - 1) // BLOCK * BLOCK
    g = torch.Generator().manual_seed(vocab)
    target = torch.rand(2, vocab, generator=g)
    target[:, tail:] = 0.0
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
    q = torch.zeros(2, vocab)
    got = {s: _call(sides[s], case, q_fixed=q) for s in sides}
    expected = _expected(pin, case, q, "patched")
    if tail > 0:
        assert got["pristine"].tolist() == got["patched"].tolist() == expected.tolist()
        assert int(expected.max()) < tail
        return
    assert expected.tolist() == [0, 0]
    assert got["pristine"].tolist() == [vocab, vocab]  # the bug, reproduced
    if GUARDED[pin]:
        assert got["patched"].tolist() == [0, 0]
    else:
        # 0.16.0 series: the tiling patch keeps the unguarded behaviour
        assert got["patched"].tolist() == [vocab, vocab]
