"""Harness shim for the token-identity worker (on PYTHONPATH of BOTH roots, so A/B stay equal).

vLLM 0.22.0 on CPU: `vllm.utils.torch_utils.async_tensor_h2d` defaults to pin_memory=PIN_MEMORY,
a module constant that ignores the platform, so the thinking-budget forcing path
(`thinking_budget_state._apply_forcing_to_logits`) calls torch.tensor(pin_memory=True) and dies
with "Found no NVIDIA driver" on a machine without a GPU. This hook sets that default to False
when the module is first imported, in every process (the engine core and its workers are
separate processes that inherit PYTHONPATH)."""

import importlib.abc
import importlib.machinery
import sys

_TARGET = "vllm.utils.torch_utils"


class _NoPinHook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            fn = module.async_tensor_h2d
            fn.__defaults__ = tuple(False if isinstance(d, bool) else d for d in fn.__defaults__)
            module.PATCHBENCH_NO_PIN_SHIM = True

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _NoPinHook())
