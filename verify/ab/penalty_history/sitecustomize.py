"""Check the output history that upstream V1's penalties read, step by step, on the GPU.

With PATCHBENCH_PENALTY_HISTORY=<folder>, the V1 model runner (vllm/v1/worker/gpu_model_runner.py,
pristine) keeps a shadow of each request's sampled ids, read from every step's sampler output
(rows whose sample is discarded, e.g. partial prefills, add nothing). Right after
`InputBatch.update_async_output_token_ids` (the repair of async scheduling's -1 placeholders,
just before the sampler runs), each penalized row's `sampling_metadata.output_token_ids` list is
compared with its request's shadow. Findings go to <folder>/penalty-history-<pid>.json every
CHECK_EVERY steps: steps checked, rows compared, and per differing row the step, request, both
lengths and the first position where they differ with both values.

For a runner whose penalties read the host lists (v0.22.0, and the series without its device
state); nothing here changes the lists, the logits or the tokens. Costs one host read of the
sampled ids per step."""

import importlib.util
import json
import os
import sys

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "after_import.py")
_FOLDER = os.environ.get("PATCHBENCH_PENALTY_HISTORY", "")
CHECK_EVERY = 256
MAX_FINDINGS = 200


class History:
    """Every request's sampled ids, as the sampler returned them."""

    def __init__(self) -> None:
        self.sampled: dict[str, list[int]] = {}
        self.steps = self.rows_compared = 0
        self.findings: list[dict] = []

    def compare(self, req_ids: list, lists: list) -> None:
        """Each penalized row's list (after the repair) against its request's shadow."""
        for row, (req_id, seen) in enumerate(zip(req_ids, lists, strict=False)):
            want = self.sampled.get(req_id, [])
            self.rows_compared += 1
            if list(seen) == want or len(self.findings) >= MAX_FINDINGS:
                continue
            first = next(
                (i for i, (a, b) in enumerate(zip(seen, want, strict=False)) if a != b),
                min(len(seen), len(want)),
            )
            self.findings.append(
                {"step": self.steps, "row": row, "request": req_id, "list_len": len(seen),
                 "shadow_len": len(want), "first_differing": first,
                 "list_value": seen[first] if first < len(seen) else None,
                 "shadow_value": want[first] if first < len(want) else None,
                 "placeholders": sum(1 for t in seen if t == -1)}
            )  # fmt: skip

    def record(self, req_ids: list, sampled: list, discarded) -> None:
        for row, req_id in enumerate(req_ids):
            if not discarded[row]:
                self.sampled.setdefault(req_id, []).extend(sampled[row])
        self.steps += 1

    def write(self) -> None:
        path = os.path.join(_FOLDER, f"penalty-history-{os.getpid()}.json")
        record = {"steps": self.steps, "rows_compared": self.rows_compared,
                  "findings": self.findings}  # fmt: skip
        os.makedirs(_FOLDER, exist_ok=True)
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, indent=1)
        os.replace(path + ".tmp", path)


HISTORY = History()


def _install_batch(module) -> None:
    cls = module.InputBatch
    repair = cls.update_async_output_token_ids

    def checked_repair(self):
        result = repair(self)
        meta = self.sampling_metadata
        if not meta.no_penalties and meta.output_token_ids:
            HISTORY.compare(list(self.req_ids), meta.output_token_ids)
        return result

    cls.update_async_output_token_ids = checked_repair


def _install_runner(module) -> None:
    cls = module.GPUModelRunner
    sample = cls._sample

    def recorded_sample(self, logits, spec_decode_metadata):
        output = sample(self, logits, spec_decode_metadata)
        num_reqs = self.input_batch.num_reqs
        sampled = output.sampled_token_ids[:num_reqs].tolist()
        HISTORY.record(
            list(self.input_batch.req_ids[:num_reqs]),
            [[t for t in row if t >= 0] for row in sampled],
            self.discard_request_mask.np[:num_reqs],
        )
        if HISTORY.steps % CHECK_EVERY == 0:
            HISTORY.write()
        return output

    cls._sample = recorded_sample


if _FOLDER:
    _spec = importlib.util.spec_from_file_location("_patchbench_after_import", _HOOKS)
    _hooks = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_hooks)
    _hooks.after_import("vllm.v1.worker.gpu_input_batch", _install_batch)
    _hooks.after_import("vllm.v1.worker.gpu_model_runner", _install_runner)
    _hooks.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)), sys.path)
