"""Check 0011's device penalty state against an independent shadow, step by step, on the GPU.

With PATCHBENCH_PENALTY_CHECK=<folder>, every `PenaltyState` (vllm/v1/sample/ops/penalty_state.py
of the patched tree) gets a shadow kept per batch row in plain torch ops: the rows' prompt
membership and output counts, rebuilt on add/reset, moved on move/swap, cleared on remove and
counted from each step's sampled ids at `record_sampled` (rows whose sample is discarded count
nothing). Each `apply` then recomputes upstream's penalties (vLLM's repetition op, then
`logits -= f * counts` and `logits -= p * mask`) on a copy of its input from the shadow and
compares the result bit for bit (int32 views) with the state's. Every CHECK_EVERY steps (and
at exit) the state's counts, prompt bits and id lists are compared with the shadow too (ids
still pending are taken off the shadow for that), and the findings are written to
<folder>/penalty-check-<pid>.json: steps checked, rows compared, and per mismatching step and
row the number of differing logits and the first one (column, ours, upstream's, its count).

Nothing here changes the logits, the state or the tokens: the shadow only reads. It costs a
logits copy and one dense penalty pass per step, and a host read every CHECK_EVERY steps."""

import atexit
import importlib.util
import json
import os
import sys

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "after_import.py")
_FOLDER = os.environ.get("PATCHBENCH_PENALTY_CHECK", "")
CHECK_EVERY = 256
MAX_FINDINGS = 200


class Shadow:
    """Prompt membership and output counts per batch row of one PenaltyState."""

    def __init__(self, state) -> None:
        import torch

        self.torch = torch
        rows, vocab = len(state.row_slot), state.vocab_size
        self.vocab = vocab
        self.counts = torch.zeros((rows, vocab), dtype=torch.int32, device=state.device)
        self.prompt = torch.zeros((rows, vocab), dtype=torch.bool, device=state.device)
        self.steps = self.rows_compared = self.state_checks = 0
        self.pending = []  # per step: (step, per-row mismatch counts, first column, values)
        self.findings: list[dict] = []
        self.state_findings: list[dict] = []

    def rebuild(self, row: int, prompt_ids, output_ids) -> None:
        torch = self.torch
        self.counts[row].zero_()
        self.prompt[row].zero_()
        prompt = torch.as_tensor(list(prompt_ids), dtype=torch.int64)
        output = torch.as_tensor(list(output_ids), dtype=torch.int64)
        prompt = prompt[(prompt >= 0) & (prompt < self.vocab)].to(self.counts.device)
        output = output[(output >= 0) & (output < self.vocab)].to(self.counts.device)
        self.prompt[row, prompt] = True
        self.counts[row].index_add_(0, output, torch.ones_like(output, dtype=torch.int32))

    def clear(self, row: int) -> None:
        self.counts[row].zero_()
        self.prompt[row].zero_()

    def move(self, src: int, dst: int) -> None:
        self.counts[dst].copy_(self.counts[src])
        self.prompt[dst].copy_(self.prompt[src])
        self.clear(src)

    def swap(self, i1: int, i2: int) -> None:
        index = [i2, i1]
        self.counts[[i1, i2]] = self.counts[index]
        self.prompt[[i1, i2]] = self.prompt[index]

    def record(self, state, sampled, discard_mask, num_reqs: int) -> None:
        torch = self.torch
        has = torch.as_tensor(state.row_slot[:num_reqs] >= 0).to(sampled.device)
        keep = has & ~discard_mask[:num_reqs].to(torch.bool)
        rows = torch.arange(num_reqs, device=sampled.device)
        flat = rows * self.vocab + sampled[:num_reqs, 0].to(torch.int64)
        self.counts.view(-1).index_add_(0, flat, keep.to(torch.int32))

    def upstream(self, logits, presence, frequency, repetition):
        """Upstream's penalties of the first rows on a copy of `logits`, from the shadow."""
        from vllm._custom_ops import apply_repetition_penalties

        n = logits.shape[0]
        counts, prompt = self.counts[:n], self.prompt[:n]
        output_mask = counts > 0
        apply_repetition_penalties(logits, prompt, output_mask, repetition)
        logits -= frequency.unsqueeze(dim=1) * counts
        logits -= presence.unsqueeze(dim=1) * output_mask
        return logits

    def compare(self, ours, theirs) -> None:
        torch = self.torch
        bits = torch.int32 if ours.element_size() == 4 else torch.int16
        differ = ours.view(bits) != theirs.view(bits)
        first = differ.to(torch.int8).argmax(dim=1, keepdim=True)
        rows = torch.arange(ours.shape[0], device=ours.device)
        values = torch.stack([ours.gather(1, first)[:, 0], theirs.gather(1, first)[:, 0]], dim=1)
        count = self.counts[rows, first[:, 0]]
        self.pending.append((self.steps, differ.sum(dim=1), first[:, 0], values, count))
        self.steps += 1
        self.rows_compared += ours.shape[0]

    def drain(self) -> None:
        for step, mismatches, first, values, count in self.pending:
            mismatches = mismatches.tolist()
            if not any(mismatches) or len(self.findings) >= MAX_FINDINGS:
                continue
            first, values, count = first.tolist(), values.tolist(), count.tolist()
            for row, n in enumerate(mismatches):
                if n and len(self.findings) < MAX_FINDINGS:
                    self.findings.append(
                        {
                            "step": step,
                            "row": row,
                            "logits_differing": n,
                            "column": first[row],
                            "ours": values[row][0],
                            "upstream": values[row][1],
                            "shadow_count": count[row],
                        }
                    )
        self.pending = []

    def check_state(self, state) -> None:
        """The state's counts, prompt bits and lists of every row with a slot vs the shadow."""
        torch = self.torch
        if state.state is None:
            return
        expected = self.counts.clone()
        if state._pending_ids is not None:
            n = state._pending_rows
            rows = torch.arange(n, device=expected.device)
            has = torch.as_tensor(state.row_slot[:n] >= 0).to(expected.device)
            flat = rows * self.vocab + state._pending_ids[:n, 0].to(torch.int64)
            expected.view(-1).index_add_(0, flat, -has.to(torch.int32))
        self.state_checks += 1
        for row in map(int, (state.row_slot >= 0).nonzero()[0]):
            slot = int(state.row_slot[row])
            entry = state.state[slot, : self.vocab]
            counts = entry & ((1 << 30) - 1)
            prompt = entry >= (1 << 30)
            listed = torch.zeros(self.vocab + 1, dtype=torch.int32, device=entry.device)
            num = int(state.num_ids[slot])
            ids = state.ids[slot, :num].to(torch.int64).clamp(0, self.vocab)
            listed.index_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))
            problems = {
                "counts": int((counts != expected[row]).sum()),
                "prompt": int((prompt != self.prompt[row]).sum()),
                "unlisted": int(((entry != 0) & (listed[: self.vocab] == 0)).sum()),
                "listed_twice": int((listed > 1).sum()),
                "listed_zero": int(((listed[: self.vocab] > 0) & (entry == 0)).sum()),
            }
            if any(problems.values()) and len(self.state_findings) < MAX_FINDINGS:
                self.state_findings.append(
                    {"step": self.steps, "row": row, "slot": slot, **problems}
                )

    def write(self) -> None:
        path = os.path.join(_FOLDER, f"penalty-check-{os.getpid()}.json")
        record = {
            "steps": self.steps,
            "rows_compared": self.rows_compared,
            "state_checks": self.state_checks,
            "logit_findings": self.findings,
            "state_findings": self.state_findings,
        }
        os.makedirs(_FOLDER, exist_ok=True)
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=1)
        os.replace(path + ".tmp", path)


def _shadow(state) -> Shadow:
    shadow = state.__dict__.get("_patchbench_shadow")
    if shadow is None:
        shadow = state._patchbench_shadow = Shadow(state)
        _SHADOWS.append(shadow)
    return shadow


_SHADOWS: list[Shadow] = []


def _wrap(cls, name, after, patch):
    original = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        after(self, *args, **kwargs)
        return result

    patch(cls, name, wrapper)


def _install(module, patch=setattr) -> None:
    """Shadow every PenaltyState of `module`; `patch(cls, name, value)` sets each wrapper
    (a test passes monkeypatch.setattr)."""
    cls = module.PenaltyState

    def add_row(self, row, prompt, output, has_penalties):
        shadow = _shadow(self)
        if has_penalties:
            shadow.rebuild(row, prompt, output)
        else:
            shadow.clear(row)

    def reset_row(self, row, prompt, output):
        if self.row_slot[row] >= 0:
            _shadow(self).rebuild(row, prompt, output)

    _wrap(cls, "add_row", add_row, patch)
    _wrap(cls, "reset_row", reset_row, patch)
    _wrap(cls, "remove_row", lambda self, row: _shadow(self).clear(row), patch)
    _wrap(cls, "move_row", lambda self, src, dst: _shadow(self).move(src, dst), patch)
    _wrap(cls, "swap_rows", lambda self, i1, i2: _shadow(self).swap(i1, i2), patch)
    record = cls.record_sampled

    def record_sampled(self, sampled, discard_mask, num_reqs, any_discarded=True):
        active = self.num_active and num_reqs
        record(self, sampled, discard_mask, num_reqs, any_discarded)
        if active:
            _shadow(self).record(self, sampled, discard_mask, num_reqs)

    patch(cls, "record_sampled", record_sampled)
    apply = cls.apply

    def checked_apply(self, logits, presence, frequency, repetition):
        shadow = _shadow(self)
        # Copies: the reference must not touch what the state then reads.
        pens = (presence.clone(), frequency.clone(), repetition.clone())
        theirs = shadow.upstream(logits.clone(), *pens)
        ours = apply(self, logits, presence, frequency, repetition)
        shadow.compare(ours, theirs)
        if shadow.steps % CHECK_EVERY == 0:
            shadow.drain()
            shadow.check_state(self)
            shadow.write()
        return ours

    patch(cls, "apply", checked_apply)


def _write_all() -> None:
    for shadow in _SHADOWS:
        shadow.drain()
        shadow.write()


if _FOLDER:
    _spec = importlib.util.spec_from_file_location("_patchbench_after_import", _HOOKS)
    _hooks = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_hooks)
    _hooks.after_import("vllm.v1.sample.ops.penalty_state", _install)
    atexit.register(_write_all)
    _hooks.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)), sys.path)
