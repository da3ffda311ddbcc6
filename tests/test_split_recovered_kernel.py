"""CPU (Triton interpreter) checks of the standalone split recovered-token kernel.

scripts/kernels/split_recovered.py is the development copy of the issue-10
kernel; these tests pin its semantics (lowest index among maxima, the out-of-vocab
guard, the split heuristic) at small shapes before it goes into the patch.
"""

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

KDIR = Path(__file__).resolve().parents[1] / "scripts" / "kernels"
# The development kernel and the candidate with the slice reduction fused in.
KFILES = ["split_recovered.py", "split_recovered_fused.py"]


@pytest.fixture(scope="module", params=KFILES)
def kmod(request):
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 or a GPU")
    kfile = KDIR / request.param
    spec = importlib.util.spec_from_file_location(kfile.stem, kfile)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(B, K, V, with_draft, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    T = B * K
    if ties:
        target = torch.randint(0, 3, (T, V), generator=g).float() / 4
        draft = torch.randint(0, 3, (T, V), generator=g).float() / 8 if with_draft else None
        inv_q = torch.ones(B, V)
    else:
        target = torch.softmax(torch.randn(T, V, generator=g) * 3, -1)
        draft = torch.softmax(torch.randn(T, V, generator=g) * 3, -1) if with_draft else None
        inv_q = torch.empty(B, V).exponential_(generator=g).reciprocal()
    draft_ids = torch.randint(0, V, (T,), generator=g, dtype=torch.int32)
    cu = (torch.arange(1, B + 1) * K).to(torch.int32)
    return cu, draft_ids, draft, target, inv_q


def _reference(B, K, cu, draft_ids, draft, target, inv_q):
    if draft is None:
        prob = target.clone()
        prob[torch.arange(target.shape[0]), draft_ids.long()] = 0.0
    else:
        prob = (target - draft).clamp_min(0.0)
    req = torch.arange(B).repeat_interleave(K)
    return (prob * inv_q[req]).argmax(-1).to(torch.int32)  # first maximum


@pytest.mark.parametrize("V", [5, 64, 100, 257])
@pytest.mark.parametrize("with_draft", [False, True])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("num_splits", [1, 2, 3, 7])
def test_split_matches_reference(kmod, V, with_draft, ties, num_splits):
    B, K = 2, 2
    args = _inputs(B, K, V, with_draft, seed=V * 7 + num_splits, ties=ties)
    cu, draft_ids, draft, target, inv_q = args
    out = torch.full((B * K,), -1, dtype=torch.int32)
    kmod.sample_recovered_tokens(
        out,
        cu,
        draft_ids,
        draft,
        target,
        inv_q,
        K,
        num_splits=num_splits,
        split_block_size=16,
        split_num_warps=1,
    )
    assert torch.equal(out, _reference(B, K, *args))


def test_ragged_requests(kmod):
    # requests with 0, 1 and 3 draft tokens
    V, B, max_k = 70, 3, 3
    counts = [0, 1, 3]
    T = sum(counts)
    g = torch.Generator().manual_seed(3)
    target = torch.softmax(torch.randn(T, V, generator=g), -1)
    inv_q = torch.empty(B, V).exponential_(generator=g).reciprocal()
    draft_ids = torch.randint(0, V, (T,), generator=g, dtype=torch.int32)
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    req = torch.repeat_interleave(torch.arange(B), torch.tensor(counts))
    prob = target.clone()
    prob[torch.arange(T), draft_ids.long()] = 0
    ref = (prob * inv_q[req]).argmax(-1).to(torch.int32)
    for s in (1, 4):
        out = torch.full((T,), -1, dtype=torch.int32)
        kmod.sample_recovered_tokens(
            out,
            cu,
            draft_ids,
            None,
            target,
            inv_q,
            max_k,
            num_splits=s,
            split_block_size=16,
            split_num_warps=1,
        )
        assert torch.equal(out, ref), s


def test_all_zero_scores_pick_index_zero_and_stay_in_vocab(kmod):
    # every score 0: lowest index (0) wins, never an out-of-vocab lane
    V, B, K = 37, 1, 2
    target = torch.zeros(B * K, V)
    draft = torch.zeros(B * K, V)
    inv_q = torch.ones(B, V)
    cu = torch.tensor([K], dtype=torch.int32)
    ids = torch.zeros(B * K, dtype=torch.int32)
    for s in (1, 3):
        out = torch.full((B * K,), -1, dtype=torch.int32)
        kmod.sample_recovered_tokens(
            out,
            cu,
            ids,
            draft,
            target,
            inv_q,
            K,
            num_splits=s,
            split_block_size=16,
            split_num_warps=1,
        )
        assert out.tolist() == [0, 0]


def test_tie_at_split_boundary_lowest_wins(kmod):
    # equal maxima in the last lane of slice 0 and first lane of slice 1
    V, B, K = 48, 1, 1
    target = torch.full((1, V), 0.01)
    target[0, 15] = target[0, 16] = target[0, 40] = 0.5
    inv_q = torch.ones(B, V)
    cu = torch.tensor([1], dtype=torch.int32)
    ids = torch.tensor([0], dtype=torch.int32)
    for s in (1, 2, 3):
        out = torch.full((1,), -1, dtype=torch.int32)
        kmod.sample_recovered_tokens(
            out,
            cu,
            ids,
            None,
            target,
            inv_q,
            K,
            num_splits=s,
            split_block_size=16,
            split_num_warps=1,
        )
        assert out.item() == 15


def test_choose_config(kmod):
    f = kmod.choose_config
    sms = 132
    blk = kmod.SPLIT_BLOCK_SIZE
    tiles = -(-151936 // blk)
    # one token: one 1024-lane slice per tile
    assert f(1, 151936, sms) == (tiles, 1024, 4)
    # ~8 four-warp programs per SM while that gives >= 5 slices
    assert f(32, 151936, sms) == (33, 1024, 4)
    assert f(128, 151936, sms) == (8, 1024, 4)
    # 2..4 slices: half as many slices of a 2048-lane, 8-warp tile
    assert f(256, 151936, sms) == (2, 2048, 8)
    assert f(512, 151936, sms) == (1, 2048, 8)
    # the tokens fill the GPU: one 1024-lane program per token, no second pass
    assert f(1024, 151936, sms) == (1, 1024, 4)
    assert f(4096, 151936, sms) == (1, 1024, 4)
    # vocabulary of one tile: nothing to split
    assert f(1, blk, sms)[0] == 1
    assert f(0, 151936, sms)[0] == 1
    for T in range(1, 2048, 7):
        for V in (1000, 32000, 128256, 151936):
            s, b, w = f(T, V, sms)
            assert 1 <= s <= max(1, -(-V // b))
            assert (b, w) in ((1024, 4), (2048, 8))
            assert s == 1 or T * s * w <= 4 * kmod._PROGRAMS_PER_SM * sms


def test_fused_counters_reset_between_launches(kmod):
    # The fused candidate's per-token counters must be back at 0 after every launch, or
    # the next launch would reduce too early (or never).
    if not hasattr(kmod, "_counters"):
        pytest.skip("no counters in this kernel")
    B, K, V = 3, 2, 100
    args = _inputs(B, K, V, True, seed=5)
    cu, draft_ids, draft, target, inv_q = args
    for s in (2, 5, 3):
        out = torch.full((B * K,), -1, dtype=torch.int32)
        kmod.sample_recovered_tokens(
            out, cu, draft_ids, draft, target, inv_q, K,
            num_splits=s, split_block_size=16, split_num_warps=1,
        )  # fmt: skip
        assert torch.equal(out, _reference(B, K, *args)), s
        assert int(kmod._counters[target.device][: B * K].abs().sum()) == 0
