"""Every verdict rule is fed data on which it must fail (and data on which it must not pass)."""

from __future__ import annotations

import pytest

from verify import stats
from verify.verdicts import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNRESOLVED,
    Verdict,
    combine,
    growth,
    identity,
    kernel,
    performance,
    serve_bench,
)

BASE = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0]
THRESHOLD = 0.05  # a noise threshold as a registry step states it


def _scaled(factor: float, noise=(1.0, 1.01, 0.99, 1.0, 1.005, 0.995)) -> list[float]:
    return [b * factor * n for b, n in zip(BASE, noise, strict=True)]


# identity ----------------------------------------------------------------------------------
def test_identity_fails_when_the_control_agrees_and_patched_differs() -> None:
    assert identity.judge(identical=False, control_identical=True).outcome == FAIL


def test_identity_is_inconclusive_when_pristine_differs_from_itself() -> None:
    assert identity.judge(identical=True, control_identical=False).outcome == INCONCLUSIVE
    assert identity.judge(identical=False, control_identical=False).outcome == INCONCLUSIVE


def test_identity_without_control() -> None:
    assert identity.judge(identical=False, control_identical=None).outcome == INCONCLUSIVE
    ok = identity.judge(identical=True, control_identical=None)
    assert ok.outcome == PASS and "no pristine-vs-pristine control" in ok.reason
    assert identity.judge(identical=True, control_identical=True).outcome == PASS


@pytest.mark.parametrize(
    ("a", "b", "position"),
    [([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 5, 3], 1), ([1, 2], [1, 2, 3], 2)],
    ids=["equal", "differs", "prefix"],
)
def test_first_difference(a, b, position) -> None:
    assert identity.first_difference(a, b) == position


def test_share_identical() -> None:
    assert identity.share_identical(3, 4) == 0.75
    assert identity.share_identical(0, 0) is None


@pytest.mark.parametrize(
    ("top_b", "close"),
    [([[9, 2], [4]], True), ([[9, 8], [4]], False)],
    ids=["each-choice-in-the-other-top-k", "pristine-choice-outside-patched-top-k"],
)
def test_logprobs_close_is_judged_at_the_first_divergence_only(top_b, close) -> None:
    # Position 1 differs (2 vs 9); position 2 (3 vs 4) is past the divergence: not compared.
    ids_a, top_a = [1, 2, 3], [[1], [2, 9], [3]]
    assert identity.logprobs_close(ids_a, top_a, [1, 9, 4], [[1], *top_b]) is close
    assert identity.logprobs_close(ids_a, top_a, ids_a, []) is True  # identical ids
    assert identity.logprobs_close(ids_a, [[1]], [1, 9, 4], [[1]]) is None  # top-k not recorded


# performance -------------------------------------------------------------------------------
def test_performance_fails_on_a_resolved_slowdown() -> None:
    v = performance.judge(stats.paired_ratio(BASE, _scaled(1.3)), 0.02)
    assert v.outcome == FAIL and "slower" in v.reason


def test_performance_no_difference_is_not_a_pass() -> None:
    noisy = [130.0, 75.0, 120.0, 80.0, 125.0, 70.0]
    v = performance.judge(stats.paired_ratio(BASE, noisy), 0.02)
    assert v.outcome == UNRESOLVED and "could resolve only" in v.reason
    one = performance.judge(stats.paired_ratio([1.0], [0.5]), 0.02)
    assert one.outcome == UNRESOLVED
    assert one.reason.count("no interval") == 1 and "could resolve" not in one.reason


def test_performance_passes_only_what_it_claims() -> None:
    faster = stats.paired_ratio(BASE, _scaled(0.7))
    assert performance.judge(faster, 0.02).outcome == PASS
    same = stats.paired_ratio(BASE, _scaled(1.0))
    assert performance.judge(same, 0.02, claim="faster").outcome == UNRESOLVED
    assert performance.judge(same, 0.05, claim="not slower").outcome == PASS
    thru = stats.paired_ratio(BASE, _scaled(0.7))  # throughput down 30%
    assert performance.judge(thru, 0.02, lower_is_better=False).outcome == FAIL


def test_an_unresolved_not_slower_says_how_many_rounds_would_bound_it() -> None:
    wide = stats.from_log_ratios([0.04, -0.04, 0.03, -0.03])
    v = performance.judge(wide, 0.02, claim="not slower", lower_is_better=False)
    need = v.numbers["rounds_to_within"]
    assert v.outcome == UNRESOLVED and f"about {need} rounds in all" in v.reason and need > 4
    lost = stats.from_log_ratios([0.07, -0.13, 0.07, -0.13])  # a 3% loss: no rounds bound it
    v = performance.judge(lost, 0.02, claim="not slower", lower_is_better=False)
    assert v.numbers["rounds_to_within"] is None and "rounds in all" not in v.reason


# kernel ------------------------------------------------------------------------------------
def _row(variant: str, eager: float, host: float | None, identical: bool = True, **shape):
    shape = {"vocab": 32000, "requests": 1, "draft_tokens": 1, "draft_probs": False, **shape}
    return {
        "variant": variant,
        "baseline": "0.22.0",
        **shape,
        "identical": identical,
        "graph_us": _scaled(0.01),  # the graph time is always fast: it must not decide
        "eager_us": _scaled(eager),
        "host_us": _scaled(host) if host is not None else [],
    }


def test_kernel_fails_on_a_wrong_output() -> None:
    rows = [_row("0.22.0", 0.1, 0.1), _row("split", 0.05, 0.05, identical=False)]
    assert kernel.judge(rows, "split", THRESHOLD, "faster").outcome == FAIL


def test_kernel_fails_when_only_the_graph_time_wins() -> None:
    rows = [_row("0.22.0", 0.1, 0.1), _row("split", 0.3, 0.3)]
    v = kernel.judge(rows, "split", THRESHOLD, "faster")
    assert v.outcome == FAIL and "slower" in v.reason


def test_kernel_fails_on_host_cost_even_when_eager_wins() -> None:
    rows = [_row("0.22.0", 0.1, 0.1), _row("split", 0.05, 0.4)]
    v = kernel.judge(rows, "split", THRESHOLD, "faster")
    assert v.outcome == FAIL and "host" in v.reason


def test_kernel_counts_shapes_and_fails_on_one_slow_shape() -> None:
    rows = [
        _row("0.22.0", 0.1, 0.1),
        _row("split", 0.05, 0.08),
        _row("0.22.0", 0.5, 0.1, requests=64),
        _row("split", 1.5, 0.1, requests=64),
    ]
    v = kernel.judge(rows, "split", THRESHOLD, "faster")
    assert v.outcome == FAIL and "fail at 1 of 2 shapes" in v.reason
    assert kernel.judge(rows[:2], "split", THRESHOLD, "faster").outcome == PASS


def test_kernel_without_host_time_never_passes() -> None:
    rows = [_row("0.22.0", 0.1, None), _row("split", 0.05, None)]
    v = kernel.judge(rows, "split", THRESHOLD, "faster")
    assert v.outcome == INCONCLUSIVE and "host time not recorded" in v.reason


# serve-bench -------------------------------------------------------------------------------
def _serve(thr: float, itl: float) -> dict[str, list[float]]:
    return {"output_throughput": _scaled(thr), "p99_itl_ms": _scaled(itl)}


def test_serve_bench_fails_on_a_p99_itl_rise_at_equal_throughput() -> None:
    v = serve_bench.judge(_serve(1, 1), _serve(1, 3.9), THRESHOLD)
    assert v.outcome == FAIL and "p99_itl_ms" in v.reason


def test_serve_bench_fails_on_lower_throughput() -> None:
    assert serve_bench.judge(_serve(1, 1), _serve(0.8, 1), THRESHOLD).outcome == FAIL


def test_serve_bench_passes_a_resolved_non_regression_only() -> None:
    assert serve_bench.judge(_serve(1, 1), _serve(1, 1), THRESHOLD).outcome == PASS
    noisy = {"output_throughput": [200.0, 60, 150, 90, 180, 70], "p99_itl_ms": _scaled(1)}
    assert serve_bench.judge(_serve(1, 1), noisy, THRESHOLD).outcome == UNRESOLVED


def test_serve_bench_leaves_out_a_round_that_measured_nothing_and_says_so() -> None:
    burst = {**_serve(1, 1), "p99_itl_ms": [*_scaled(1)[:5], 0.003]}  # the stream in one burst
    v = serve_bench.judge(_serve(1, 1), burst, THRESHOLD)
    assert v.outcome == PASS and "1 of 6 rounds measured nothing" in v.reason
    assert v.numbers["p99_itl_ms"]["rounds_left_out"] == [5]


def test_serve_bench_still_fails_a_regression_beside_a_round_that_measured_nothing() -> None:
    slow = _serve(1, 3.9)
    slow["p99_itl_ms"][0] = 0.003
    v = serve_bench.judge(_serve(1, 1), slow, THRESHOLD)
    assert v.outcome == FAIL and "p99_itl_ms" in v.reason


def test_serve_bench_does_not_judge_a_metric_that_measured_nothing() -> None:
    bursts = {**_serve(1, 1), "p99_itl_ms": [0.003, 0.002, 0.003, 0.004, 0.003, 90.0]}
    v = serve_bench.judge(_serve(1, 1), bursts, THRESHOLD)
    assert v.outcome == UNRESOLVED and "p99_itl_ms not judged: 5 of 6 rounds" in v.reason


# growth ------------------------------------------------------------------------------------
def _growth_rows(pristine: list[float], patched: list[float]) -> list[dict]:
    return [
        {"L": L, "penalties_pristine_ms": a, "penalties_patched_ms": b}
        for L, a, b in zip((256, 1024, 4096, 12288), pristine, patched, strict=True)
    ]


def test_growth_passes_the_130x_improvement_the_old_rule_failed() -> None:
    # results/cpu/0.22.0/bench_003.json: pristine 0.60 -> 25.2 ms, patched 0.053 -> 0.194 ms
    v = growth.judge(_growth_rows([0.60, 2.18, 8.67, 25.2], [0.053, 0.063, 0.163, 0.194]))
    assert v.outcome == PASS and "130x faster" in v.reason


def test_growth_fails_when_patched_still_scales_with_length() -> None:
    v = growth.judge(_growth_rows([0.6, 2.2, 8.7, 25.2], [0.3, 1.1, 4.3, 12.6]))
    assert v.outcome == FAIL and "still scales" in v.reason


def test_growth_fails_when_patched_is_slower_at_the_longest_length() -> None:
    assert growth.judge(_growth_rows([0.6, 2, 8, 25], [30, 30, 30, 30])).outcome == FAIL


def test_growth_fails_the_first_h100_run_whose_patched_build_grew_9_8x() -> None:
    rows = _growth_rows([1.40, 5, 20, 54.9], [0.39, 1, 2, 3.84])
    assert growth.judge(rows).outcome == FAIL


def test_growth_is_inconclusive_when_pristine_does_not_grow() -> None:
    assert growth.judge(_growth_rows([1, 1, 1, 1.5], [0.1] * 4)).outcome == INCONCLUSIVE


# outcomes ----------------------------------------------------------------------------------
def test_combine_and_vocabulary() -> None:
    assert combine([Verdict(PASS), Verdict(FAIL, "x")]).outcome == FAIL
    assert combine([Verdict(PASS), Verdict(UNRESOLVED, "y")]).outcome == UNRESOLVED
    with pytest.raises(ValueError):
        Verdict("ok")
    with pytest.raises(ValueError):
        Verdict(FAIL)


def test_shapes_fail_on_one_slower_shape_and_pass_on_resolved_speedups() -> None:
    fast, same, slow = (stats.paired_ratio(BASE, _scaled(f)) for f in (0.5, 1.0, 1.5))
    v = performance.judge_shapes({"b1": same, "b8": fast, "b64": slow}, 0.02)
    assert v.outcome == FAIL and "slower at 1 of 3: b64" in v.reason
    v = performance.judge_shapes({"b1": same, "b8": fast}, 0.02)
    assert v.outcome == PASS and "faster at 1 of 2" in v.reason and "b1" in v.reason
    assert performance.judge_shapes({"b1": same}, 0.02).outcome == UNRESOLVED
    assert performance.judge_shapes({"b1": same}, 0.05, claim="not slower").outcome == PASS


def test_shapes_not_slower_refuses_a_pass_while_a_regression_is_not_excluded() -> None:
    tight = stats.Ratio(1.0, 0.99, 1.01, 10, None)
    wide = stats.Ratio(1.0, 0.90, 1.08, 10, None)  # no difference resolved, 8% not excluded
    single = stats.Ratio(0.9, None, None, 1, None)
    for shapes in ({"b1": tight, "b8": wide}, {"b1": tight, "b8": single}):
        v = performance.judge_shapes(shapes, 0.05, claim="not slower")
        assert v.outcome == UNRESOLVED and "b8" in v.reason and "b1" not in v.reason
    throughput = stats.Ratio(1.0, 0.93, 1.1, 10, None)  # higher is better: 1/0.93 > 1.05
    v = performance.judge_shapes({"tok/s": throughput}, 0.05, claim="not slower",
                                 lower_is_better=False)  # fmt: skip
    assert v.outcome == UNRESOLVED
    assert performance.judge_shapes({"b1": tight}, 0.05, claim="not slower").outcome == PASS
