"""Device-resident V1 penalty state vs upstream's penalties given the same history (0.22.0
patch 0011, 0.33.0 patch 0008).

Pristine: `apply_all_penalties` with the prompt tensor and the output lists as upstream sees
them when it applies penalties (after the async placeholder repair). Patched: a real patched
`InputBatch` (CPU tensors, state switched on) driven the way the model runner drives it:
requests added, finished, preempted and resumed (the list comes back from the scheduler's
token ids), `condense()`, `swap_states()` (attention-backend reordering), partial prefills
whose samples are discarded, sync or async scheduling (the host lists get -1 placeholders that
nothing repairs, since penalties no longer ask for them), outputs truncated after a KV-load
failure (`reset_row`, as `_update_states` calls it); after each step's sampling
`PenaltyState.record_sampled` counts the sampled ids. The penalized logits come from
`PenaltyState.apply`: on CPU its torch path (upstream's own ops on the counts read from the
state), and its Triton kernel (the CUDA path) under the Triton interpreter against the dense
path with the CUDA repetition op's arithmetic (as test_penalties_one_pass.py).

The kernel touches only the ids a slot lists (the whole vocabulary for rows whose presence or
frequency penalty is negative, -0.0 or not finite); its lists are kept by `record_sampled`
(torch ops on CPU, one Triton kernel on CUDA: both are run here, the kernel interpreted).

Checked bit for bit (int views) on randomized sequences, float32 and bfloat16; mutants of the
state (a swap that forgets its counts, a counted placeholder, a resumption keeping stale
counts, a counted discarded sample, a discard mask skipped when the runner's host flag is
ignored, rows without a slot counted in slot 0 instead of the trash row, a sampled id never
listed, a rebuild that keeps a slot's old list, a kernel that walks only the listed ids of
rows with a negative or -0.0 penalty) must make the same sequences fail
(`test_mutant_is_detected`; `PATCHBENCH_PENALTY_STATE_MUTANT=<name>` applies one to every
test, for counting failures by hand).

On CUDA both kernels are launched through the patch's `KernelLauncher`, which calls the compiled
kernel of a known specialization directly. With a stand-in kernel it must take Triton's own path
for every new specialization (a misaligned tensor, another dtype, another int or constexpr) and
the compiled kernel only for a known one; launch keys that forget the alignment or the ints must
fail that (`test_launch_key_mutant_is_detected`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

try:  # a jit function needs triton.language among its globals (the kernel mutant's)
    import triton.language as tl  # noqa: F401
except ImportError:  # the kernel tests skip (see the one_pass fixture)
    tl = None

from tests.equivalence.test_penalties_one_pass import (  # noqa: F401  (fixtures)
    dense,
    one_pass,
)
from tests.equivalence.test_penalty_output_tokens import (  # noqa: F401  (fixtures)
    _custom_ops_once,
    _opaque_types_once,
    mods,
)

pytestmark = [
    # The Triton interpreter warns (numpy) at every scalar it indexes with.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:triton.runtime.interpreter"),
]

VOCAB = 97
MAX_MODEL_LEN = 512
MAX_NUM_REQS = 16
MUTANT_ENV = "PATCHBENCH_PENALTY_STATE_MUTANT"


# Mutants of the state (applied to the patched module's PenaltyState) -------------------


def _mutant_swap(cls, mp):
    """swap_states() moves the request but its row keeps the other request's counts."""
    mp.setattr(cls, "swap_rows", lambda self, i1, i2: None)


def _mutant_placeholder(cls, mp):
    """A -1 placeholder of a rebuilt list counts as the last vocabulary id."""
    original = cls._rebuild_source

    def rebuild_source(self, prompt_token_ids, output_token_ids):
        prompt, _ = original(self, prompt_token_ids, [])
        output = np.array(output_token_ids, dtype=np.int64) % self.vocab_size
        return prompt, output

    mp.setattr(cls, "_rebuild_source", rebuild_source)


def _mutant_resume(cls, mp):
    """A rebuilt slot keeps what it counted before (no zeroing): a resumed request (or the
    next owner of a freed slot) starts from stale counts."""
    original = cls._rebuild

    def rebuild(self, pending):
        fill = self.state.index_fill_
        self.state.index_fill_ = lambda dim, index, value: self.state
        try:
            original(self, pending)
        finally:
            self.state.index_fill_ = fill

    mp.setattr(cls, "_rebuild", rebuild)


def _mutant_discard(cls, mp):
    """The sample of a partial prefill (discarded by the runner) is counted."""
    original = cls.record_sampled

    def record_sampled(self, sampled, discard_mask, num_reqs, any_discarded=True):
        original(self, sampled, torch.zeros_like(discard_mask), num_reqs, any_discarded)

    mp.setattr(cls, "record_sampled", record_sampled)


def _mutant_discard_any(cls, mp):
    """The runner's host flag is ignored: the discard mask is never applied."""
    original = cls.record_sampled

    def record_sampled(self, sampled, discard_mask, num_reqs, any_discarded=True):
        original(self, sampled, discard_mask, num_reqs, False)

    mp.setattr(cls, "record_sampled", record_sampled)


def _mutant_trash(cls, mp):
    """Rows without a slot count their samples in slot 0 instead of the trash row."""
    original = cls._row_map

    def row_map(self):
        host = original(self)
        host[1][host[0] < 0] = 0
        return host

    mp.setattr(cls, "_row_map", row_map)


def _lists_kept_through(cls, mp, method: str):
    """`cls.<method>` leaves the slots' lists (`ids`, `num_ids`) as they were before it."""
    original = getattr(cls, method)

    def keeping_lists(self, *args, **kwargs):
        lists = None if self.ids is None else (self.ids.clone(), self.num_ids.clone())
        original(self, *args, **kwargs)
        if lists is not None:
            self.ids.copy_(lists[0])
            self.num_ids.copy_(lists[1])

    mp.setattr(cls, method, keeping_lists)


def _mutant_list_append(cls, mp):
    """A sampled id seen for the first time is counted but never listed."""
    _lists_kept_through(cls, mp, "record_sampled")


def _mutant_list_rebuild(cls, mp):
    """A rebuilt slot keeps the list of what it held before (a resumed request, or the
    next owner of a freed slot)."""
    _lists_kept_through(cls, mp, "_rebuild")


MUTANTS = {
    "swap": _mutant_swap,
    "placeholder": _mutant_placeholder,
    "resume": _mutant_resume,
    "discard": _mutant_discard,
    "discard-any": _mutant_discard_any,
    "trash": _mutant_trash,
    "list-append": _mutant_list_append,
    "list-rebuild": _mutant_list_rebuild,
}
# Mutants only the kernel can see (the torch path reads the counts, not the lists), and
# mutants of the kernel module itself (applied to the interpreted root's module).
KERNEL_MUTANTS = {"list-append", "list-rebuild"}


def _mutant_sparse_only(kernel_mod, mp):
    """The kernel walks only the listed ids of every row, also where a negative or -0.0
    penalty changes logits at ids with count 0 (-0.0 logits turn +0.0)."""
    triton = importlib.import_module("triton")

    @triton.jit
    def nan_only(penalty):
        return penalty != penalty

    mp.setattr(kernel_mod, "_changes_zero_counts", nan_only)


KERNEL_MODULE_MUTANTS = {"sparse-only": _mutant_sparse_only}


# Mutants of the deferred record (the CUDA path: a step's ids counted by the next penalty
# launch), applied to the state class and the interpreted module's PenaltyState.


def _mutant_pending_batch_change(state_cls, kernel_mod, mp):
    """A batch change does not count the pending ids first: the next launch counts them in
    the rows of the new map."""
    original = state_cls.flush

    def flush(self):
        self._batch_changed = False
        original(self)

    mp.setattr(state_cls, "flush", flush)


def _mutant_pending_twice(state_cls, kernel_mod, mp):
    """The penalty launch counts the pending ids and leaves them pending: counted again."""
    original = kernel_mod.PenaltyState._apply_one_pass

    def apply_one_pass(self, *args, **kwargs):
        pending = self._pending_ids, self._pending_rows
        out = original(self, *args, **kwargs)
        if pending[0] is not None:
            self._pending_ids, self._pending_rows = pending
        return out

    mp.setattr(kernel_mod.PenaltyState, "_apply_one_pass", apply_one_pass)


def _mutant_pending_dropped(state_cls, kernel_mod, mp):
    """The penalty launch ignores the pending ids: they are never counted."""
    original = kernel_mod.PenaltyState._apply_one_pass

    def apply_one_pass(self, *args, **kwargs):
        self._pending_ids = None
        return original(self, *args, **kwargs)

    mp.setattr(kernel_mod.PenaltyState, "_apply_one_pass", apply_one_pass)


DEFERRED_MUTANTS = {
    "pending-batch-change": _mutant_pending_batch_change,
    "pending-twice": _mutant_pending_twice,
    "pending-dropped": _mutant_pending_dropped,
}


@pytest.fixture(scope="module")
def state_mod(mods):  # noqa: F811
    return mods.patched.load("vllm.v1.sample.ops.penalty_state")


@pytest.fixture(autouse=True)
def _env_mutant(request, monkeypatch):
    name = os.environ.get(MUTANT_ENV)
    if name:
        state_mod = request.getfixturevalue("state_mod")
        MUTANTS[name](state_mod.PenaltyState, monkeypatch)


def _comparisons_typed_int1(mp: pytest.MonkeyPatch) -> None:
    """Triton 3.9's interpreter types a comparison's result as its operands (int64 for
    `slot >= 0`), so a scalar comparison splats to an int64 block and a mask built from it
    is refused ("mask has unsupported dtype"); compiled Triton (and 3.6's interpreter)
    types it int1. Retype comparison results as int1 (their data is already bool)."""
    interpreter = importlib.import_module("triton.runtime.interpreter")
    int1 = importlib.import_module("triton.language").int1
    builder = interpreter.InterpreterBuilder

    def typed_int1(original):
        def compare(self, lhs, rhs):
            result = original(self, lhs, rhs)
            if result.data.dtype != np.bool_:
                return result
            return interpreter.TensorHandle(result.data, int1)

        return compare

    for name in [n for n in dir(builder) if n.startswith(("create_icmp", "create_fcmp"))]:
        mp.setattr(builder, name, typed_int1(getattr(builder, name)))


@pytest.fixture(scope="module")
def kernel(one_pass):  # noqa: F811
    """The patched penalty_state module from one_pass's Triton-interpreter root."""
    with one_pass.root.active():
        mod = importlib.import_module("vllm.v1.sample.ops.penalty_state")
    with pytest.MonkeyPatch.context() as mp:
        _comparisons_typed_int1(mp)
        yield SimpleNamespace(root=one_pass.root, mod=mod)


# A persistent batch driven like GPUModelRunner drives it ---------------------------------


@dataclass
class Req:
    req_id: str
    prompt: list[int]
    params: tuple[float, float, float]  # presence, frequency, repetition
    history: list[int] = field(default_factory=list)  # what upstream's penalties see
    state: object = None  # CachedRequestState (its output list is the batch's)


class Runner:
    """A patched InputBatch plus the model runner's calls around it."""

    def __init__(self, mods, rng: random.Random, async_sched: bool, monkeypatch):  # noqa: F811
        self.mods, self.rng, self.async_sched = mods, rng, async_sched
        ib_mod = mods.pa_ib
        monkeypatch.setattr(ib_mod, "use_penalty_state", lambda device: True)
        kwargs = dict(
            max_num_reqs=MAX_NUM_REQS,
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN,
            device=torch.device("cpu"),
            vocab_size=VOCAB,
            block_sizes=[16],
        )
        params = inspect.signature(ib_mod.InputBatch).parameters
        if "pin_memory" in params:  # 0.22.0
            kwargs["pin_memory"] = False
        if "kernel_block_sizes" in params:  # 0.22.0
            kwargs["kernel_block_sizes"] = [16]
        if "max_num_blocks_per_req" in params:  # 0.33.0: required
            kwargs["max_num_blocks_per_req"] = [MAX_MODEL_LEN // 16]
        with mods.patched.active():
            self.ib = ib_mod.InputBatch(**kwargs)
            self.sampling_params = importlib.import_module("vllm.sampling_params")
        assert self.ib.penalty_state is not None
        self.running: dict[str, Req] = {}
        self.preempted: dict[str, Req] = {}
        self.next_id = 0

    # Scheduler-side events
    def _new_req(self) -> Req:
        rng = self.rng
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 30))]
        kind = rng.random()
        if kind < 0.25:
            params = (0.0, 0.0, 1.0)  # no penalty: no slot
        elif kind < 0.3:
            params = (-0.0, -0.0, 1.0)  # neither: the sign of zero still matters
        else:
            params = (
                rng.choice([0.0, rng.uniform(-2, 2)]),
                rng.choice([0.0, rng.uniform(-2, 2)]),
                rng.choice([1.0, rng.uniform(0.5, 2)]),
            )
        self.next_id += 1
        return Req(f"req-{self.next_id}", prompt, params)

    def _add(self, req: Req, output: list[int]) -> None:
        pres, freq, rep = req.params
        with self.mods.patched.active():
            sp = self.sampling_params.SamplingParams(
                temperature=1.0,
                presence_penalty=pres,
                frequency_penalty=freq,
                repetition_penalty=rep,
            )
            cls = self.mods.pa_ib.CachedRequestState
            req.state = cls(
                req_id=req.req_id,
                prompt_token_ids=req.prompt,
                mm_features=[],
                sampling_params=sp,
                generator=None,
                block_ids=([],),
                num_computed_tokens=len(req.prompt),
                output_token_ids=output,
            )
            self.ib.add_request(req.state)
        self.running[req.req_id] = req

    def schedule(self) -> None:
        """One _update_states: finish / preempt, truncate, add / resume, condense, reorder,
        refresh."""
        rng, ib = self.rng, self.ib
        for req_id in list(self.running):
            r = rng.random()
            if r < 0.06:
                del self.running[req_id]
                ib.remove_request(req_id)
            elif r < 0.12:
                self.preempted[req_id] = self.running.pop(req_id)
                ib.remove_request(req_id)
            elif r < 0.15 and not self.async_sched and self.running[req_id].history:
                self._truncate(self.running[req_id])
        for req_id in list(self.preempted):
            if len(self.running) < MAX_NUM_REQS and rng.random() < 0.3:
                self._resume(self.preempted.pop(req_id))
        while len(self.running) < MAX_NUM_REQS and rng.random() < 0.35:
            self._add(self._new_req(), [])
        ib.condense()
        for _ in range(rng.randint(0, 2)):
            if ib.num_reqs >= 2:
                i1, i2 = rng.sample(range(ib.num_reqs), 2)
                with self.mods.patched.active():
                    ib.swap_states(i1, i2)
        with self.mods.patched.active():
            ib.refresh_metadata()

    def _resume(self, req: Req) -> None:
        """Resumed after preemption: the scheduler sends the real token ids (async) or the
        worker kept its list (sync). Now and then the list holds -1 entries that upstream
        never repairs (it only repairs rows of the previous step): both sides treat them as
        padding."""
        output = list(req.history)
        if output and self.rng.random() < 0.3:
            for _ in range(self.rng.randint(1, 3)):
                output[self.rng.randrange(len(output))] = -1
            req.history = list(output)
        self._add(req, output)

    def _truncate(self, req: Req) -> None:
        """Tokens discarded after a sync KV-load failure (GPUModelRunner._update_states)."""
        keep = self.rng.randrange(len(req.history))
        del req.history[keep:]
        del req.state.output_token_ids[keep:]
        ib = self.ib
        index = ib.req_id_to_index[req.req_id]
        ib.num_tokens_no_spec[index] = ib.num_prompt_tokens[index] + keep
        ib.penalty_state.reset_row(
            index,
            ib.token_ids_cpu[index, : ib.num_prompt_tokens[index]],
            req.state.output_token_ids,
        )

    def sample(self) -> None:
        """The sampler's ids on the device, then _bookkeeping_sync on the host."""
        ib, rng = self.ib, self.rng
        n = ib.num_reqs
        sampled = torch.tensor([[rng.randrange(VOCAB)] for _ in range(n)], dtype=torch.int32)
        discard = torch.zeros(MAX_NUM_REQS, dtype=torch.bool)
        discard[:n] = torch.tensor([rng.random() < 0.1 for _ in range(n)])  # partial prefills
        ib.penalty_state.record_sampled(sampled, discard, n, bool(discard[:n].any()))
        for i, req_id in enumerate(ib.req_ids):
            req = self.running[req_id]
            if discard[i] or len(req.history) + len(req.prompt) >= MAX_MODEL_LEN - 1:
                continue
            token = int(sampled[i, 0])
            req.history.append(token)
            # Async scheduling appends a placeholder that nothing repairs.
            req.state.output_token_ids.append(-1 if self.async_sched else token)

    # Penalties
    def penalty_inputs(self):
        meta = self.ib.sampling_metadata
        reqs = [self.running[r] for r in self.ib.req_ids]
        width = max(len(r.prompt) for r in reqs)
        prompt = torch.full((len(reqs), width), VOCAB, dtype=torch.int64)
        for i, r in enumerate(reqs):
            prompt[i, : len(r.prompt)] = torch.tensor(r.prompt)
        histories = [list(r.history) for r in reqs]
        pens = (meta.presence_penalties, meta.frequency_penalties, meta.repetition_penalties)
        return meta, prompt, histories, pens


def _logits(seed: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, VOCAB, generator=g)
    logits[torch.rand(n, VOCAB, generator=g) < 0.03] = 0.0
    logits[torch.rand(n, VOCAB, generator=g) < 0.03] = -0.0
    return logits.to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _pristine(mods, logits, prompt, pens, histories):  # noqa: F811
    with mods.pristine.active():
        return mods.pr_pen.apply_all_penalties(logits, prompt, *pens, histories)


def _run(mods, monkeypatch, seed, async_sched, steps, check) -> int:  # noqa: F811
    """Drive one randomized sequence; `check(runner, step)` compares one step and returns
    whether it matched. Returns the number of mismatching steps."""
    rng = random.Random(seed * 2 + async_sched)
    runner = Runner(mods, rng, async_sched, monkeypatch)
    mismatches = 0
    for step in range(steps):
        runner.schedule()
        if runner.ib.num_reqs == 0:
            continue
        meta = runner.ib.sampling_metadata
        if not meta.no_penalties:
            assert meta.penalty_state is runner.ib.penalty_state
            # Penalties need neither the host lists nor the prompt tensor.
            assert meta.output_token_ids == [] and meta.prompt_token_ids is None
            mismatches += not check(runner, step)
        runner.sample()
    return mismatches


def _torch_check(mods, dtype):  # noqa: F811
    def check(runner, step):
        meta, prompt, histories, pens = runner.penalty_inputs()
        logits = _logits(step, len(histories), dtype)
        ref = _pristine(mods, logits.clone(), prompt, pens, histories)
        with mods.patched.active():
            got = meta.penalty_state.apply(logits.clone(), *pens)
        return torch.equal(_bits(got), _bits(ref))

    return check


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("seed", range(6))
def test_random_batch_ops_match_pristine(mods, monkeypatch, seed, async_sched, dtype):  # noqa: F811
    assert _run(mods, monkeypatch, seed, async_sched, 80, _torch_check(mods, dtype)) == 0


# The kernel's tiles: its defaults, and tiles small enough that the lists and the vocabulary
# here span several programs per row and several blocks per program.
TILES = {"default": {}, "small": {"block_size": 8, "num_parts": 3}}


def _kernel_check(mods, dense, kernel, tiles="default"):  # noqa: F811
    def check(runner, step):
        meta, prompt, histories, pens = runner.penalty_inputs()
        logits = _logits(step, len(histories), torch.float32)
        with mods.pristine.active():
            t = mods.pr_pen._convert_to_tensors(histories, VOCAB, torch.device("cpu"))
        t.masked_fill_(t == -1, VOCAB)
        ref = dense(logits.clone(), prompt, t, *pens)
        state = meta.penalty_state
        state.flush()
        with kernel.root.active():
            got = kernel.mod.PenaltyState._apply_one_pass(
                state, logits.clone(), *pens, **TILES[tiles]
            )
        return torch.equal(_bits(got), _bits(ref))

    return check


def _record_with_kernel(state_mod, kernel, monkeypatch, deferred: bool = False):
    """record_sampled on the CPU state dispatches to the CUDA path's Triton kernel
    (interpreted) instead of its torch ops; `deferred`: as on CUDA, the ids stay pending
    where nothing is discarded and the next penalty launch counts them."""

    def record_kernel(self, sampled, discard_mask, num_reqs):
        with kernel.root.active():
            kernel.mod.PenaltyState._record_kernel(self, sampled, discard_mask, num_reqs)

    def record_now(self, sampled, discard_mask, num_reqs, any_discarded):
        record_kernel(self, sampled, discard_mask, num_reqs)

    def record_deferred(self, sampled, discard_mask, num_reqs, any_discarded):
        kernel.mod.PenaltyState._record_deferred(
            self, sampled, discard_mask, num_reqs, any_discarded
        )

    cls = state_mod.PenaltyState
    monkeypatch.setattr(cls, "_record_kernel", record_kernel)
    monkeypatch.setattr(cls, "_record_torch", record_deferred if deferred else record_now)


def _fails(mods, monkeypatch, seed, async_sched, steps, check) -> bool:  # noqa: F811
    """Whether a sequence fails under a mutant: a step mismatches, or the mutated state
    breaks (e.g. an index out of range)."""
    try:
        return _run(mods, monkeypatch, seed, async_sched, steps, check) > 0
    except (IndexError, RuntimeError):
        return True


def _failing_sequences(mods, monkeypatch, check, seeds, steps) -> int:  # noqa: F811
    """How many of the sequences (each seed, sync and async) fail under a mutant."""
    return sum(
        _fails(mods, monkeypatch, seed, async_sched, steps, check)
        for seed in seeds
        for async_sched in (False, True)
    )


def _kernel_failures(mods, dense, kernel, monkeypatch) -> int:  # noqa: F811
    """Failing sequences of the kernel test's seeds (small tiles)."""
    check = _kernel_check(mods, dense, kernel, "small")
    return _failing_sequences(mods, monkeypatch, check, range(100, 103), 40)


@pytest.mark.parametrize("record", ["torch", "kernel", "deferred"])
@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
# The default tiles run one seed: with this vocabulary most of their programs are empty,
# which the interpreter still walks one by one.
@pytest.mark.parametrize("seed,tiles", [(0, "default"), (0, "small"), (1, "small"), (2, "small")])
def test_kernel_matches_dense_cuda_arithmetic(
    mods,  # noqa: F811
    dense,  # noqa: F811
    kernel,
    state_mod,
    monkeypatch,
    seed,
    async_sched,
    record,
    tiles,
):
    """The CUDA path (Triton kernel, interpreted) vs upstream's dense path with the CUDA
    repetition op's arithmetic, on the same sequences; the slots' lists kept by the torch
    ops, by the CUDA path's record kernel, or (`deferred`, as on CUDA) by the penalty
    kernel counting the previous step's ids."""
    if record != "torch":
        _record_with_kernel(state_mod, kernel, monkeypatch, deferred=record == "deferred")
    check = _kernel_check(mods, dense, kernel, tiles)
    assert _run(mods, monkeypatch, 100 + seed, async_sched, 40, check) == 0


@pytest.mark.parametrize("deferred", [False, True], ids=["now", "deferred"])
def test_record_kernel_keeps_the_torch_state(mods, kernel, state_mod, monkeypatch, deferred):  # noqa: F811
    """Counts and lists after one randomized sequence: the record kernel's equal the torch
    ops' (lists in arrival order), also with the ids kept pending until the next record."""

    def final_state():
        runner = Runner(mods, random.Random(7), True, monkeypatch)
        for _ in range(40):
            runner.schedule()
            if runner.ib.num_reqs:
                runner.sample()
        st = runner.ib.penalty_state
        st.record_pending()
        used = st.num_ids[: st.state.shape[0]].clone()
        lists = [st.ids[k, : int(n)].tolist() for k, n in enumerate(used)]
        return st.state.clone(), used, lists

    by_torch = final_state()
    _record_with_kernel(state_mod, kernel, monkeypatch, deferred)
    by_kernel = final_state()
    assert torch.equal(by_kernel[0], by_torch[0]) and torch.equal(by_kernel[1], by_torch[1])
    assert by_kernel[2] == by_torch[2] and sum(map(len, by_kernel[2])) > 0


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_detected(mods, dense, kernel, state_mod, monkeypatch, mutant):  # noqa: F811
    """Each mutant of the state makes some of the randomized sequences above fail (the
    list mutants those of the kernel, the others those of the torch path)."""
    if os.environ.get(MUTANT_ENV):
        pytest.skip(f"{MUTANT_ENV} already applies a mutant")
    MUTANTS[mutant](state_mod.PenaltyState, monkeypatch)
    if mutant in KERNEL_MUTANTS:
        assert _kernel_failures(mods, dense, kernel, monkeypatch) > 0
        return
    check = _torch_check(mods, torch.float32)
    assert _failing_sequences(mods, monkeypatch, check, range(6), 80) > 0


@pytest.mark.parametrize("mutant", sorted(DEFERRED_MUTANTS))
def test_deferred_record_mutant_is_detected(
    mods,  # noqa: F811
    dense,  # noqa: F811
    kernel,
    state_mod,
    monkeypatch,
    mutant,
):
    """Each mutant of the deferred record makes some of the kernel's sequences fail."""
    _record_with_kernel(state_mod, kernel, monkeypatch, deferred=True)
    DEFERRED_MUTANTS[mutant](state_mod.PenaltyState, kernel.mod, monkeypatch)
    assert _kernel_failures(mods, dense, kernel, monkeypatch) > 0


@pytest.mark.parametrize("mutant", sorted(KERNEL_MODULE_MUTANTS))
def test_kernel_mutant_is_detected(mods, dense, kernel, monkeypatch, mutant):  # noqa: F811
    """A mutant of the kernel module makes some of the kernel's sequences fail."""
    KERNEL_MODULE_MUTANTS[mutant](kernel.mod, monkeypatch)
    assert _kernel_failures(mods, dense, kernel, monkeypatch) > 0


def test_slots_only_for_penalty_requests_and_reused(mods, monkeypatch):  # noqa: F811
    """Memory: one state row per concurrent penalty request (peak), freed rows reused."""
    rng = random.Random(5)
    runner = Runner(mods, rng, False, monkeypatch)
    reqs = [runner._new_req() for _ in range(6)]
    for r, params in zip(reqs, [(0.0, 0.0, 1.0), (1.0, 0.0, 1.0)] * 3, strict=True):
        r.params = params
        runner._add(r, [])
    runner.ib.condense()
    runner.ib.refresh_metadata()
    state = runner.ib.penalty_state
    assert state.num_active == 3 and state.state.shape[0] == 3
    assert state.state.shape[1] >= VOCAB + 1 and state.state.shape[1] % 16 == 0
    slots = state.row_slot[: runner.ib.num_reqs]
    assert sorted(slots[slots >= 0].tolist()) == [0, 1, 2]
    assert (slots[[0, 2, 4]] == -1).all()
    runner.ib.remove_request(reqs[1].req_id)
    runner.ib.condense()
    runner._add(runner._new_req(), [])
    runner.ib.condense()
    runner.ib.refresh_metadata()
    assert state.state.shape[0] == 3  # the freed slot was reused, nothing grew


def test_no_state_without_penalties(mods, monkeypatch):  # noqa: F811
    runner = Runner(mods, random.Random(6), False, monkeypatch)
    r = runner._new_req()
    r.params = (0.0, 0.0, 1.0)
    runner._add(r, [])
    runner.ib.refresh_metadata()
    assert runner.ib.sampling_metadata.no_penalties
    assert runner.ib.penalty_state.state is None  # nothing allocated


@pytest.mark.parametrize("device,expected", [("cpu", False), ("cuda", True), ("xpu", True)])
def test_which_devices_keep_the_state(state_mod, device, expected):
    assert state_mod.use_penalty_state(torch.device(device)) is expected


# The launcher of the CUDA path, with a stand-in kernel ------------------------------------


class _FakeCompiled:
    function = object()
    packed_metadata = ()

    def __init__(self):
        self.launches: list[tuple] = []

    def run(self, *launch_args):
        self.launches.append(launch_args)


class _FakeKernel:
    """Triton's own launch path: records the call, returns the compiled kernel."""

    def __init__(self, compiled: _FakeCompiled):
        self.compiled, self.slow = compiled, []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.slow.append(args)
            return self.compiled

        return launch


def _launches_right_kernel(state_mod, monkeypatch) -> bool:
    """Each specialization's first launch takes Triton's path, its second the compiled kernel."""
    monkeypatch.setattr(state_mod, "_launch_hooks_set", lambda: False)
    t = torch.zeros(64, dtype=torch.int32)
    specializations = [(t, 5, 512), (t[1:], 5, 512), (t.view(torch.float32), 5, 512),
                       (t, 16, 512), (t, 5, 256)]  # fmt: skip
    compiled = _FakeCompiled()
    kernel = _FakeKernel(compiled)
    launch = state_mod.KernelLauncher(kernel)
    launch._stream = lambda device: 0
    for args in specializations:
        launch((1, 1, 1), *args)
    fresh = len(kernel.slow) == len(specializations) and not compiled.launches
    for args in specializations:
        launch((1, 1, 1), *args)
    return fresh and len(kernel.slow) == len(compiled.launches) == len(specializations)


LAUNCH_KEY_MUTANTS = {
    "no-alignment": lambda device, args: (
        device,
        *[a.dtype if isinstance(a, torch.Tensor) else a for a in args],
    ),
    "no-ints": lambda device, args: (
        device,
        *[(a.dtype, a.data_ptr() % 16) for a in args if isinstance(a, torch.Tensor)],
    ),
}


def test_launcher_relaunches_each_new_specialization(state_mod, monkeypatch):
    assert _launches_right_kernel(state_mod, monkeypatch)


@pytest.mark.parametrize("mutant", sorted(LAUNCH_KEY_MUTANTS))
def test_launch_key_mutant_is_detected(state_mod, monkeypatch, mutant):
    monkeypatch.setattr(state_mod, "_specialization_key", LAUNCH_KEY_MUTANTS[mutant])
    assert not _launches_right_kernel(state_mod, monkeypatch)


# The GPU runs' check (verify/ab/penalty_check): a shadow of every row's history in torch ops,
# upstream's penalties recomputed from it at each apply, bit for bit against the state's.


def _penalty_check_shim(state_mod, monkeypatch, tmp_path):
    """The shim loaded by path and installed on the patched PenaltyState (undone after the
    test); its findings file goes to tmp_path."""
    path = Path(__file__).resolve().parents[2] / "verify/ab/penalty_check/sitecustomize.py"
    spec = importlib.util.spec_from_file_location("patchbench_penalty_check", path)
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    monkeypatch.setattr(shim, "_FOLDER", str(tmp_path))
    monkeypatch.setattr(shim, "CHECK_EVERY", 8)
    shim._install(SimpleNamespace(PenaltyState=state_mod.PenaltyState), monkeypatch.setattr)
    return shim


def _applied(mods):  # noqa: F811
    """A step check that only applies the state's penalties (the shim compares them): the
    pristine comparison is test_random_batch_ops_match_pristine's, and it reads the module's
    op stand-ins, which the kernel tests' fixtures change."""

    def check(runner, step):
        meta, _, histories, pens = runner.penalty_inputs()
        with mods.patched.active():
            meta.penalty_state.apply(_logits(step, len(histories), torch.float32), *pens)
        return True

    return check


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_penalty_check_finds_nothing_in_a_correct_state(
    mods,  # noqa: F811
    state_mod,
    monkeypatch,
    tmp_path,
    async_sched,
):
    """Randomized batch operations on the real state: every step compared, nothing found, and
    the state checks ran."""
    shim = _penalty_check_shim(state_mod, monkeypatch, tmp_path)
    _run(mods, monkeypatch, 3, async_sched, 40, _applied(mods))
    (shadow,) = shim._SHADOWS
    shim._write_all()
    (found,) = [json.loads(p.read_text()) for p in tmp_path.glob("penalty-check-*.json")]
    assert found["steps"] == shadow.steps > 20 and found["state_checks"] > 0
    assert found["logit_findings"] == [] and found["state_findings"] == []


@pytest.mark.parametrize("mutant", ["swap", "placeholder"])
def test_penalty_check_finds_a_broken_state(
    mods,  # noqa: F811
    state_mod,
    monkeypatch,
    tmp_path,
    mutant,
):
    """A mutant of the state (as test_mutant_is_detected's) shows in the shim's findings."""
    if os.environ.get(MUTANT_ENV):
        pytest.skip(f"{MUTANT_ENV} already applies a mutant")
    MUTANTS[mutant](state_mod.PenaltyState, monkeypatch)
    shim = _penalty_check_shim(state_mod, monkeypatch, tmp_path)
    for seed in range(2):
        for async_sched in (False, True):
            _run(mods, monkeypatch, seed, async_sched, 40, _applied(mods))
    shim._write_all()
    assert sum(len(s.findings) + len(s.state_findings) for s in shim._SHADOWS) > 0
