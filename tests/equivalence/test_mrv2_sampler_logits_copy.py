"""vLLM PR #35214: the MRV2 Sampler skips its FP32 logits copy when no request in
the batch needs logits processing.

Pristine vs patched `vllm.v1.worker.gpu.sample.sampler.Sampler` (and the spec-decode
`RejectionSampler` logprob input) run end to end on CPU: real `RequestState`, real
sub-states, real Triton kernels executed by the Triton interpreter (`TRITON_INTERPRET=1`).
vLLM's `triton_utils` disables Triton when no driver is active unless
`CUDA_VISIBLE_DEVICES` is set and empty (its "distributed environment" leniency), so the
roots are imported afresh with both variables set. UVA buffers are replaced by plain CPU
tensors (same numpy views, `.gpu` = the CPU tensor).

Checked bit-exact (torch.equal, same dtype/shape): sampled token ids, logprob token ids,
logprobs, selected-token ranks, for randomized batches (bf16 and fp32 logits with many
ties) where each processing kind is on or off (temperature != 0/1, top_k, top_p, min_p,
repetition/frequency/presence penalties, logit bias, allowed_token_ids, min_tokens + stop
ids, bad words), mixed batches, all-greedy, all-plain random sampling, with and without
logprobs / logprob_token_ids, raw and processed logprobs modes, batch 1 and 256; plus the
per-request `needs_logits_processing` flag vs every sub-state's own skip condition, and
that the copy is really skipped (returned tensor is the input) exactly when no request
needs processing.
"""

from __future__ import annotations

import importlib
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.equivalence.mrv2_cpu import interpreter_roots

# test_penalties_one_pass imports it from here
from tests.equivalence.mrv2_cpu import two_roots_importable as _two_roots_importable  # noqa: F401

SAMPLE = "vllm.v1.worker.gpu.sample"
MAX_NUM_REQS = 256
MAX_MODEL_LEN = 48
VOCAB = 160  # small: the Triton interpreter runs every program instance in numpy


@pytest.fixture(scope="module")
def mods(pristine, patched):
    with interpreter_roots(pristine, patched) as fresh:
        out = []
        for root in fresh:
            with root.active():
                # top-k/top-p: batches >= 8 take the Triton path, which asks the platform
                # for its SM count (none on CPU). Use the PyTorch path in both roots (the
                # same, unpatched code; it runs on the FP32 copy).
                st = importlib.import_module(f"{SAMPLE}.states")
                tkp = importlib.import_module("vllm.v1.sample.ops.topk_topp_sampler")
                st.apply_top_k_top_p = tkp.apply_top_k_top_p_pytorch
                out.append(
                    SimpleNamespace(
                        root=root,
                        sampler=importlib.import_module(f"{SAMPLE}.sampler"),
                        states=importlib.import_module("vllm.v1.worker.gpu.states"),
                        rej=importlib.import_module(
                            "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
                        ),
                    )
                )
        yield SimpleNamespace(pristine=out[0], patched=out[1])


# ------------------------------------------------------------------ request configs

KINDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition",
    "frequency",
    "presence",
    "logit_bias",
    "allowed",
    "min_tokens",
    "bad_words",
)


def make_params(rng: random.Random, kinds: set[str], greedy: bool, logprobs) -> SimpleNamespace:
    """Attributes the MRV2 sampler states read from SamplingParams."""
    p = SimpleNamespace(
        temperature=0.0 if greedy else 1.0,
        top_p=1.0,
        top_k=rng.choice([0, -1, VOCAB, VOCAB + 5]),  # all mean "off"
        min_p=0.0,
        seed=rng.randrange(2**31),
        logprobs=logprobs,
        logprob_token_ids=None,
        repetition_penalty=1.0,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        allowed_token_ids=None,
        logit_bias=None,
        min_tokens=0,
        all_stop_token_ids=set(),
        bad_words_token_ids=None,
    )
    if "temperature" in kinds and not greedy:
        p.temperature = rng.choice([0.5, 0.7, 1.3, 2.0])
    if "top_k" in kinds:
        p.top_k = rng.choice([1, 5, 40])
    if "top_p" in kinds:
        p.top_p = rng.choice([0.3, 0.8, 0.95])
    if "min_p" in kinds:
        p.min_p = rng.choice([0.05, 0.2])
    if "repetition" in kinds:
        p.repetition_penalty = rng.choice([0.8, 1.3])
    if "frequency" in kinds:
        p.frequency_penalty = rng.choice([-0.5, 0.7])
    if "presence" in kinds:
        p.presence_penalty = rng.choice([-0.4, 0.9])
    if "logit_bias" in kinds:
        p.logit_bias = {rng.randrange(VOCAB): rng.uniform(-5, 5) for _ in range(4)}
    if "allowed" in kinds:
        p.allowed_token_ids = rng.sample(range(VOCAB), 12)
    if "min_tokens" in kinds:
        p.min_tokens = rng.randint(1, 30)
        p.all_stop_token_ids = set(rng.sample(range(VOCAB), 3))
    if "bad_words" in kinds:
        p.bad_words_token_ids = [
            [rng.randrange(VOCAB)],
            [rng.randrange(VOCAB), rng.randrange(VOCAB)],
        ]
    return p


def random_batch(rng: random.Random, n: int, mode: str):
    """mode: plain (no processing anywhere), greedy, mixed, single:<kind>, all."""
    reqs = []
    for i in range(n):
        greedy = mode == "greedy" or rng.random() < 0.3
        if mode in ("plain", "greedy"):
            kinds: set[str] = set()
        elif mode.startswith("single:"):
            kinds = (
                {mode.split(":", 1)[1]} if i == rng.randrange(n) or rng.random() < 0.5 else set()
            )
        elif mode == "all":
            kinds = set(rng.sample(KINDS, rng.randint(1, len(KINDS))))
        else:  # mixed: most requests plain, a few with processing
            kinds = set(rng.sample(KINDS, 1)) if rng.random() < 0.15 else set()
        lp = rng.choice([None, None, 0, 3])
        params = make_params(rng, kinds, greedy, lp)
        if rng.random() < 0.1:
            params.logprob_token_ids = rng.sample(range(VOCAB), rng.randint(1, 4))
        prompt_len = rng.randint(1, 12)
        n_out = rng.randint(0, 12)
        tokens = [rng.randrange(VOCAB) for _ in range(prompt_len + n_out)]
        reqs.append((params, prompt_len, tokens))
    return reqs


def make_logits(rng: random.Random, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    x = torch.randn(n, VOCAB, generator=g) * 3
    # Many exact ties (a coarse grid) to exercise top-k / argmax tie handling.
    x = torch.round(x * 2) / 2
    return x.to(dtype)


def run(m, reqs, logits, logprobs_mode, spec_decode=False):
    """Build a real Sampler in root `m`, add `reqs`, sample `logits` once."""
    with m.root.active():
        rs = m.states.RequestState(
            max_num_reqs=MAX_NUM_REQS,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_NUM_REQS,
            num_speculative_steps=0,
            vocab_size=VOCAB,
            device=torch.device("cpu"),
        )
        sampler = m.sampler.Sampler(
            max_num_reqs=MAX_NUM_REQS,
            vocab_size=VOCAB,
            device=torch.device("cpu"),
            req_states=rs,
            logprobs_mode=logprobs_mode,
        )
        idx = []
        for i, (params, prompt_len, tokens) in enumerate(reqs):
            rs.add_request(f"r{i}", prompt_len, tokens, len(tokens))
            req_idx = rs.req_id_to_index[f"r{i}"]
            sampler.add_request(req_idx, prompt_len, params)
            idx.append(req_idx)
        rs.apply_staged_writes()
        sampler.apply_staged_writes()

        n = len(reqs)
        idx_t = torch.tensor(idx, dtype=torch.int32)
        positions = torch.tensor([len(t) for _, _, t in reqs], dtype=torch.int64)
        input_ids = torch.tensor([t[-1] for _, _, t in reqs], dtype=torch.int32)
        batch = SimpleNamespace(
            expanded_idx_mapping=idx_t,
            idx_mapping=idx_t,
            idx_mapping_np=np.asarray(idx, dtype=np.int32),
            cu_num_logits_np=np.arange(n + 1, dtype=np.int32),
            cu_num_logits=torch.arange(n + 1, dtype=torch.int32),
            expanded_local_pos=torch.zeros(n, dtype=torch.int32),
            positions=positions,
            input_ids=input_ids,
            logits_indices=torch.arange(n),
            seq_lens=positions.to(torch.int32),
            num_reqs=n,
        )
        inp = logits.clone()
        out = sampler(inp, batch)
        assert torch.equal(inp, logits), "sampler modified its input logits"
        processed = sampler.apply_sampling_params(
            inp,
            batch.expanded_idx_mapping,
            batch.idx_mapping_np,
            positions,
            input_ids,
            batch.expanded_local_pos,
        )
        lp = out.logprobs_tensors
        return SimpleNamespace(
            sampled=out.sampled_token_ids.clone(),
            lp=None
            if lp is None
            else (
                lp.logprob_token_ids.clone(),
                lp.logprobs.clone(),
                lp.selected_token_ranks.clone(),
            ),
            skipped=processed is inp,
            sampler=sampler,
            idx=idx,
        )


def assert_same(a, b):
    assert torch.equal(a.sampled, b.sampled), (a.sampled.view(-1), b.sampled.view(-1))
    assert (a.lp is None) == (b.lp is None)
    if a.lp is not None:
        for x, y, name in zip(a.lp, b.lp, ("token_ids", "logprobs", "ranks"), strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert torch.equal(x, y), name


def needs_processing_reference(sampler, i) -> bool:
    """Independent restatement: would any apply_* step of the sampler touch row i?"""
    s = sampler.sampling_states
    t = s.temperature.np[i]
    return bool(
        sampler.logit_bias_state.use_logit_bias[i]
        or sampler.penalties_state.use_penalty[i]
        or sampler.bad_words_state.num_bad_words.np[i] > 0
        or (t != 0.0 and t != 1.0)
        or s.min_p.np[i] != 0.0
        or s.top_k.np[i] != s.vocab_size
        or s.top_p.np[i] != 1.0
    )


MODES = ["plain", "greedy", "mixed", "all"] + [f"single:{k}" for k in KINDS]


@pytest.mark.parametrize("logprobs_mode", ["raw_logprobs", "processed_logprobs"])
@pytest.mark.parametrize("mode", MODES)
def test_sampler_equivalent(mods, mode, logprobs_mode):
    rng = random.Random(f"{mode}-{logprobs_mode}")
    for n, dtype in ((1, torch.bfloat16), (7, torch.float32), (12, torch.bfloat16)):
        reqs = random_batch(rng, n, mode)
        logits = make_logits(rng, n, dtype)
        ref = run(mods.pristine, reqs, logits, logprobs_mode)
        new = run(mods.patched, reqs, logits, logprobs_mode)
        assert_same(new, ref)
        flags = [needs_processing_reference(new.sampler, i) for i in new.idx]
        assert [bool(new.sampler.needs_logits_processing[i]) for i in new.idx] == flags
        assert new.skipped == (not any(flags))
        assert not ref.skipped


@pytest.mark.parametrize("mode", ["plain", "mixed"])
def test_sampler_batch_256(mods, mode):
    rng = random.Random(f"256-{mode}")
    reqs = random_batch(rng, 256, mode)
    logits = make_logits(rng, 256, torch.bfloat16)
    ref = run(mods.pristine, reqs, logits, "processed_logprobs")
    new = run(mods.patched, reqs, logits, "processed_logprobs")
    assert_same(new, ref)
    assert new.skipped == (mode != "mixed" or not any(new.sampler.needs_logits_processing))


def test_float32_rounding_of_stored_params(mods):
    """Values that are 'off' only after float32 storage (temperature/top_p that round
    to 1.0) must not force processing, and the results still match."""
    rng = random.Random(5)
    reqs = random_batch(rng, 4, "plain")
    for params, _, _ in reqs:
        params.temperature = 1.0 + 1e-12
        params.top_p = 1.0 - 1e-12
    logits = make_logits(rng, 4, torch.bfloat16)
    ref = run(mods.pristine, reqs, logits, "processed_logprobs")
    new = run(mods.patched, reqs, logits, "processed_logprobs")
    assert_same(new, ref)
    assert new.skipped
