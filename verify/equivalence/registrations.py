"""Process-wide registrations that two vLLM import roots both make, made once.

Pristine and patched vLLM loaded side by side (`verify.equivalence.roots`) each import
``vllm.utils.torch_utils``, which registers torch opaque types by qualified name (torch >=
2.11) and ``torch.ops.vllm.*`` custom ops; the second root's registration fails with "already
registered". These wrappers make it a no-op: the first root's registration serves both (the
equivalence checks and the microbenchmarks call none of those ops). Torch is imported lazily,
so this module imports on any machine.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

_MARK = "_patchbench_once"


def opaque_types_once() -> str:
    """Wrap ``torch._library.opaque_object.register_opaque_type`` so that a second registration
    of a qualified name maps the class to the first one's type info; says what it did."""
    try:
        from torch._library import opaque_object
    except ImportError:
        return "torch without opaque types: nothing to do"
    original = opaque_object.register_opaque_type
    if getattr(original, _MARK, False):
        return "already wrapped"

    def register_once(cls: Any, *args: Any, **kwargs: Any) -> Any:
        name = f"{cls.__module__}.{cls.__qualname__}"
        by_name = getattr(opaque_object, "_OPAQUE_TYPES_BY_NAME", None)
        types = getattr(opaque_object, "_OPAQUE_TYPES", None)
        if isinstance(by_name, dict) and name in by_name:
            if isinstance(types, dict):
                types[cls] = by_name[name]
            return None
        try:
            return original(cls, *args, **kwargs)
        except Exception as exc:  # older layouts: tolerate only the duplicate
            if "already" in str(exc).lower():
                return None
            raise

    setattr(register_once, _MARK, True)
    opaque_object.register_opaque_type = register_once
    return "register_opaque_type wrapped (second registration of a name is a no-op)"


def custom_ops_once(torch_utils: ModuleType, torch_ops: Any) -> None:
    """Make one root's ``torch_utils.direct_register_custom_op`` skip ops that ``torch_ops``
    (``torch.ops``) already has."""
    original = getattr(torch_utils, "direct_register_custom_op", None)
    if original is None or getattr(original, _MARK, False):
        return
    signature = inspect.signature(original)

    def register_once(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        lib = bound.arguments.get("target_lib") or torch_utils.vllm_lib
        if hasattr(getattr(torch_ops, lib.ns), bound.arguments["op_name"]):
            return None
        return original(*args, **kwargs)

    setattr(register_once, _MARK, True)
    torch_utils.direct_register_custom_op = register_once
