"""MRV2's UVA buffers on a machine without an accelerator: plain CPU tensors stand in for
`buffer_utils.UvaBuffer` in the active import root (the equivalence tests' MRV2 roots and the
penalty-state memory script build MRV2 states on CPU)."""

from __future__ import annotations

import importlib

import torch


class HostBuffer:
    """buffer_utils.UvaBuffer without an accelerator: the "UVA" view is the CPU tensor."""

    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()
        self.uva = self.cpu


class HostViewBuffer:
    """The same where UvaBuffer hands out its view by a method, `uva(n)` (v0.33.0)."""

    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()

    def uva(self, n=None):
        return self.cpu[:n] if n is not None else self.cpu


def install() -> None:
    """In the active root: CPU tensors for the UVA buffers."""
    bu = importlib.import_module("vllm.v1.worker.gpu.buffer_utils")
    if callable(getattr(bu.UvaBuffer, "uva", None)):
        # The pool takes UvaBuffer where UVA is available, else a buffer on the platform's
        # device; here the CPU tensor is its own view.
        bu.UvaBuffer = HostViewBuffer
        bu.is_uva_available = lambda: True
    else:
        bu.UvaBuffer = HostBuffer
