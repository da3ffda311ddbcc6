"""Pooling prompt token ids kept on the host (vLLM PR #38139 and its follow-up).

0.18.1 patch (backport of #38139): `PoolingMetadata` gains `prompt_token_ids_cpu` and
`get_prompt_token_ids_cpu()`; `InputBatch.get_pooling_metadata()` fills it straight from the
host token buffer; GritLM's instruction search, `BOSEOSFilter` and `SPLADESparsePooler` read it
instead of the device tensor (which pristine built by copying host -> device and read back).

0.22.0 patch (backport of the 0.29.0 follow-up): pooling requests no longer ask the sampling
metadata for a device copy, `PoolingMetadata.prompt_token_ids` is None, and JinaForRankingPool
finds its doc/query markers in the host buffer.

Claim checked here, pristine vs patched, on seeded random batches and named edge cases:

1. The token-id tensor each pooler consumes (pristine: the device tensor where the pristine
   pooler read it, patched: the host buffer) holds identical values, dtype and shape,
   including the `vocab_size` padding, for batches of 1 and many requests, with and
   without `requires_token_ids`, after request removal + `condense()`, and after slicing.
   The patched buffer lives on the CPU. Both also match an independent oracle built from the
   requests.
2. Poolers that consume the ids (GritLM mean pool, BOSEOSFilter, SPLADE; Jina on 0.22.0)
   give bit-identical outputs on random hidden states (same float ops on the same data: no
   tolerance).

The tests run on CPU: the "device" is the CPU here, so they prove equal contents, not where
the copies happen; the patched buffer is checked by `device.type == "cpu"` and, on 0.22.0,
by the device tensor being absent.
"""

from __future__ import annotations

import inspect
import random
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VOCAB_SIZE = 32  # also the padding value of the prompt token id buffers
MAX_MODEL_LEN = 64
HIDDEN = 8

# Small token ids so random prompts hit the special tokens often.
BOS, EOS = 1, 2  # also CLS / SEP for SPLADE
GRIT = {"<s>": 1, "▁<": 3, "<": 4, "|": 5, "embed": 6, ">": 7, "<0x0A>": 8, "user": 9}
DOC_ID, QUERY_ID = 10, 11  # Jina markers
FILLER = list(range(12, VOCAB_SIZE))
SPECIAL = sorted(set(GRIT.values()) | {BOS, EOS, DOC_ID, QUERY_ID})

HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass(frozen=True)
class Req:
    prompt: tuple[int, ...]
    needs_ids: bool


# --------------------------------------------------------------------------- two roots


@pytest.fixture(scope="module", autouse=True)
def _opaque_types_once():
    """Let both roots import `vllm.utils.torch_utils`.

    On torch >= 2.11 that module registers its `ModuleName`/`LayerName` class as a torch
    opaque type by qualified name; the second root's import then fails with "already
    registered". The second class is mapped to the first one's type info instead (these
    tests run no custom ops or torch.compile, which are the only users of it).
    """
    try:
        from torch._library import opaque_object
    except ImportError:  # older torch: nothing is registered
        yield
        return
    original = opaque_object.register_opaque_type

    def register_once(cls, *args, **kwargs):
        name = f"{cls.__module__}.{cls.__qualname__}"
        known = opaque_object._OPAQUE_TYPES_BY_NAME.get(name)
        if known is not None:
            opaque_object._OPAQUE_TYPES[cls] = known
            return None
        return original(cls, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(opaque_object, "register_opaque_type", register_once)
        _tolerate_duplicate_library_ops(mp)
        yield


def _tolerate_duplicate_library_ops(mp: pytest.MonkeyPatch) -> None:
    """A module run before this one may have imported a root's `vllm.ir` or custom ops:
    skip a torch.library op defined again (as tests/equivalence/mrv2_cpu.py does)."""
    for meth in ("define", "impl", "_register_fake"):
        orig_meth = getattr(torch.library.Library, meth, None)
        if orig_meth is None:
            continue

        def tolerant(self, *args, _orig=orig_meth, **kwargs):
            try:
                return _orig(self, *args, **kwargs)
            except RuntimeError as e:
                if "multiple times" in str(e) or "already" in str(e):
                    return None
                raise

        mp.setattr(torch.library.Library, meth, tolerant)


@pytest.fixture(scope="module", autouse=True)
def _custom_ops_once(_opaque_types_once, pristine, patched):
    """Run both roots on vLLM's CPU platform and let both import modules that register
    `torch.ops.vllm.*` custom ops.

    `direct_register_custom_op` defines each op in the process-wide "vllm" torch library, so
    the second root's import raises "registered ... multiple times". Each root's helper is
    wrapped to skip ops that already exist: `torch.ops.vllm.X` then keeps the first root's
    implementation. None of these tests call such ops (collectives, attention, fused MoE).
    """
    import importlib
    import importlib.util
    import inspect

    before = {}
    for root in (pristine, patched):
        with root.active():
            # A source tree has no build to tell vLLM its platform; without one it would
            # assume pinned memory, which CPU-only torch cannot allocate. Set even where a
            # module run before this one resolved another platform in the root.
            platforms = importlib.import_module("vllm.platforms")
            from vllm.platforms.cpu import CpuPlatform

            before[root] = (platforms, platforms._current_platform)
            platforms._current_platform = CpuPlatform()
            # ...and where such a module already imported the pooling metadata, its
            # import-time `pin_memory` was read on that platform: no accelerator here.
            metadata = sys.modules.get("vllm.v1.pool.metadata")
            if getattr(metadata, "pin_memory", False):
                metadata.pin_memory = False
            tu = importlib.import_module("vllm.utils.torch_utils")
            if hasattr(tu, "PIN_MEMORY"):  # 0.26.0 on: no accelerator here, so never pin
                tu.PIN_MEMORY = False
            original = tu.direct_register_custom_op
            if not getattr(original, "_patchbench_once", False):
                signature = inspect.signature(original)

                def register_once(*args, _orig=original, _sig=signature, _tu=tu, **kwargs):
                    bound = _sig.bind(*args, **kwargs)
                    lib = bound.arguments.get("target_lib") or _tu.vllm_lib
                    if hasattr(getattr(torch.ops, lib.ns), bound.arguments["op_name"]):
                        return None
                    return _orig(*args, **kwargs)

                register_once._patchbench_once = True
                tu.direct_register_custom_op = register_once
            if root is patched and importlib.util.find_spec("vllm.ir") is not None:
                # vLLM IR ops (0.22.0+) are defined in a "vllm_ir" torch library at
                # import time; let the second root define them in its own namespace.
                from torch import library as torch_library

                plain_library = torch_library.Library

                class _RenamedLibrary(plain_library):
                    def __init__(self, ns, kind, *args, **kwargs):
                        if ns == "vllm_ir":
                            ns = "vllm_ir_patchbench"
                        super().__init__(ns, kind, *args, **kwargs)

                torch_library.Library = _RenamedLibrary
                try:
                    importlib.import_module("vllm.ir")
                finally:
                    torch_library.Library = plain_library
    yield
    for platforms, platform in before.values():
        platforms._current_platform = platform


# --------------------------------------------------------------------------- batch helpers


def _pooling_metadata(root, reqs: list[Req], removed: frozenset[int] = frozenset()):
    """(InputBatch, PoolingMetadata) of `root` for `reqs`, minus the `removed` indices."""
    with root.active():
        from vllm.pooling_params import PoolingParams
        from vllm.v1.worker.gpu_input_batch import CachedRequestState, InputBatch

        kwargs = dict(
            max_num_reqs=len(reqs),
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN * len(reqs),
            device=torch.device("cpu"),
            vocab_size=VOCAB_SIZE,
            block_sizes=[16],
            is_pooling_model=True,
        )
        params = inspect.signature(InputBatch).parameters
        if "pin_memory" in params:  # up to 0.22.0
            kwargs["pin_memory"] = False
        if "kernel_block_sizes" in params:  # up to 0.22.0
            kwargs["kernel_block_sizes"] = [16]
        if "max_num_blocks_per_req" in params:  # 0.26.0 on: required
            kwargs["max_num_blocks_per_req"] = [MAX_MODEL_LEN // 16]
        batch = InputBatch(**kwargs)
        for i, req in enumerate(reqs):
            params = PoolingParams(task="embed")
            params.requires_token_ids = req.needs_ids
            batch.add_request(
                CachedRequestState(
                    req_id=f"r{i}",
                    prompt_token_ids=list(req.prompt),
                    mm_features=[],
                    sampling_params=None,
                    pooling_params=params,
                    generator=None,
                    block_ids=([],),
                    num_computed_tokens=0,
                    output_token_ids=[],
                )
            )
        for i in sorted(removed):
            batch.remove_request(f"r{i}")
        if removed:
            batch.condense()
        batch.refresh_metadata()
        return batch, batch.get_pooling_metadata()


def _oracle(batch, reqs: list[Req]) -> torch.Tensor:
    """Padded [num_reqs, max_prompt_len] int64 ids in the batch's (post-condense) order."""
    prompts = [reqs[int(req_id[1:])].prompt for req_id in batch.req_ids]
    width = max(len(p) for p in prompts)
    out = torch.full((len(prompts), width), VOCAB_SIZE, dtype=torch.int64)
    for row, prompt in enumerate(prompts):
        out[row, : len(prompt)] = torch.tensor(prompt, dtype=torch.int64)
    return out


def _seen_by_poolers(which: str, metadata) -> torch.Tensor | None:
    """The padded token-id tensor the poolers of this tree read.

    Pristine 0.18.1 poolers all read `prompt_token_ids` (the device copy); pristine 0.22.0
    already had the host buffer for GritLM/BOSEOSFilter/SPLADE/StepPool, but Jina still read
    the device copy; that one is compared (the host buffer is compared separately). Patched
    poolers of both pins read `prompt_token_ids_cpu`.
    """
    if which == "pristine":
        return metadata.prompt_token_ids
    return metadata.prompt_token_ids_cpu


def _same_tensor(a: torch.Tensor | None, b: torch.Tensor | None) -> None:
    assert (a is None) == (b is None), (a, b)
    if a is None:
        return
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.is_floating_point():
        # Bit-exact; NaN (GritLM's mean over an empty non-instruction span) equals NaN.
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True)
    else:
        assert torch.equal(a.cpu(), b.cpu()), (a, b)


def _check_metadata(pin, pristine, patched, reqs: list[Req], removed=frozenset()) -> None:
    p_batch, p_md = _pooling_metadata(pristine, reqs, removed)
    q_batch, q_md = _pooling_metadata(patched, reqs, removed)
    assert p_batch.req_ids == q_batch.req_ids
    _same_tensor(p_md.prompt_lens, q_md.prompt_lens)

    kept = [reqs[int(r[1:])] for r in q_batch.req_ids]
    any_needs = any(r.needs_ids for r in kept)

    seen_p = _seen_by_poolers("pristine", p_md)
    seen_q = _seen_by_poolers("patched", q_md)
    _same_tensor(seen_p, seen_q)
    assert (seen_q is not None) == any_needs
    if seen_q is not None:
        assert seen_q.device.type == "cpu"
        _same_tensor(seen_q, _oracle(q_batch, reqs))
        # Per-request views, as the poolers get them.
        with pristine.active():
            per_p = p_md.get_prompt_token_ids()
        with patched.active():
            per_q = q_md.get_prompt_token_ids_cpu()
        assert len(per_p) == len(per_q) == len(kept)
        for a, b, req in zip(per_p, per_q, kept, strict=True):
            _same_tensor(a, b)
            assert b.device.type == "cpu"
            assert b.tolist() == list(req.prompt)
        # Slicing keeps the buffer aligned with the per-request fields.
        for lo, hi in ((0, 1), (1, None), (None, -1)):
            sl = slice(lo, hi)
            with pristine.active():
                p_sl = p_md[sl]
            with patched.active():
                q_sl = q_md[sl]
            _same_tensor(_seen_by_poolers("pristine", p_sl), q_sl.prompt_token_ids_cpu)
            _same_tensor(p_sl.prompt_lens, q_sl.prompt_lens)

    if pin == "0.18.1":
        # The device copy (still used by StepPool and penalties) is unchanged.
        _same_tensor(p_md.prompt_token_ids, q_md.prompt_token_ids)
        _same_tensor(
            p_batch.sampling_metadata.prompt_token_ids, q_batch.sampling_metadata.prompt_token_ids
        )
    else:
        # The host buffer is unchanged; the device copy is gone everywhere.
        _same_tensor(p_md.prompt_token_ids_cpu, q_md.prompt_token_ids_cpu)
        assert q_md.prompt_token_ids is None
        assert q_batch.sampling_metadata.prompt_token_ids is None
        assert not q_batch.logits_processing_needs_token_ids[: q_batch.num_reqs].any()


# --------------------------------------------------------------------------- strategies


def _gritlm_prompt(rng: random.Random) -> list[int]:
    """Prompts with/without BOS, user pattern and embed pattern, plus filler."""
    g = GRIT
    embed = [g["▁<"], g["|"], g["embed"], g["|"], g[">"], g["<0x0A>"]]
    embed_nl = [g["<0x0A>"], g["<"], g["|"], g["embed"], g["|"], g[">"], g["<0x0A>"]]
    user = [g["▁<"], g["|"], g["user"], g["|"], g[">"], g["<0x0A>"]]
    out = [g["<s>"]] if rng.random() < 0.85 else []
    has_user = rng.random() < 0.5
    if has_user:
        out += user
    out += [rng.choice(FILLER) for _ in range(rng.randint(0, 6))]
    r = rng.random()
    if r < 0.7:
        out += embed_nl if has_user else embed
    elif r < 0.85:
        out += embed  # wrong pattern for a user prompt: exercises the fallback
    out += [rng.choice(FILLER + SPECIAL) for _ in range(rng.randint(0, 8))]
    return out or [rng.choice(FILLER)]


def _random_prompt(rng: random.Random, max_len: int = 24) -> list[int]:
    n = rng.randint(1, max_len)
    alphabet = FILLER + SPECIAL * 3
    return [rng.choice(alphabet) for _ in range(n)]


@st.composite
def batches(draw, *, all_need: bool = False, gritlm: bool = False):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    n = draw(st.integers(1, 8))
    reqs = []
    for _ in range(n):
        prompt = _gritlm_prompt(rng) if gritlm else _random_prompt(rng)
        needs = True if all_need else rng.random() < 0.5
        reqs.append(Req(tuple(prompt[: MAX_MODEL_LEN - 1]), needs))
    removed: frozenset[int] = frozenset()
    if n > 1 and draw(st.booleans()):
        removed = frozenset(rng.sample(range(n), rng.randint(1, n - 1)))
    return reqs, removed


# --------------------------------------------------------------------------- metadata tests


NAMED_BATCHES = {
    "single_needs": [Req((BOS, 12, 13, EOS), True)],
    "single_no_needs": [Req((BOS, 12, 13, EOS), False)],
    "single_one_token": [Req((BOS,), True)],
    "many_same_len": [Req((12 + i, 13, 14), True) for i in range(5)],
    "many_padding": [Req(tuple(range(12, 12 + k)), True) for k in (1, 9, 3, 17, 2)],
    "mixed_needs_padding": [
        Req((BOS, 12), False),
        Req(tuple(range(12, 30)), True),
        Req((13,), False),
        Req((BOS, 14, 15, EOS), True),
    ],
    "none_need_many": [Req(tuple(range(12, 12 + k)), False) for k in (3, 5, 1)],
    "max_len_prompt": [Req(tuple([12] * (MAX_MODEL_LEN - 1)), True), Req((13,), True)],
}


@pytest.mark.parametrize("name", sorted(NAMED_BATCHES))
def test_metadata_named(pin, pristine, patched, name):
    _check_metadata(pin, pristine, patched, NAMED_BATCHES[name])


@pytest.mark.parametrize("removed", [frozenset({0}), frozenset({1, 3}), frozenset({4})])
def test_metadata_after_condense(pin, pristine, patched, removed):
    _check_metadata(pin, pristine, patched, NAMED_BATCHES["many_padding"], removed)


@HYPOTHESIS
@given(case=batches())
def test_metadata_random(pin, pristine, patched, case):
    reqs, removed = case
    _check_metadata(pin, pristine, patched, reqs, removed)


# --------------------------------------------------------------------------- pooler outputs


def _hidden(reqs: list[Req], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    total = sum(len(r.prompt) for r in reqs)
    return torch.randn(total, HIDDEN, generator=gen, dtype=torch.float32)


def _gritlm_pool(root):
    """GritLMMeanPool without a tokenizer: the token-id table is set directly."""
    with root.active():
        from vllm.model_executor.models.gritlm import GritLMMeanPool

        pool = GritLMMeanPool.__new__(GritLMMeanPool)
        torch.nn.Module.__init__(pool)
        pool.token_ids = dict(GRIT)
        ids = lambda toks: np.array([GRIT[t] for t in toks])  # noqa: E731
        pool.user_pattern_ids = ids(["▁<", "|", "user", "|", ">", "<0x0A>"])
        pool.embed_newline_pattern_ids = ids(["<0x0A>", "<", "|", "embed", "|", ">", "<0x0A>"])
        pool.embed_pattern_ids = ids(["▁<", "|", "embed", "|", ">", "<0x0A>"])
        return pool


class _SplitByPrompt(torch.nn.Module):
    """Stand-in inner pooler for BOSEOSFilter: one [prompt_len, 1] tensor per request."""

    def forward(self, hidden_states, pooling_metadata):
        lens = [int(n) for n in pooling_metadata.prompt_lens]
        return [t[:, :1] for t in torch.split(hidden_states, lens)]


def _run_pooler(root, make_pooler, reqs, hidden, removed=frozenset()):
    batch, md = _pooling_metadata(root, reqs, removed)
    kept = [reqs[int(r[1:])] for r in batch.req_ids]
    # Hidden states follow the batch order, as the model runner lays them out.
    offsets = np.cumsum([0] + [len(r.prompt) for r in reqs])
    rows = [hidden[offsets[int(r[1:])] : offsets[int(r[1:]) + 1]] for r in batch.req_ids]
    hs = torch.cat(rows)
    pooler = make_pooler(root)  # activates `root` itself: never nest one root's active()
    with root.active():
        lens = np.array([len(r.prompt) for r in kept], dtype=np.int32)
        md.build_pooling_cursor(lens, torch.from_numpy(lens.copy()), torch.device("cpu"))
        with torch.inference_mode():
            out = pooler(hs, md)
    return out


def _same_outputs(a, b) -> None:
    if isinstance(a, torch.Tensor):
        _same_tensor(a, b)
        return
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        _same_tensor(x, y)


def _gritlm_instruction_lens(pin, which, root, reqs):
    """Instruction lengths from the ids GritLM reads in this tree (pristine 0.18.1: the
    device tensor; every other tree: the host buffer)."""
    _, md = _pooling_metadata(root, reqs)
    pool = _gritlm_pool(root)
    with root.active():
        if pin == "0.18.1" and which == "pristine":
            ids = md.get_prompt_token_ids()
        else:
            ids = md.get_prompt_token_ids_cpu()
        return [pool._get_instruction_len(t.cpu().numpy()) for t in ids]


@HYPOTHESIS
@given(case=batches(all_need=True, gritlm=True), seed=st.integers(0, 2**16))
def test_gritlm_mean_pool(pin, pristine, patched, case, seed):
    reqs, removed = case
    hidden = _hidden(reqs, seed)
    out_p = _run_pooler(pristine, _gritlm_pool, reqs, hidden, removed)
    out_q = _run_pooler(patched, _gritlm_pool, reqs, hidden, removed)
    _same_outputs(out_p, out_q)
    lens_p = _gritlm_instruction_lens(pin, "pristine", pristine, reqs)
    assert lens_p == _gritlm_instruction_lens(pin, "patched", patched, reqs)


def test_gritlm_instruction_lens_named(pin, pristine, patched):
    g = GRIT
    embed = [g["▁<"], g["|"], g["embed"], g["|"], g[">"], g["<0x0A>"]]
    embed_nl = [g["<0x0A>"], g["<"], g["|"], g["embed"], g["|"], g[">"], g["<0x0A>"]]
    user = [g["▁<"], g["|"], g["user"], g["|"], g[">"], g["<0x0A>"]]
    reqs = [
        Req(tuple([g["<s>"]] + embed + [12, 13]), True),  # instruction = 7
        Req(tuple([g["<s>"]] + user + [14, 15] + embed_nl + [16]), True),  # = 16
        Req(tuple([12, 13, 14]), True),  # no BOS -> 0
        Req(tuple([g["<s>"], 12, 13]), True),  # no pattern -> 1
    ]
    lens_p = _gritlm_instruction_lens(pin, "pristine", pristine, reqs)
    assert lens_p == _gritlm_instruction_lens(pin, "patched", patched, reqs)
    assert lens_p == [7, 16, 0, 1]


def _boseos_filter(root):
    with root.active():
        from vllm.model_executor.layers.pooler.special import BOSEOSFilter

        return BOSEOSFilter(_SplitByPrompt(), bos_token_id=BOS, eos_token_id=EOS)


def _splade(root, pooling: str):
    with root.active():
        from vllm.model_executor.models.bert import BertMLMHead, SPLADESparsePooler

        torch.manual_seed(1234)
        head = BertMLMHead(hidden_size=HIDDEN, vocab_size=VOCAB_SIZE, layer_norm_eps=1e-12)
        return SPLADESparsePooler(
            mlm_head=head, cls_token_id=BOS, sep_token_id=EOS, pooling=pooling
        )


@HYPOTHESIS
@given(case=batches(all_need=True), seed=st.integers(0, 2**16))
def test_boseos_filter(pristine, patched, case, seed):
    reqs, removed = case
    hidden = _hidden(reqs, seed)
    out_p = _run_pooler(pristine, _boseos_filter, reqs, hidden, removed)
    out_q = _run_pooler(patched, _boseos_filter, reqs, hidden, removed)
    _same_outputs(out_p, out_q)


@pytest.mark.parametrize("pooling", ["max", "sum"])
@HYPOTHESIS
@given(case=batches(all_need=True), seed=st.integers(0, 2**16))
def test_splade_sparse_pooler(pristine, patched, pooling, case, seed):
    reqs, removed = case
    hidden = _hidden(reqs, seed)
    make = lambda root: _splade(root, pooling)  # noqa: E731
    out_p = _run_pooler(pristine, make, reqs, hidden, removed)
    out_q = _run_pooler(patched, make, reqs, hidden, removed)
    _same_outputs(out_p, out_q)


def test_boseos_and_splade_named_edges(pristine, patched):
    """CLS/SEP only, a lone CLS (SPLADE -> zero vector), no specials, mixed lengths."""
    reqs = [
        Req((BOS, EOS), True),
        Req((BOS,), True),
        Req((12, 13, 14), True),
        Req((BOS, 12, 13, 14, 15, 16, EOS), True),
        Req((EOS, 12, BOS), True),
    ]
    hidden = _hidden(reqs, 7)
    for make in (_boseos_filter, lambda r: _splade(r, "max")):
        _same_outputs(
            _run_pooler(pristine, make, reqs, hidden), _run_pooler(patched, make, reqs, hidden)
        )


def _jina_pool(root):
    """JinaForRankingPool with small marker ids and no vLLM config (chunked prefill off)."""
    with root.active():
        from vllm.model_executor.models.jina import JinaForRankingPool

        pool = JinaForRankingPool.__new__(JinaForRankingPool)
        torch.nn.Module.__init__(pool)
        pool.enable_chunked_prefill = False
        pool.doc_token_id = DOC_ID
        pool.query_token_id = QUERY_ID
        torch.manual_seed(99)
        pool.projector = torch.nn.Sequential(
            torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 4)
        )
        return pool


@HYPOTHESIS
@given(case=batches(all_need=True), seed=st.integers(0, 2**16))
def test_jina_ranking_pool(pin, pristine, patched, case, seed):
    if pin == "0.18.1":
        pytest.skip("JinaForRankingPool does not exist in 0.18.1")
    reqs, removed = case
    hidden = _hidden(reqs, seed)
    out_p = _run_pooler(pristine, _jina_pool, reqs, hidden, removed)
    out_q = _run_pooler(patched, _jina_pool, reqs, hidden, removed)
    _same_outputs(out_p, out_q)
