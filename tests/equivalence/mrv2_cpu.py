"""MRV2 code of two vLLM roots on CPU, for equivalence tests: fresh import roots with the Triton
interpreter on (`TRITON_INTERPRET=1`; vLLM's `triton_utils` disables Triton when no driver is
active unless `CUDA_VISIBLE_DEVICES` is set and empty), both importable in one process, and
plain CPU tensors in place of UVA buffers and pinned host copies."""

from __future__ import annotations

import contextlib
import importlib
import inspect

import pytest
import torch

from verify.equivalence import host_buffers
from verify.equivalence.roots import ImportRoot


@contextlib.contextmanager
def two_roots_importable(roots):
    """Let two vLLM roots be imported in one process: skip the second root's torch
    opaque-type, custom-op and torch.library registrations (no custom op runs here)."""
    try:
        from torch._library import opaque_object
    except ImportError:
        opaque_object = None
    with pytest.MonkeyPatch.context() as mp:
        if opaque_object is not None:
            original = opaque_object.register_opaque_type

            def register_opaque_once(cls, *args, **kwargs):
                name = f"{cls.__module__}.{cls.__qualname__}"
                known = opaque_object._OPAQUE_TYPES_BY_NAME.get(name)
                if known is not None:
                    opaque_object._OPAQUE_TYPES[cls] = known
                    return None
                return original(cls, *args, **kwargs)

            mp.setattr(opaque_object, "register_opaque_type", register_opaque_once)
        for meth in ("define", "impl", "_register_fake"):
            orig_meth = getattr(torch.library.Library, meth, None)
            if orig_meth is None:
                continue

            def tolerant(self, *args, _orig=orig_meth, **kwargs):
                try:
                    return _orig(self, *args, **kwargs)
                except RuntimeError as e:
                    if "multiple times" in str(e) or "already" in str(e):
                        return None
                    raise

            mp.setattr(torch.library.Library, meth, tolerant)
        for root in roots:
            with root.active():
                tu = importlib.import_module("vllm.utils.torch_utils")
                orig_op = tu.direct_register_custom_op
                if getattr(orig_op, "_patchbench_once", False):
                    continue
                sig = inspect.signature(orig_op)

                def register_op_once(*args, _orig=orig_op, _sig=sig, _tu=tu, **kwargs):
                    bound = _sig.bind(*args, **kwargs)
                    lib = bound.arguments.get("target_lib") or _tu.vllm_lib
                    if hasattr(getattr(torch.ops, lib.ns), bound.arguments["op_name"]):
                        return None
                    return _orig(*args, **kwargs)

                register_op_once._patchbench_once = True
                mp.setattr(tu, "direct_register_custom_op", register_op_once)
        yield


def _unpinned_buffers() -> None:
    """In the active root: CPU tensors for UVA buffers, host copies without pinned memory."""
    host_buffers.install()
    bu = importlib.import_module("vllm.v1.worker.gpu.buffer_utils")
    h2d = bu.async_tensor_h2d
    if "pin_memory" not in inspect.signature(h2d).parameters:
        # It reads torch_utils.PIN_MEMORY at each call (v0.33.0).
        importlib.import_module("vllm.utils.torch_utils").PIN_MEMORY = False
        return
    # Its default pin_memory=PIN_MEMORY is bound at import; no pinned allocator exists
    # without an accelerator.

    def h2d_unpinned(data, dtype, device, pin_memory=False, _f=h2d):
        return _f(data, dtype, device, pin_memory=False)

    bu.async_tensor_h2d = h2d_unpinned
    importlib.import_module("vllm.v1.worker.gpu.sample.penalties").async_tensor_h2d = h2d_unpinned


@contextlib.contextmanager
def interpreter_roots(*roots: ImportRoot):
    """Fresh copies of `roots` (own sys.modules snapshot, so the @triton.jit kernels are made
    with the interpreter on whatever other modules imported before), each prepared for CPU;
    skips the test when vLLM did not enable Triton."""
    fresh = [ImportRoot(r.path, f"{r.label} (triton interpreter)") for r in roots]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_INTERPRET", "1")
        env.setenv("CUDA_VISIBLE_DEVICES", "")
        with two_roots_importable(fresh):
            for root in fresh:
                with root.active():
                    if not importlib.import_module("vllm.triton_utils").HAS_TRITON:
                        pytest.skip("vllm.triton_utils did not enable Triton on CPU")
                    _unpinned_buffers()
            yield fresh
