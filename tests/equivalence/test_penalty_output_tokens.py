"""Penalty output tokens: the output-token tensor built from InputBatch.token_ids_cpu.

Pristine: `apply_all_penalties` turns the B output lists into a padded [B, L] tensor with
`make_tensor_with_pad` every step. Patched: `OutputTokensTensorBuilder.build` copies numpy
slices of the persistent batch's `token_ids_cpu` into a staging buffer, falls back to the
upstream path for row objects that are not the batch's live lists, and async placeholder
repair (`InputBatch.update_async_output_token_ids`) writes the sampled ids back into
`token_ids_cpu`.

Checked bit-exact (torch.equal, same dtype/shape): the output-token tensor and the
penalized logits, on randomized batches driven through a real patched `InputBatch`
(token ids, prompt lengths, async -1 placeholders repaired by the patched method,
shrinking after rejection / KV discard) plus named edge cases.
"""

from __future__ import annotations

import inspect
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

VOCAB = 97
MAX_MODEL_LEN = 640


@pytest.fixture(scope="module")
def _opaque_types_once():
    """Let both roots import `vllm.utils.torch_utils` (same workaround as
    test_pooling_prompt_ids.py; candidate for tests/equivalence/conftest.py).

    On torch >= 2.11 that module registers `LayerName` as a torch opaque type by
    qualified name, so the second root's import fails with "already registered". The
    second class is mapped to the first one's type info (no custom ops or
    torch.compile run here).
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
        yield


@pytest.fixture(scope="module")
def _custom_ops_once(_opaque_types_once, pristine, patched):
    """Let both roots import modules that register `torch.ops.vllm.*` custom ops: the
    second registration of an op is skipped (none of them is called here)."""
    import importlib
    import inspect

    for root in (pristine, patched):
        with root.active():
            tu = importlib.import_module("vllm.utils.torch_utils")
            if hasattr(tu, "PIN_MEMORY"):  # 0.33.0; no accelerator here, so never pin
                tu.PIN_MEMORY = False
            original = tu.direct_register_custom_op
            if getattr(original, "_patchbench_once", False):
                continue
            signature = inspect.signature(original)

            def register_once(*args, _orig=original, _sig=signature, _tu=tu, **kwargs):
                bound = _sig.bind(*args, **kwargs)
                lib = bound.arguments.get("target_lib") or _tu.vllm_lib
                if hasattr(getattr(torch.ops, lib.ns), bound.arguments["op_name"]):
                    return None
                return _orig(*args, **kwargs)

            register_once._patchbench_once = True
            tu.direct_register_custom_op = register_once
    yield


@pytest.fixture(scope="module")
def mods(_custom_ops_once, pristine, patched):
    pr_pen = pristine.load("vllm.v1.sample.ops.penalties")
    pa_pen = patched.load("vllm.v1.sample.ops.penalties")
    # No accelerator here: the upstream path must not try to pin its CPU tensor
    # (0.22.0 asks is_pin_memory_available(), 0.33.0 reads PIN_MEMORY).
    for mod in (pr_pen, pa_pen):
        if hasattr(mod, "is_pin_memory_available"):
            mod.is_pin_memory_available = lambda: False
        if hasattr(mod, "PIN_MEMORY"):
            mod.PIN_MEMORY = False
    return SimpleNamespace(
        pr_pen=pr_pen,
        pa_pen=pa_pen,
        pa_ib=patched.load("vllm.v1.worker.gpu_input_batch"),
        pristine=pristine,
        patched=patched,
    )


class Batch:
    """A patched InputBatch filled the way the model runner fills it (prompt + output
    tokens in token_ids_cpu, num_prompt_tokens, num_tokens_no_spec, req_output_token_ids),
    with the lists as the source of truth for the pristine reference."""

    def __init__(
        self,
        mods,
        num_reqs: int,
        rng: random.Random,
        max_num_reqs: int = 256,
        cuda_staging: bool = False,
    ):
        self.mods = mods
        self.rng = rng
        kwargs = dict(
            max_num_reqs=max_num_reqs,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN,
            device=torch.device("cpu"),
            vocab_size=VOCAB,
            block_sizes=[16],
        )
        params = inspect.signature(mods.pa_ib.InputBatch).parameters
        if "pin_memory" in params:  # 0.22.0
            kwargs["pin_memory"] = False
        if "kernel_block_sizes" in params:  # 0.22.0
            kwargs["kernel_block_sizes"] = [16]
        if "max_num_blocks_per_req" in params:  # 0.33.0: required
            kwargs["max_num_blocks_per_req"] = [MAX_MODEL_LEN // 16]
        with mods.patched.active():
            self.ib = mods.pa_ib.InputBatch(**kwargs)
        assert self.ib.output_tokens_builder is not None
        if cuda_staging:
            self.ib.output_tokens_builder = _cuda_staging_builder(self.ib)
        # Stale garbage everywhere: anything read outside the live range shows up.
        self.ib.token_ids_cpu[:] = np.asarray(
            [rng.randrange(VOCAB) for _ in range(MAX_MODEL_LEN)], dtype=np.int32
        )
        self.prompts: list[list[int]] = []
        for i in range(num_reqs):
            self.add(i, rng.randint(1, 40), [])

    def add(self, i: int, prompt_len: int, output: list[int]) -> None:
        ib = self.ib
        prompt = [self.rng.randrange(VOCAB) for _ in range(prompt_len)]
        if i == len(ib.req_output_token_ids):
            ib.req_output_token_ids.append(output)
            ib._req_ids.append(f"req-{i}")
            self.prompts.append(prompt)
        else:
            ib.req_output_token_ids[i] = output
            self.prompts[i] = prompt
        ib.req_id_to_index[f"req-{i}"] = i
        self._invalidate(i)
        ib.num_prompt_tokens[i] = prompt_len
        ib.token_ids_cpu[i, :prompt_len] = prompt
        ib.token_ids_cpu[i, prompt_len : prompt_len + len(output)] = output
        ib.num_tokens_no_spec[i] = prompt_len + len(output)

    @property
    def outputs(self) -> list[list[int]]:
        return self.ib.req_output_token_ids

    def append(self, i: int, tokens: list[int]) -> None:
        """_bookkeeping_sync: sampled ids (or [-1] under async scheduling)."""
        ib = self.ib
        start = int(ib.num_tokens_no_spec[i])
        ib.token_ids_cpu[i, start : start + len(tokens)] = tokens
        ib.num_tokens_no_spec[i] = start + len(tokens)
        self.outputs[i].extend(tokens)

    def shrink(self, i: int, keep: int) -> None:
        """_update_states: rejected / discarded tokens (KV-load failure)."""
        del self.outputs[i][keep:]
        self.ib.num_tokens_no_spec[i] = int(self.ib.num_prompt_tokens[i]) + keep
        self._invalidate(i)

    def _invalidate(self, i: int) -> None:
        # Series with an incremental builder: the runner reports truncations.
        invalidate = getattr(self.ib.output_tokens_builder, "invalidate", None)
        if invalidate is not None:
            invalidate(i)

    def repair_placeholders(self, sampled: dict[int, int]) -> None:
        """Run the patched update_async_output_token_ids for rows with a trailing -1."""
        ib = self.ib
        n = len(self.outputs)
        prev = torch.full((n, 1), -1, dtype=torch.int32)
        for i, tok in sampled.items():
            prev[i, 0] = tok
        ib.sampling_metadata = SimpleNamespace(output_token_ids=self.outputs)
        ib.prev_req_id_to_index = {f"req-{i}": i for i in sampled}
        ib.sampled_token_ids_cpu = prev
        ib.async_copy_ready_event = SimpleNamespace(synchronize=lambda: None)
        with self.mods.patched.active():
            ib.update_async_output_token_ids()

    def random_step(self, async_sched: bool) -> None:
        rng = self.rng
        sampled = {}
        for i, out in enumerate(self.outputs):
            if async_sched and out and out[-1] == -1 and rng.random() < 0.9:
                sampled[i] = rng.randrange(VOCAB)
        if sampled:
            self.repair_placeholders(sampled)
        for i, out in enumerate(self.outputs):
            room = MAX_MODEL_LEN - int(self.ib.num_prompt_tokens[i]) - len(out) - 4
            r = rng.random()
            if r < 0.08 and out:
                self.shrink(i, rng.randrange(len(out)))
            elif r < 0.12:
                continue
            elif room > 0:
                if async_sched:
                    self.append(i, [-1])
                else:
                    k = min(room, rng.randint(1, 4))
                    self.append(i, [rng.randrange(VOCAB) for _ in range(k)])


class _HostEvent:
    """Stands in for torch.cuda.Event: on CPU the "device copy" is the staging view itself."""

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


def _cuda_staging_builder(ib):
    """The builder the CUDA model runner gets (device 'cuda': two staging buffers used in
    turn, whole rows handed to the copy), built for a CPU run: `build(..., device=cpu)`
    returns a view of the staging rows instead of a device copy."""
    builder = ib.output_tokens_builder
    twin = type(builder)(
        ib.token_ids_cpu,
        ib.num_prompt_tokens,
        ib.num_tokens_no_spec,
        ib.req_output_token_ids,
        torch.device("cuda"),
        False,
    )
    assert twin.use_cuda_staging and len(twin._buffers) == 2
    return twin


@pytest.fixture(params=[False, True], ids=["host-staging", "cuda-staging"])
def cuda_staging(request, monkeypatch):
    """Runs a test with the CPU builder and with the double-buffered CUDA builder."""
    if request.param:
        monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    return request.param


def _pristine_tensor(mods, outputs):
    with mods.pristine.active():
        t = mods.pr_pen._convert_to_tensors(outputs, VOCAB, torch.device("cpu"))
        return t.masked_fill_(t == -1, VOCAB).clone()


def _patched_tensor(mods, batch, outputs):
    with mods.patched.active():
        t = batch.ib.output_tokens_builder.build(outputs, VOCAB, torch.device("cpu"))
    return None if t is None else t.clone()


def _penalized(mods, root, outputs, seed, builder=None):
    n = len(outputs)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, VOCAB, generator=g)
    prompt = torch.randint(0, VOCAB + 1, (n, 7), generator=g)
    pres = torch.rand(n, generator=g) * 2 - 1
    freq = torch.rand(n, generator=g) * 2 - 1
    rep = torch.rand(n, generator=g) + 0.5
    with root.active():
        mod = mods.pr_pen if root is mods.pristine else mods.pa_pen
        kwargs = {} if builder is None else {"output_tokens_builder": builder}
        return mod.apply_all_penalties(logits, prompt, pres, freq, rep, outputs, **kwargs)


def _check(mods, batch, seed=0, expect_fast=True):
    outputs = batch.outputs
    ref = _pristine_tensor(mods, outputs)
    got = _patched_tensor(mods, batch, outputs)
    if expect_fast:
        assert got is not None, "fast path not taken for live rows"
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert torch.equal(got, ref)
    ref_logits = _penalized(mods, mods.pristine, outputs, seed)
    got_logits = _penalized(mods, mods.patched, outputs, seed, batch.ib.output_tokens_builder)
    assert torch.equal(got_logits, ref_logits)


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("seed", range(4))
def test_random_streams(mods, cuda_staging, seed, async_sched):
    rng = random.Random(1000 * seed + async_sched)
    batch = Batch(mods, rng.randint(1, 24), rng, cuda_staging=cuda_staging)
    for step in range(60):
        batch.random_step(async_sched)
        _check(mods, batch, seed=step)


@pytest.mark.parametrize("num_reqs", [1, 256])
def test_batch_size(mods, num_reqs):
    rng = random.Random(num_reqs)
    batch = Batch(mods, num_reqs, rng)
    for _ in range(5):
        for i in range(num_reqs):
            batch.append(i, [rng.randrange(VOCAB) for _ in range(rng.randint(0, 30))])
        _check(mods, batch)


def test_empty_outputs(mods):
    batch = Batch(mods, 5, random.Random(1))
    assert all(len(o) == 0 for o in batch.outputs)
    _check(mods, batch)
    assert _patched_tensor(mods, batch, batch.outputs).shape == (5, 0)


def test_all_placeholders(mods):
    rng = random.Random(2)
    batch = Batch(mods, 6, rng)
    for i in range(6):
        batch.append(i, [-1] * rng.randint(1, 5))
    _check(mods, batch)
    assert bool((_patched_tensor(mods, batch, batch.outputs) == VOCAB).all())


def test_interior_placeholders_never_repaired(mods):
    # Async rows whose outputs were not needed for a while keep interior -1s.
    rng = random.Random(3)
    batch = Batch(mods, 4, rng)
    for i in range(4):
        batch.append(i, [rng.randrange(VOCAB), -1, -1, rng.randrange(VOCAB), -1])
    _check(mods, batch)


def test_shrink_after_rejection(mods):
    rng = random.Random(4)
    batch = Batch(mods, 3, rng)
    for i in range(3):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(50)])
    _check(mods, batch)
    batch.shrink(0, 10)
    batch.shrink(1, 0)
    _check(mods, batch)
    batch.append(0, [5, 6])
    _check(mods, batch)


def test_shrink_without_invalidate_copies_row_whole(mods):
    """The builder's own guard: a list that got shorter is copied whole on its next build,
    even when no caller reported the truncation (invalidate)."""
    rng = random.Random(14)
    batch = Batch(mods, 2, rng)
    for i in range(2):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(40)])
    _check(mods, batch)
    del batch.outputs[0][12:]
    batch.ib.num_tokens_no_spec[0] = int(batch.ib.num_prompt_tokens[0]) + 12
    _check(mods, batch)
    batch.append(0, [rng.randrange(VOCAB) for _ in range(3)])
    _check(mods, batch)


def test_async_write_back(mods):
    # Placeholder repair must update token_ids_cpu, which the fast path reads.
    rng = random.Random(5)
    batch = Batch(mods, 3, rng)
    for i in range(3):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(4)] + [-1])
    batch.repair_placeholders({0: 11, 1: 22, 2: 33})
    assert [o[-1] for o in batch.outputs] == [11, 22, 33]
    for i, tok in enumerate([11, 22, 33]):
        pos = int(batch.ib.num_prompt_tokens[i]) + 4
        assert int(batch.ib.token_ids_cpu[i, pos]) == tok
    _check(mods, batch)


def test_foreign_rows_fall_back(mods):
    rng = random.Random(6)
    batch = Batch(mods, 4, rng)
    for i in range(4):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(9)])
    # Equal content but other list objects (e.g. combined with spec tokens): the
    # builder must refuse and the upstream path must give the same result.
    foreign = [list(o) for o in batch.outputs]
    foreign[2] = foreign[2] + [7, 8]  # differs from token_ids_cpu
    assert _patched_tensor(mods, batch, foreign) is None
    assert _patched_tensor(mods, batch, [batch.outputs[0], foreign[1]]) is None
    ref = _penalized(mods, mods.pristine, foreign, 1)
    got = _penalized(mods, mods.patched, foreign, 1, batch.ib.output_tokens_builder)
    assert torch.equal(got, ref)
    # More rows than the batch holds: fallback as well.
    assert _patched_tensor(mods, batch, batch.outputs + [[1, 2]]) is None


def test_inconsistent_bookkeeping_row_uses_list(mods):
    rng = random.Random(7)
    batch = Batch(mods, 3, rng)
    for i in range(3):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(12)])
    batch.outputs[1].append(3)  # list grew without token_ids_cpu bookkeeping
    _check(mods, batch)


def test_staging_reused_and_grown(mods, cuda_staging):
    rng = random.Random(8)
    batch = Batch(mods, 8, rng, cuda_staging=cuda_staging)
    for length in (3, 200, 1, 400, 0, 17):
        for i in range(8):
            batch.shrink(i, 0)
            batch.append(i, [rng.randrange(VOCAB) for _ in range(rng.randint(0, length))])
        _check(mods, batch)


def test_truncate_and_regrow_between_builds(mods, cuda_staging):
    # A row's list is cut and grows past its old length before the next build
    # (no penalty request in between): no stale ids may survive in any buffer.
    rng = random.Random(9)
    batch = Batch(mods, 4, rng, cuda_staging=cuda_staging)
    for i in range(4):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(30)])
    for _ in range(3):  # every staging buffer has seen the rows
        _check(mods, batch)
    batch.shrink(1, 5)
    batch.append(1, [rng.randrange(VOCAB) for _ in range(40)])
    batch.shrink(2, 0)
    batch.append(2, [rng.randrange(VOCAB) for _ in range(31)])
    for _ in range(3):
        _check(mods, batch)
        batch.append(3, [rng.randrange(VOCAB)])


def test_rows_swapped_and_moved(mods, cuda_staging):
    # condense()/swap_states(): lists change rows; every row must follow its list.
    rng = random.Random(10)
    batch = Batch(mods, 6, rng, cuda_staging=cuda_staging)
    for i in range(6):
        batch.append(i, [rng.randrange(VOCAB) for _ in range(rng.randint(0, 40))])
    _check(mods, batch)
    ib = batch.ib
    with mods.patched.active():
        ib.swap_states(0, 5)
    batch.prompts[0], batch.prompts[5] = batch.prompts[5], batch.prompts[0]
    for _ in range(3):
        _check(mods, batch)
        for i in range(6):
            batch.append(i, [rng.randrange(VOCAB) for _ in range(rng.randint(0, 3))])
