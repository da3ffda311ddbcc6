"""MRV2 penalty statistics kept only for requests that use a penalty: the pin's
`PenaltiesState` ([max_num_reqs, vocab] counts and prompt bits) against the patched one (one
row per penalty request, found through `penalty_row`), both driven as the model runner drives
them, on CPU with the Triton interpreter (tests/equivalence/mrv2_cpu.py). v0.22.0 and v0.33.0
(where `PenaltiesState` is a `LogitsProcessor`, applied through `apply(logits, ctx)`, and the
post-update is `postprocess_sampled`, whose `idx_mapping` may hold -1: a request it skips)
share the scenarios; `Engine022` and `Engine033` are the two releases' calls.

A scenario is a random sequence of steps. Each step: some live requests finish and some are
preempted (`GPUModelRunner._remove_request`), new and resumed requests are added (a resumed
one with its prompt and outputs as prefill tokens, as the scheduler re-sends it), the states
apply their staged writes, then every live request decodes with 0-3 draft positions laid out
as MRV2 lays out speculative decoding (`expanded_idx_mapping`, `expanded_local_pos`, the draft
ids in `input_ids`), the penalties are applied, and each request accepts 1 to all of its
positions (`GPUModelRunner.postprocess`, which runs `post_update`; on v0.33.0 some requests'
entries are -1 and their tokens are not committed). Checked at every step: the
penalized logits bit for bit (int32 views), and that the patched state holds exactly one row
per live penalty request, none when no request uses a penalty. The mutants (a reused row not
cleared, an accepted draft counted twice, a resumed request not rebuilt) must fail the check.
"""

from __future__ import annotations

import importlib
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.equivalence.mrv2_cpu import interpreter_roots

GPU = "vllm.v1.worker.gpu"
MAX_NUM_REQS = 24
MAX_MODEL_LEN = 96
VOCAB = 200  # small: the interpreter runs every program instance in numpy
MAX_DRAFTS = 3


@pytest.fixture(scope="module")
def mods(pin, pristine, patched):
    engine = {"0.22.0": Engine022, "0.33.0": Engine033}[pin]
    with interpreter_roots(pristine, patched) as fresh:
        out = []
        for root in fresh:
            with root.active():
                out.append(
                    SimpleNamespace(
                        root=root,
                        engine=engine,
                        pen=importlib.import_module(f"{GPU}.sample.penalties"),
                        sampler=importlib.import_module(f"{GPU}.sample.sampler"),
                        states=importlib.import_module(f"{GPU}.states"),
                        runner=importlib.import_module(f"{GPU}.model_runner"),
                        batch=importlib.import_module(f"{GPU}.input_batch"),
                    )
                )
        yield SimpleNamespace(pristine=out[0], patched=out[1], mask_share=engine.MASK_SHARE)


def make_params(rng: random.Random, penalized: bool) -> SimpleNamespace:
    """The SamplingParams attributes the MRV2 sampler states read."""
    p = SimpleNamespace(
        temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, logprobs=None,
        logprob_token_ids=None, repetition_penalty=1.0, frequency_penalty=0.0,
        presence_penalty=0.0, allowed_token_ids=None, logit_bias=None, min_tokens=0,
        all_stop_token_ids=set(), bad_words_token_ids=None,
    )  # fmt: skip
    if penalized:
        kinds = rng.sample(["repetition", "frequency", "presence"], rng.randint(1, 3))
        if "repetition" in kinds:
            p.repetition_penalty = rng.choice([0.8, 1.3])
        if "frequency" in kinds:
            p.frequency_penalty = rng.choice([-0.5, 0.7])
        if "presence" in kinds:
            p.presence_penalty = rng.choice([-0.4, 1.5])
    return p


class Engine022:
    """One root's request state, sampler and the model runner's methods that touch them
    (v0.22.0)."""

    MASK_SHARE = 0.0  # its post_update has no -1 entries

    def __init__(self, m: SimpleNamespace):
        self.m = m
        with m.root.active():
            self.rs = self._request_state()
            self.sampler = m.sampler.Sampler(
                max_num_reqs=MAX_NUM_REQS, vocab_size=VOCAB, device=torch.device("cpu"),
                req_states=self.rs, logprobs_mode="raw_logprobs", **self.sampler_args(),
            )  # fmt: skip
        self.runner = SimpleNamespace(
            req_states=self.rs,
            sampler=self.sampler,
            encoder_cache=None,
            prompt_logprobs_worker=None,
            lora_state=SimpleNamespace(remove_request=lambda req_id: None),
            is_last_pp_rank=True,
            **self.runner_parts(),
        )

    def sampler_args(self) -> dict:
        return {}

    def runner_parts(self) -> dict:
        """The model runner's attributes this release's methods also reach."""
        return {"model_state": SimpleNamespace(postprocess_state=lambda batch, num_sampled: None)}

    def _request_state(self):
        return self.m.states.RequestState(
            max_num_reqs=MAX_NUM_REQS,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_NUM_REQS * (MAX_DRAFTS + 1),
            num_speculative_steps=MAX_DRAFTS,
            vocab_size=VOCAB,
            device=torch.device("cpu"),
        )

    @property
    def penalties(self):
        return self.sampler.penalties_state

    def remove(self, req_id: str) -> None:
        with self.m.root.active():
            self.m.runner.GPUModelRunner._remove_request(self.runner, req_id)

    def add(self, req_id: str, prompt_len: int, tokens: list[int], params) -> None:
        with self.m.root.active():
            self.rs.add_request(req_id, prompt_len, tokens, len(tokens))
            self.sampler.add_request(self.rs.req_id_to_index[req_id], prompt_len, params)

    def apply_staged_writes(self) -> None:
        with self.m.root.active():
            self.rs.apply_staged_writes()
            self.sampler.apply_staged_writes()

    def decode(self, step: dict) -> torch.Tensor:
        """Penalize the step's logits, then post-update with its accepted tokens."""
        ids = step["req_ids"]
        idx = [self.rs.req_id_to_index[r] for r in ids]
        drafts = step["drafts"]
        expanded = [i for i, d in zip(idx, drafts, strict=True) for _ in range(len(d) + 1)]
        local_pos = [p for d in drafts for p in range(len(d) + 1)]
        input_ids = [t for last, d in zip(step["last"], drafts, strict=True) for t in [last, *d]]
        logits = step["logits"].clone()
        counts = [len(d) + 1 for d in drafts]
        sampled = torch.zeros(len(ids), MAX_DRAFTS + 1, dtype=torch.int64)
        for row, toks in enumerate(step["accepted"]):
            sampled[row, : len(toks)] = torch.tensor(toks)
        num_sampled = torch.tensor([len(t) for t in step["accepted"]], dtype=torch.int32)
        num_rejected = torch.tensor(counts, dtype=torch.int32) - num_sampled
        query_start_loc = torch.tensor(np.cumsum([0, *counts]), dtype=torch.int32)
        # post_update's batch -> request map: -1 where the step skips the request.
        post_idx = [-1 if skip else i for i, skip in zip(idx, step["skipped"], strict=True)]
        with self.m.root.active():
            self._penalize(logits, idx, expanded, input_ids, local_pos)
            self._post_update(post_idx, sampled, num_sampled, num_rejected, query_start_loc)
        return logits

    def _penalize(self, logits, idx, expanded, input_ids, local_pos) -> None:
        self.penalties.apply_penalties(
            logits,
            torch.tensor(expanded, dtype=torch.int32),
            np.asarray(idx, dtype=np.int32),
            torch.tensor(input_ids, dtype=torch.int32),
            torch.tensor(local_pos, dtype=torch.int32),
        )

    def _post_update(self, idx, sampled, num_sampled, num_rejected, query_start_loc) -> None:
        batch = SimpleNamespace(
            idx_mapping=torch.tensor(idx, dtype=torch.int32), query_start_loc=query_start_loc
        )
        self.m.runner.GPUModelRunner.postprocess(
            self.runner, batch, sampled, num_sampled, num_rejected
        )


class Engine033(Engine022):
    """The same calls on v0.33.0: `Sampler` takes the vLLM config (its sub-states read only
    the reasoning config here), `PenaltiesState.apply` takes a `LogitsContext`,
    `_remove_request` and `postprocess_sampled` reach the model state, pooling runner and PP
    handler (none here) and the post-update takes -1 entries."""

    MASK_SHARE = 0.15

    def sampler_args(self) -> dict:
        return {"vllm_config": SimpleNamespace(reasoning_config=None)}

    def runner_parts(self) -> dict:
        return {
            "pooling_runner": None,
            "pp_handler": None,
            "model_state": SimpleNamespace(
                remove_request=lambda req_id: None,
                postprocess_state=lambda idx_mapping, num_sampled, num_computed: None,
            ),
        }

    def add(self, req_id: str, prompt_len: int, tokens: list[int], params) -> None:
        with self.m.root.active():
            self.rs.add_request(
                req_id, prompt_len, tokens, num_computed_tokens=len(tokens),
                max_tokens=MAX_MODEL_LEN - prompt_len,
            )  # fmt: skip
            self.sampler.add_request(self.rs.req_id_to_index[req_id], params)

    def _penalize(self, logits, idx, expanded, input_ids, local_pos) -> None:
        iface = importlib.import_module(f"{GPU}.sample.logits_processor.interface")
        n = len(expanded)
        ctx = iface.LogitsContext(
            expanded_idx_mapping=torch.tensor(expanded, dtype=torch.int64),
            idx_mapping=torch.tensor(idx, dtype=torch.int64),
            idx_mapping_np=np.asarray(idx, dtype=np.int64),
            expanded_local_pos=torch.tensor(local_pos, dtype=torch.int32),
            input_ids=torch.tensor(input_ids, dtype=torch.int32),
            pos=torch.zeros(n, dtype=torch.int64),  # not read by the penalties
            seq_lens_upper_bound_np=np.zeros(len(idx), dtype=np.int32),
        )
        assert self.penalties.apply(logits, ctx) is logits

    def _post_update(self, idx, sampled, num_sampled, num_rejected, query_start_loc) -> None:
        self.m.runner.GPUModelRunner.postprocess_sampled(
            self.runner,
            torch.tensor(idx, dtype=torch.int64),
            sampled,
            num_sampled,
            num_rejected,
            query_start_loc,
        )


class Scenario:
    """The random events of one run, the same for both engines (the test's own bookkeeping of
    each request's tokens decides what a resumed request re-sends)."""

    def __init__(self, seed: int, penalty_share: float, mask_share: float = 0.0):
        self.rng = random.Random(seed)
        self.share = penalty_share
        self.mask_share = mask_share
        self.live: dict[str, dict] = {}
        self.preempted: dict[str, dict] = {}
        self.next_id = 0

    def _new(self) -> tuple[str, dict]:
        rng = self.rng
        req_id, self.next_id = f"r{self.next_id}", self.next_id + 1
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 20))]
        params = make_params(rng, rng.random() < self.share)
        return req_id, {"prompt_len": len(prompt), "tokens": prompt, "params": params}

    def removals(self) -> list[str]:
        gone = [r for r in self.live if self.rng.random() < 0.15]
        for req_id in gone:
            req = self.live.pop(req_id)
            room = len(req["tokens"]) < MAX_MODEL_LEN - 2 * (MAX_DRAFTS + 1)
            if room and self.rng.random() < 0.4:
                self.preempted[req_id] = req
        return gone

    def additions(self) -> list[tuple[str, dict]]:
        added = []
        for req_id in [r for r in self.preempted if self.rng.random() < 0.5]:
            added.append((req_id, self.preempted.pop(req_id)))
        while len(self.live) + len(added) + len(self.preempted) < MAX_NUM_REQS:
            if self.rng.random() < 0.3:
                break
            added.append(self._new())
        self.live.update(added)
        return added

    def decode_step(self) -> dict:
        rng = self.rng
        ids = [r for r in self.live if len(self.live[r]["tokens"]) < MAX_MODEL_LEN - 5]
        drafts = [[rng.randrange(VOCAB) for _ in range(rng.randint(0, MAX_DRAFTS))] for _ in ids]
        accepted, skipped = [], []
        for req_id, d in zip(ids, drafts, strict=True):
            keep = d[: rng.randint(0, len(d))]
            toks = [*keep, rng.randrange(VOCAB)]
            accepted.append(toks)
            # A request the post-update skips (-1) commits none of them.
            skip = self.mask_share > 0 and rng.random() < self.mask_share
            skipped.append(skip)
            if not skip:
                self.live[req_id]["tokens"] = self.live[req_id]["tokens"] + toks
        n = sum(len(d) + 1 for d in drafts)
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        logits = torch.round(torch.randn(n, VOCAB, generator=g) * 6) / 2  # ties and signs
        last = [
            self.live[r]["tokens"][-1 if s else -len(a) - 1]
            for r, a, s in zip(ids, accepted, skipped, strict=True)
        ]
        return {"req_ids": ids, "drafts": drafts, "accepted": accepted, "skipped": skipped,
                "logits": logits, "last": last}  # fmt: skip


def run_scenario(mods, seed: int, steps: int = 14, share: float = 0.5) -> dict[str, int]:
    """Both engines through one scenario; AssertionError at the first differing step. Returns
    how much of the path it took (steps whose logits the penalties changed, requests resumed
    with outputs, draft positions)."""
    base, new = mods.pristine.engine(mods.pristine), mods.patched.engine(mods.patched)
    scenario = Scenario(seed, share, mods.mask_share)
    seen = {"penalized steps": 0, "resumed": 0, "drafts": 0, "skipped": 0}
    for step_no in range(steps):
        for req_id in scenario.removals():
            base.remove(req_id)
            new.remove(req_id)
        for req_id, req in scenario.additions():
            tokens = list(req["tokens"])
            seen["resumed"] += len(tokens) > req["prompt_len"]
            base.add(req_id, req["prompt_len"], tokens, req["params"])
            new.add(req_id, req["prompt_len"], tokens, req["params"])
        base.apply_staged_writes()
        new.apply_staged_writes()
        live_penalized = sum(
            1 for r in scenario.live if mods.patched.pen.use_penalty(scenario.live[r]["params"])
        )
        assert new.penalties.num_rows_in_use == live_penalized, step_no
        step = scenario.decode_step()
        if not step["req_ids"]:
            continue
        want, got = base.decode(step), new.decode(step)
        diff = (want.view(torch.int32) != got.view(torch.int32)).nonzero()
        assert diff.numel() == 0, (
            f"seed {seed} step {step_no}: first differing (token, id) {diff[0].tolist()}"
        )
        seen["penalized steps"] += not torch.equal(want, step["logits"])
        seen["drafts"] += sum(len(d) for d in step["drafts"])
        seen["skipped"] += sum(step["skipped"])
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_penalized_logits_match_upstream_through_finish_preempt_resume_and_drafts(mods, seed):
    seen = run_scenario(mods, seed, share=[0.5, 0.2, 1.0][seed % 3])
    assert seen["penalized steps"] > 0 and seen["drafts"] > 0, seen
    assert (seen["skipped"] > 0) == (mods.mask_share > 0), seen
    if seed < 3:  # the first seeds resume requests (the scenarios are fixed by their seed)
        assert seen["resumed"] > 0, seen


def test_no_penalty_request_takes_no_rows(mods):
    engine = mods.patched.engine(mods.patched)
    scenario = Scenario(7, penalty_share=0.0)
    for _ in range(3):
        for req_id, req in scenario.additions():
            engine.add(req_id, req["prompt_len"], list(req["tokens"]), req["params"])
        engine.apply_staged_writes()
        step = scenario.decode_step()
        engine.decode(step)
    assert engine.penalties.num_rows == 0
    assert engine.penalties.output_bin_counts.numel() == 0
    assert engine.penalties.prompt_bin_mask.numel() == 0


def test_rows_grow_by_doubling_and_are_reused(mods):
    engine = mods.patched.engine(mods.patched)
    params = make_params(random.Random(0), penalized=True)
    for i in range(9):
        engine.add(f"p{i}", 2, [1, 2], params)
    engine.apply_staged_writes()
    assert engine.penalties.num_rows == 16 and engine.penalties.num_rows_in_use == 9
    engine.remove("p3")
    engine.add("q", 2, [3, 4], params)
    engine.apply_staged_writes()
    assert engine.penalties.num_rows == 16 and engine.penalties.num_rows_in_use == 9


def test_kernel_warmup_takes_few_penalty_rows(mods, pin):
    """The kernel warm-up (v0.22.0: after the KV cache is sized; v0.33.0 also the profile run's
    warmup-parameter pass, which sizes it) gives up to max_num_seqs requests
    `SamplingParams.for_sampler_warmup()`; patched, only the first WARMUP_PENALTY_REQS of them
    carry penalties, so the rows they take stay that few (not max_num_reqs)."""
    home = {"0.22.0": "warmup", "0.33.0": "sample.penalties"}[pin]
    with mods.patched.root.active():
        warmup = importlib.import_module(f"{GPU}.{home}")
    engine = mods.patched.engine(mods.patched)
    params = warmup.warmup_sampling_params(MAX_NUM_REQS)
    for i, p in enumerate(params):
        engine.add(f"_warmup_{i}_", 2, [1, 2], p)
    engine.apply_staged_writes()
    assert engine.penalties.num_rows_in_use == warmup.WARMUP_PENALTY_REQS
    assert engine.penalties.num_rows == warmup.WARMUP_PENALTY_REQS < MAX_NUM_REQS
    assert all(p.top_k == 50 and p.logprobs == 5 and p.min_tokens == 2 for p in params)


# ------------------------------------------------------------------ mutants


def _bincount_without_clearing(pen):
    def bincount(idx, rows, all_token_ids, prompt_len, prefill_len, mask, counts, max_len):
        pen._bincount_kernel[(idx.shape[0], pen.triton.cdiv(max_len, 1024))](
            idx, rows, all_token_ids, all_token_ids.stride(0), prompt_len, prefill_len,
            mask, mask.stride(0), counts, counts.stride(0), BLOCK_SIZE=1024,
        )  # fmt: skip

    return bincount


def _post_update_counting_drafts_twice(batch):
    original = batch.post_update

    def post_update(idx_mapping, computed, last, penalty_row, counts, sampled, num_sampled,
                    *rest):  # fmt: skip
        original(idx_mapping, computed, last, penalty_row, counts, sampled, num_sampled, *rest)
        if counts is None:
            return
        for i, req_idx in enumerate(idx_mapping.tolist()):
            if req_idx < 0:
                continue
            row = int(penalty_row[req_idx])
            if row >= 0:
                for token in sampled[i, : int(num_sampled[i]) - 1].tolist():
                    counts[row, token] += 1

    return post_update


def _resume_without_rebuild(pen):
    original = pen.PenaltiesState.apply_staged_writes

    def apply_staged_writes(self):
        prefill = self.req_states.prefill_len.np
        prompt = self.req_states.prompt_len.np
        self._new_penalties_reqs[:] = [
            i for i in self._new_penalties_reqs if prefill[i] == prompt[i]
        ]
        original(self)

    return apply_staged_writes


MUTANTS = {
    "reused row not cleared": lambda m: (m.pen, "bincount", _bincount_without_clearing(m.pen)),
    "accepted draft counted twice": lambda m: (
        m.runner,
        "post_update",
        _post_update_counting_drafts_twice(m.batch),
    ),
    "resumed request keeps its row's stale counts": lambda m: (
        m.pen.PenaltiesState,
        "apply_staged_writes",
        _resume_without_rebuild(m.pen),
    ),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_check_fails_on_a_mutant(mods, mutant):
    target, name, replacement = MUTANTS[mutant](mods.patched)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(target, name, replacement)
        with pytest.raises(AssertionError, match="first differing"):
            for seed in range(6):
                run_scenario(mods, seed, share=1.0)
