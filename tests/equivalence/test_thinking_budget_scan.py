"""Thinking budget: the watermark scan for the think start/end markers.

Pristine `ThinkingBudgetStateHolder._update_think_state` rescans the whole output for the
start/end marker every step until it is found. Patched scans only newly appended tokens
(overlap len(marker) - 1, trailing -1 placeholders left for later) and rescans from
scratch when the output shrank (spec rejection / KV discard).

Checked exactly: after every step the per-request state (all keys the pristine holder
keeps) and the forced logits are identical, over random token streams with multi-token
markers split across steps, async -1 placeholders, shrink events, spec tokens, and batch
add/remove/swap; plus named cases.
"""

from __future__ import annotations

import inspect
import random
from types import SimpleNamespace

import pytest
import torch

VOCAB = 12
START = [6, 7]
END = [8, 9]


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
    pr = pristine.load("vllm.v1.sample.thinking_budget_state")
    pa = patched.load("vllm.v1.sample.thinking_budget_state")
    # No accelerator here: async_tensor_h2d must not pin (0.22.0: its pin_memory
    # default is bound to PIN_MEMORY at import time; 0.33.0 reads the module global,
    # set to False in _custom_ops_once).
    for mod in (pr, pa):
        orig = mod.async_tensor_h2d
        if "pin_memory" in inspect.signature(orig).parameters:
            mod.async_tensor_h2d = lambda *a, _orig=orig, **kw: _orig(
                *a, **{**kw, "pin_memory": False}
            )
    return SimpleNamespace(
        pr=pr,
        pa=pa,
        pr_if=pristine.load("vllm.v1.sample.logits_processor.interface"),
        pa_if=patched.load("vllm.v1.sample.logits_processor.interface"),
        pristine=pristine,
        patched=patched,
    )


class Pair:
    """The same batch driven through a pristine and a patched holder."""

    def __init__(self, mods, start=START, end=END, num_spec_tokens=0):
        self.mods = mods
        cfg = SimpleNamespace(
            reasoning_start_token_ids=list(start), reasoning_end_token_ids=list(end)
        )
        self.holders = []
        for root, mod in ((mods.pristine, mods.pr), (mods.patched, mods.pa)):
            with root.active():
                self.holders.append(
                    (
                        root,
                        mod.ThinkingBudgetStateHolder(
                            cfg, 64, num_spec_tokens, torch.device("cpu"), False
                        ),
                    )
                )
        self.num_spec_tokens = num_spec_tokens
        self.outputs: dict[int, list[int]] = {}

    def sync(self, added=(), removed=(), swapped=()):
        ifaces = (self.mods.pr_if, self.mods.pa_if)
        for (root, holder), iface in zip(self.holders, ifaces, strict=True):
            swap = iface.MoveDirectionality.SWAP
            upd = SimpleNamespace(
                batch_size=len(self.outputs),
                removed=list(removed),
                added=[
                    (i, SimpleNamespace(thinking_token_budget=b), list(p), out)
                    for i, b, p, out in added
                ],
                moved=[(a, b, swap) for a, b in swapped],
            )
            with root.active():
                holder.sync_batch(upd)

    def add(self, index, budget, prompt):
        self.outputs[index] = []
        self.sync(added=[(index, budget, prompt, self.outputs[index])])

    def step(self, spec: dict[int, list[int]] | None = None, bonus: bool = False):
        n = max(self.outputs) + 1 if self.outputs else 0
        rows = [list(self.outputs.get(i, [])) for i in range(n)]
        spec_lists = None
        if self.num_spec_tokens:
            spec_lists = [list((spec or {}).get(i, [])) for i in range(n)]
            # The sampler combines outputs with the draft tokens.
            rows = [r + s for r, s in zip(rows, spec_lists, strict=False)]
        results = []
        for root, holder in self.holders:
            with root.active():
                holder.update_state([list(r) for r in rows], spec_lists)
                logits = torch.zeros(max(n, 1) * (self.num_spec_tokens + 1), VOCAB)
                out = holder.apply_to_logits(logits, bonus, spec_lists)
            results.append(out)
        self.compare()
        assert torch.equal(results[0], results[1])

    def compare(self):
        pr, pa = self.holders[0][1], self.holders[1][1]
        assert pr._state.keys() == pa._state.keys()
        for idx, ref in pr._state.items():
            got = pa._state[idx]
            for key, value in ref.items():
                assert got[key] == value, (idx, key, got[key], value)


def _token(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.06:
        return rng.choice(START)
    if r < 0.14:
        return rng.choice(END)
    return rng.randrange(6)


def _random_prompt(rng: random.Random) -> list[int]:
    prompt = [rng.randrange(6) for _ in range(rng.randint(0, 6))]
    r = rng.random()
    if r < 0.4:
        prompt += START + [rng.randrange(6) for _ in range(rng.randint(0, 3))]
    elif r < 0.55:
        prompt += START + [1] + END
    return prompt


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("seed", range(6))
def test_random_streams(mods, seed, async_sched):
    rng = random.Random(seed * 7 + async_sched)
    pair = Pair(mods)
    for i in range(rng.randint(1, 8)):
        pair.add(i, rng.randint(0, 25), _random_prompt(rng))
    for _ in range(120):
        for out in pair.outputs.values():
            if async_sched and out and out[-1] == -1 and rng.random() < 0.85:
                out[-1] = _token(rng)  # placeholder repaired with the sampled id
            r = rng.random()
            if r < 0.08 and out:
                del out[rng.randrange(len(out)) :]  # rejection / KV discard
            elif r < 0.15:
                pass
            elif async_sched:
                out.append(-1)
            else:
                out.extend(_token(rng) for _ in range(rng.randint(1, 3)))
        r = rng.random()
        if r < 0.03 and len(pair.outputs) > 1:
            victim = rng.choice(sorted(pair.outputs))
            pair.sync(removed=[victim])
            pair.add(victim, rng.randint(0, 25), _random_prompt(rng))
        elif r < 0.06 and len(pair.outputs) > 1:
            a, b = rng.sample(sorted(pair.outputs), 2)
            pair.outputs[a], pair.outputs[b] = pair.outputs[b], pair.outputs[a]
            pair.sync(swapped=[(a, b)])
        pair.step()


@pytest.mark.parametrize("seed", range(3))
def test_random_streams_spec(mods, seed):
    rng = random.Random(100 + seed)
    pair = Pair(mods, num_spec_tokens=2)
    for i in range(rng.randint(1, 5)):
        pair.add(i, rng.randint(0, 25), _random_prompt(rng))
    for _ in range(80):
        spec = {}
        for i, out in pair.outputs.items():
            spec[i] = [_token(rng) for _ in range(rng.randint(0, 2))]
            r = rng.random()
            if r < 0.1 and out:
                del out[rng.randrange(len(out)) :]
            else:
                out.extend(_token(rng) for _ in range(rng.randint(1, 3)))
        pair.step(spec=spec, bonus=rng.random() < 0.5)


@pytest.mark.parametrize(
    "start,end", [([6], [8]), ([6, 7], [8, 9]), ([6, 7, 6], [8, 9, 8]), ([], [8, 9])]
)
def test_marker_split_across_steps(mods, start, end):
    pair = Pair(mods, start=start, end=end)
    pair.add(0, 1000, [1, 2] + start)  # continue_thinking from the prompt
    pair.add(1, 1000, [1, 2])  # start marker comes in the output
    for i in (0, 1):
        for tok in [3, 4] + start + [5] + end[:-1]:
            pair.outputs[i].append(tok)
            pair.step()
        pair.outputs[i].append(end[-1])
        pair.step()
        pair.outputs[i].append(5)
        pair.step()


def test_shrink_removes_partial_marker(mods):
    pair = Pair(mods)
    pair.add(0, 1000, [1] + START)
    out = pair.outputs[0]
    out.extend([1, 2, 8])
    pair.step()
    del out[2:]  # the half marker is rejected
    pair.step()
    out.extend([3, 9])  # 8 is gone: no marker
    pair.step()
    out.extend([8, 9])
    pair.step()


def test_shrink_and_regrow_same_length(mods):
    pair = Pair(mods)
    pair.add(0, 1000, [1] + START)
    out = pair.outputs[0]
    out.extend([1, 2, 3, 8])
    pair.step()
    del out[3:]
    out.extend([8, 9])  # shrink and regrow within one step, past the watermark
    pair.step()


def test_placeholders_then_marker(mods):
    pair = Pair(mods)
    pair.add(0, 1000, [1] + START)
    out = pair.outputs[0]
    out.extend([1, 8, -1])
    pair.step()
    out[-1] = 9
    pair.step()


def test_budget_exhausted_forces_end(mods):
    pair = Pair(mods)
    pair.add(0, 3, [1] + START)
    pair.add(1, 0, [1] + START)
    for _ in range(8):
        for out in pair.outputs.values():
            out.append(2)
        pair.step()


def test_empty_output(mods):
    pair = Pair(mods)
    pair.add(0, 5, [])
    pair.add(1, 0, START)
    pair.step()
    pair.step()


@pytest.mark.parametrize("tail", [[8], [6]])
def test_marker_straddles_scan_offset(mods, tail):
    # 0.26+: after a natural </think> (start found in the output) the holder resets
    # start/end to -1 and only looks at output[scan_offset:]; a marker whose first token
    # lies before scan_offset must not be found. (0.22.0 has no reset: plain equivalence.)
    pair = Pair(mods)
    pair.add(0, 1000, [1, 2])
    out = pair.outputs[0]
    out.extend([1, *START, 2, *END, *tail])
    pair.step()
    out.append(9 if tail == [8] else 7)
    pair.step()
    out.extend([3, 4])
    pair.step()
