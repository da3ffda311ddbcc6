"""Harness shim for the token-identity worker (on PYTHONPATH of BOTH roots, so A/B stay equal).

vLLM 0.22.0 on CPU: `vllm.utils.torch_utils.async_tensor_h2d` defaults to pin_memory=PIN_MEMORY,
a module constant that ignores the platform, so the thinking-budget forcing path
(`thinking_budget_state._apply_forcing_to_logits`) calls torch.tensor(pin_memory=True) and dies
with "Found no NVIDIA driver" on a machine without a GPU. This hook sets that default to False
when the module is first imported, in every process (the engine core and its workers are
separate processes that inherit PYTHONPATH)."""

import importlib.util
import os

_HOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "after_import.py")
_spec = importlib.util.spec_from_file_location("_patchbench_after_import", _HOOKS)
_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hooks)


def _no_pin(module) -> None:
    fn = module.async_tensor_h2d
    fn.__defaults__ = tuple(False if isinstance(d, bool) else d for d in fn.__defaults__)
    module.PATCHBENCH_NO_PIN_SHIM = True


_hooks.after_import("vllm.utils.torch_utils", _no_pin)
