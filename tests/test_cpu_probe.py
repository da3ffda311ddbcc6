"""verify.gpu.cpu_probe: per-CPU timings in rotating order, ranked by median."""

import pytest

from verify.gpu import cpu_probe


def fake_timer(speeds: dict[int, float], drift: list[float]):
    """A timer where CPU c takes speeds[c] times the machine's drift in that round."""
    calls = iter(range(10_000))

    def timer(cpu: int) -> float:
        return speeds[cpu] * drift[next(calls) // len(speeds) % len(drift)]

    return timer


def test_probe_visits_each_cpu_once_per_round_in_rotated_order():
    order: list[int] = []
    cpu_probe.probe([4, 5, 6], rounds=3, timer=lambda cpu: order.append(cpu) or 1.0)
    assert order == [4, 5, 6, 5, 6, 4, 6, 4, 5]


def test_slow_cpu_ranks_last_despite_machine_drift():
    speeds = {0: 1.0, 1: 1.3, 2: 1.05, 3: 0.98}
    times = cpu_probe.probe(list(speeds), rounds=6, timer=fake_timer(speeds, [1.0, 1.1, 0.95]))
    summary = cpu_probe.summarize(times)
    assert cpu_probe.fastest_cpus(summary, 2) == [0, 3]
    assert summary["cpus"]["1"]["relative"] == pytest.approx(1.3 / 0.98, rel=0.1)


def test_round_drift_is_reported_relative_to_the_first_round():
    speeds = {0: 1.0, 1: 1.0}
    drift = [1.0, 1.2]  # the whole machine slows in the second round
    summary = cpu_probe.summarize(
        cpu_probe.probe([0, 1], rounds=2, timer=fake_timer(speeds, drift))
    )
    assert summary["round_relative"] == pytest.approx([1.0, 1.2])


def test_asking_for_more_cpus_than_probed_is_a_named_error():
    summary = cpu_probe.summarize({0: [1.0], 1: [2.0]})
    with pytest.raises(cpu_probe.ProbeError, match="3 fastest CPUs of 2"):
        cpu_probe.fastest_cpus(summary, 3)
