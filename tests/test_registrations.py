"""verify.equivalence.registrations on stand-ins for torch's registries (no torch needed)."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import pytest

from verify.equivalence.registrations import custom_ops_once, opaque_types_once


@pytest.fixture
def opaque_object(monkeypatch) -> ModuleType:
    """A `torch._library.opaque_object` whose registration refuses a known name, as torch's."""
    module = ModuleType("torch._library.opaque_object")
    module._OPAQUE_TYPES, module._OPAQUE_TYPES_BY_NAME = {}, {}

    def register_opaque_type(cls, *args, **kwargs):
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in module._OPAQUE_TYPES_BY_NAME:
            raise RuntimeError(f"{name} is already registered")
        module._OPAQUE_TYPES[cls] = module._OPAQUE_TYPES_BY_NAME[name] = ("info", name)

    module.register_opaque_type = register_opaque_type
    library = ModuleType("torch._library")
    library.opaque_object = module
    torch = ModuleType("torch")
    torch._library = library
    for name, mod in (("torch", torch), ("torch._library", library), (module.__name__, module)):
        monkeypatch.setitem(sys.modules, name, mod)
    return module


def _same_class_of_another_root() -> type:
    return type("ModuleName", (), {"__module__": "vllm.utils.torch_utils"})


def test_second_root_maps_to_the_first_registration(opaque_object):
    first, second = _same_class_of_another_root(), _same_class_of_another_root()
    opaque_object.register_opaque_type(first)
    with pytest.raises(RuntimeError, match="already registered"):
        opaque_object.register_opaque_type(second)  # what the second root meets unwrapped
    assert opaque_types_once().startswith("register_opaque_type wrapped")
    assert opaque_object.register_opaque_type(second) is None
    assert opaque_object._OPAQUE_TYPES[second] == opaque_object._OPAQUE_TYPES[first]
    assert opaque_types_once() == "already wrapped"


def _torch_utils(registered: list[str]) -> ModuleType:
    tu = ModuleType("vllm.utils.torch_utils")
    tu.vllm_lib = SimpleNamespace(ns="vllm")

    def direct_register_custom_op(op_name, op_func=None, target_lib=None):
        registered.append(op_name)

    tu.direct_register_custom_op = direct_register_custom_op
    return tu


class _Ops:
    """`torch.ops`: any namespace exists (empty unless given)."""

    def __init__(self, **namespaces):
        self.__dict__.update(namespaces)

    def __getattr__(self, name):
        return SimpleNamespace()


def test_custom_ops_skip_what_torch_ops_has():
    ops = _Ops(vllm=SimpleNamespace(known_op=object()))
    registered: list[str] = []
    tu = _torch_utils(registered)
    custom_ops_once(tu, ops)
    custom_ops_once(tu, ops)  # wrapping twice keeps one wrapper
    tu.direct_register_custom_op("known_op", None)
    tu.direct_register_custom_op(op_name="new_op")
    tu.direct_register_custom_op("other_ns_op", target_lib=SimpleNamespace(ns="other"))
    assert registered == ["new_op", "other_ns_op"]
