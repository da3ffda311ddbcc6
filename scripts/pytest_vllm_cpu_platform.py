"""pytest plugin: run vLLM's own unit tests from an sdist/build tree on a CPU-only machine.

In an sdist tree (no vllm._C, no installed dist metadata, no GPU) vLLM resolves
``current_platform`` to UnspecifiedPlatform, whose ``device_type`` is "" and breaks
``torch.randn(..., device=DEVICE)``. This forces the CPU platform. Combine with
``TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=`` (vllm.triton_utils then keeps real Triton,
and kernels run in the interpreter) and ``--noconftest`` (vLLM's tests/conftest.py needs
test-only packages such as tblib). Example, from a build tree root (seed 001):

    PYTHONPATH=/work/main/scripts TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= \
      /tmp/eqprobe/bin/python -m pytest --noconftest -p pytest_vllm_cpu_platform \
      -p no:cacheprovider tests/v1/sample/test_rejection_sampler.py -k recovered_tokens -q
"""

import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform

platforms._current_platform = CpuPlatform()
