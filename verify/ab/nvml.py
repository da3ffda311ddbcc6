"""What the engine's GPU did during one cell, from NVML's cumulative counters read before and
after it: mean power, the share of the cell's time the GPU was held back by its power cap or by
temperature, and the SM clock at the end against its maximum. A diagnostic beside tok/s, never
judged: it tells a GPU that slowed down (throttled, lower clocks) from a host that did (the
same clocks and less power: the GPU waited for work).

NVML comes from vLLM's bundled copy (vllm.third_party.pynvml) or nvidia-ml-py (pynvml); where
neither imports, or the GPU does not report a counter, the cell says why instead.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: nvmlDeviceGetViolationStatus's policy ids (NVML_PERF_POLICY_*) for the counters read here.
THROTTLE_POLICIES = {"power": 0, "thermal": 1}
NVML_CLOCK_SM = 1

_opened: dict = {}  # the process's NVML module and device handle, once opened


def load_nvml() -> ModuleType | None:
    """vLLM's pynvml, else nvidia-ml-py's; None where neither imports."""
    for name in ("vllm.third_party.pynvml", "pynvml"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def device_handle(nvml: ModuleType, visible: str | None):
    """NVML's handle of this process's first CUDA device: CUDA_VISIBLE_DEVICES's first entry
    (an index, or a GPU-... UUID), else device 0. NVML numbers devices in PCI bus order, as
    CUDA does for identical cards."""
    first = (visible or "0").split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(first.encode())
    return nvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)


def open_device(nvml: ModuleType | None = None, env: dict | None = None) -> tuple:
    """(nvml, handle) of the engine's GPU, opened once per process; (None, why) where NVML
    cannot be loaded or opened. `nvml`, `env`: stand-ins (tests)."""
    if nvml is None and "device" in _opened:
        return _opened["device"]
    module = nvml or load_nvml()
    if module is None:
        return None, "no NVML module (vllm.third_party.pynvml or pynvml)"
    try:
        module.nvmlInit()
        env = os.environ if env is None else env
        opened = (module, device_handle(module, env.get("CUDA_VISIBLE_DEVICES")))
    except Exception as exc:  # NVMLError and ctypes errors: the GPU's counters stay unread
        opened = (None, f"NVML could not open the GPU: {exc}")
    if nvml is None:
        _opened["device"] = opened
    return opened


def _read(fn, *args):
    try:
        return fn(*args)
    except Exception:  # a counter the GPU or driver does not report
        return None


def gpu_counters(nvml: ModuleType | None = None, env: dict | None = None) -> dict:
    """The GPU's cumulative counters now: energy (mJ since the driver loaded), ns held back by
    each of THROTTLE_POLICIES, the SM clock and its maximum (MHz); a counter the GPU does not
    report is left out; {"unavailable": why} where NVML cannot open it."""
    module, handle = open_device(nvml, env)
    if module is None:
        return {"unavailable": handle}
    got = {
        "energy_mj": _read(module.nvmlDeviceGetTotalEnergyConsumption, handle),
        "sm_clock_mhz": _read(module.nvmlDeviceGetClockInfo, handle, NVML_CLOCK_SM),
        "sm_clock_max_mhz": _read(module.nvmlDeviceGetMaxClockInfo, handle, NVML_CLOCK_SM),
    }
    for name, policy in THROTTLE_POLICIES.items():
        status = _read(module.nvmlDeviceGetViolationStatus, handle, policy)
        got[f"{name}_throttle_ns"] = None if status is None else status.violationTime
    return {k: v for k, v in got.items() if v is not None}


def gpu_shares(before: dict, after: dict, elapsed_s: float) -> dict:
    """One cell's GPU from two `gpu_counters`: mean power (W), the share of its `elapsed_s`
    held back by the power cap and by temperature, and the SM clock at its end over the
    maximum; {"unavailable": why} where neither read counted anything."""
    why = before.get("unavailable") or after.get("unavailable")
    if why or elapsed_s <= 0:
        return {"unavailable": why or "no time passed"}
    out: dict = {}
    if "energy_mj" in before and "energy_mj" in after:
        out["power_w"] = (after["energy_mj"] - before["energy_mj"]) / 1e3 / elapsed_s
    for name in THROTTLE_POLICIES:
        key = f"{name}_throttle_ns"
        if key in before and key in after:
            out[f"{name}_throttle"] = (after[key] - before[key]) / 1e9 / elapsed_s
    if after.get("sm_clock_max_mhz") and "sm_clock_mhz" in after:
        out["sm_clock"] = after["sm_clock_mhz"] / after["sm_clock_max_mhz"]
    return out or {"unavailable": "the GPU reports none of the counters"}
