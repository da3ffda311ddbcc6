"""Copied as `sitecustomize.py` into a vLLM bundle whose compiled extensions were built for
another torch and CUDA than the GPU image's (vLLM 0.18.1's wheel: torch 2.10 + CUDA 12; the
image: torch 2.11 + CUDA 13) by scripts/pack_gpu_bundle.py. Every Python process with the
bundle on its path then, before anything imports vLLM:

1. loads the CUDA 12 runtime carried in the bundle (`_pb_cuda12/libcudart.so.12`), so that the
   extensions' dependency on `libcudart.so.12` resolves to it (the image has only CUDA 13's);
2. loads extension modules with lazy symbol binding (RTLD_LAZY instead of Python's RTLD_NOW):
   vLLM 0.18.1's `_C` references `c10::MessageLogger(const char*, int, int, bool)`, which torch
   2.11 replaced; every other torch symbol it uses is there. Bound lazily, a process that ever
   reaches that logger (a C++ `LOG` on an error path) stops there with "symbol lookup error"
   instead of every process failing at `import vllm._C`.

Standard library only; it runs before `verify` is importable."""

import ctypes
import os
import sys

_CUDART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_pb_cuda12", "libcudart.so.12")
if os.path.exists(_CUDART):
    ctypes.CDLL(_CUDART, mode=os.RTLD_GLOBAL)
sys.setdlopenflags((sys.getdlopenflags() & ~os.RTLD_NOW) | os.RTLD_LAZY)
