"""A dummy-weight model's output distribution in processes this harness does not drive itself
(`vllm serve`): with PATCHBENCH_LOGIT_SCALE set, every `LogitsProcessor` vLLM builds gets that
scale (the one `verify.ab.output_entropy.calibrate` found for the model shape and target entropy;
the engine records give it as `output_entropy.logit_scale`).

verify.ab puts this folder on every variant's PYTHONPATH when the variable is set, after the
variant's own roots (a planted variant's shim runs first and chains to this one)."""

import importlib.util
import os
import sys

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "after_import.py")
_SCALE = os.environ.get("PATCHBENCH_LOGIT_SCALE", "")


def _scaled(init):
    def wrapper(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.scale = float(_SCALE)

    return wrapper


def _scale(module) -> None:
    module.LogitsProcessor.__init__ = _scaled(module.LogitsProcessor.__init__)
    module.PATCHBENCH_LOGIT_SCALE = float(_SCALE)


if _SCALE:
    _spec = importlib.util.spec_from_file_location("_patchbench_after_import", _HOOKS)
    _hooks = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_hooks)
    _hooks.after_import("vllm.model_executor.layers.logits_processor", _scale)
    _hooks.chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)), sys.path)
