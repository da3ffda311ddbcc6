"""verify.ab.nvml: a cell's GPU from NVML's cumulative counters, against a stand-in NVML."""

from types import SimpleNamespace

import pytest

from verify.ab import engines, nvml


class _Nvml:
    """NVML as pynvml exposes it: counters that grow by what the test sets per read."""

    def __init__(self, fail_init=False, missing=()):
        self.fail_init, self.missing = fail_init, set(missing)
        self.opened = None
        self.energy_mj, self.throttle_ns = 0, {0: 0, 1: 0}
        self.sm_clock = 1980

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, index):
        self.opened = ("index", index)
        return self.opened

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.opened = ("uuid", uuid)
        return self.opened

    def _counter(self, name, value):
        if name in self.missing:
            raise RuntimeError("Not Supported")
        return value

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._counter("energy", self.energy_mj)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == nvml.NVML_CLOCK_SM
        return self._counter("clock", self.sm_clock)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return self._counter("clock", 1980)

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        value = self._counter(f"policy{policy}", self.throttle_ns[policy])
        return SimpleNamespace(violationTime=value)


def _cell(fake: _Nvml, seconds: float, watts: float, power_held: float, clock: int) -> dict:
    """gpu_shares of a cell of `seconds` at `watts`, held back by the power cap `power_held`
    of its time, ending at SM clock `clock`."""
    before = nvml.gpu_counters(fake, {})
    fake.energy_mj += int(watts * seconds * 1e3)
    fake.throttle_ns[0] += int(power_held * seconds * 1e9)
    fake.sm_clock = clock
    return nvml.gpu_shares(before, nvml.gpu_counters(fake, {}), seconds)


def test_a_cell_reads_mean_power_throttled_shares_and_the_sm_clock():
    got = _cell(_Nvml(), seconds=20.0, watts=600.0, power_held=0.25, clock=1485)
    assert got["power_w"] == pytest.approx(600.0)
    assert got["power_throttle"] == pytest.approx(0.25)
    assert got["thermal_throttle"] == 0.0
    assert got["sm_clock"] == pytest.approx(0.75)


def test_a_counter_the_gpu_does_not_report_is_left_out():
    got = _cell(_Nvml(missing={"policy0", "clock"}), 10.0, 300.0, 0.0, 1980)
    assert set(got) == {"power_w", "thermal_throttle"}
    none = _cell(_Nvml(missing={"energy", "policy0", "policy1", "clock"}), 10.0, 300.0, 0, 1980)
    assert "unavailable" in none


def test_without_nvml_the_cell_says_why():
    before = nvml.gpu_counters(_Nvml(fail_init=True), {})
    assert "Not Found" in before["unavailable"]
    assert "Not Found" in nvml.gpu_shares(before, before, 1.0)["unavailable"]


@pytest.mark.parametrize(
    "visible, opened",
    [
        (None, ("index", 0)),
        ("3,1", ("index", 3)),
        ("GPU-a8c6-67d0,GPU-ffff", ("uuid", b"GPU-a8c6-67d0")),
    ],
)
def test_the_engines_gpu_is_the_first_visible_cuda_device(visible, opened):
    fake = _Nvml()
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    nvml.gpu_counters(fake, env)
    assert fake.opened == opened


def test_timed_generate_records_the_gpu_of_its_cell(monkeypatch):
    reads = iter([0, 500_000])  # 500 J over the cell
    monkeypatch.setattr(engines, "gpu_counters", lambda: {"energy_mj": next(reads)})
    llm = SimpleNamespace(
        generate=lambda p, s, use_tqdm: [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1])])]
    )
    result = engines.timed_generate(llm, [{}], [None])
    assert result["gpu"]["power_w"] == pytest.approx(500.0 / result["elapsed_s"])
