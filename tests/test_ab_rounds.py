"""The A/B core's round loop: rotating orders, warm-up discarded, time budget, and a planted
effect resolved with the right sign and size while an A/A comparison is not."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from verify.ab import rounds
from verify.ab.__main__ import parse_variant, planted_prediction
from verify.ab.variants import PLANT_SITE


def test_two_variants_alternate_and_each_leads_equally():
    orders = rounds.round_orders(["a", "b"], 4)
    assert orders == [("a", "b"), ("b", "a"), ("a", "b"), ("b", "a")]


def test_three_variants_take_every_position_equally():
    orders = rounds.round_orders(["a", "b", "c"], 6)
    for pos in range(3):
        assert sorted(o[pos] for o in orders) == ["a", "a", "b", "b", "c", "c"]


def _noisy_machine(effects: dict[str, float], noise: float, seed: int = 0):
    """A measure: throughput 1000 x a per-round machine drift x per-variant effect x noise."""
    rng = random.Random(seed)
    drift: dict[int, float] = {}

    def measure(variant: str, index: int) -> dict[str, float]:
        drift.setdefault(index, rng.uniform(0.8, 1.2))  # shared by the round's variants
        value = 1000 * drift[index] * effects.get(variant, 1.0) * rng.gauss(1, noise)
        return {"output_throughput": value}

    return measure


def test_planted_effect_is_resolved_with_its_sign_and_size_and_aa_is_not():
    measure = _noisy_machine({"planted": 0.97}, noise=0.004)
    done = rounds.run_rounds(measure, ["pristine", "pristine2", "planted"], 30, warmup=2)
    assert sum(r.warmup for r in done) == 2 and len(done) == 32
    kw = {"threshold": 0.01, "higher_is_better": True}
    aa = rounds.compare(done, "pristine", "pristine2", "output_throughput", **kw)
    planted = rounds.compare(done, "pristine", "planted", "output_throughput", **kw)
    assert aa["outcome"] == "no difference resolved"
    assert aa["low"] < 1 < aa["high"] and aa["high"] / aa["low"] < 1.01
    assert planted["outcome"] == "slower"
    assert planted["low"] < 0.97 < planted["high"]


def test_warmup_rounds_are_not_counted():
    def measure(variant, index):  # the first round is 10x slower for one variant only
        slow = 10.0 if index == 0 and variant == "b" else 1.0
        return {"output_throughput": 100 / slow}

    done = rounds.run_rounds(measure, ["a", "b"], 3, warmup=1)
    assert rounds.paired(done, "a", "b", "output_throughput").ratio == pytest.approx(1.0)


def test_budget_stops_before_a_round_that_would_not_fit():
    now = [0.0]

    def measure(variant, index):
        now[0] += 10.0  # every measurement takes 10 s: a round of two takes 20 s
        return {"output_throughput": 1.0}

    done = rounds.run_rounds(measure, ["a", "b"], 50, warmup=0, budget_s=65, clock=lambda: now[0])
    assert len(done) == 3  # 60 s spent; a fourth round would end at 80 s


def test_unpaired_or_single_variant_is_an_error():
    with pytest.raises(ValueError, match="two distinct variants"):
        rounds.run_rounds(lambda v, i: {}, ["a", "a"], 2)


def test_variant_spec_parsing():
    assert parse_variant("pristine=", "/site") == ("pristine", ["/site"], {})
    name, paths, env = parse_variant("planted=plant,PATCHBENCH_PLANT_DELAY_MS=1", "/site")
    assert (name, paths, env) == (
        "planted",
        [str(PLANT_SITE), "/site"],
        {"PATCHBENCH_PLANT_DELAY_MS": "1"},
    )
    assert parse_variant("patched=/p", "/site") == ("patched", ["/p", "/site"], {})
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_variant("x=/p,oops", "/site")


def test_planted_prediction_is_the_all_on_critical_path_bound():
    rnd = rounds.Round(0, ("a", "p"))
    rnd.values = {"a": {"duration": 4.0}, "p": {"planted_steps": 500, "planted_slept_s": 0.5}}
    assert planted_prediction(rnd, "a", "p") == pytest.approx(4.0 / 4.5)
    # the engine's view: 1 ms planted per step on a 5 ms inter-token latency
    rnd.values["a"]["server_mean_itl_ms"] = 5.0
    got = planted_prediction(rnd, "a", "p", "server_token_rate")
    assert got == pytest.approx(5.0 / 6.0)
    rnd.values["p"]["planted_slept_s"] = 0.0  # nothing slept: no prediction
    assert planted_prediction(rnd, "a", "p", "server_token_rate") is None


def test_spec_decode_counters_are_read_per_round():
    from verify.ab.vllm_bench import server_side

    before = {"vllm:spec_decode_num_draft_tokens_total": 10.0}
    after = {"vllm:spec_decode_num_draft_tokens_total": 74.0}
    assert server_side(before, after) == {"spec_decode_num_draft_tokens": 64.0}


def test_a_whole_installation_replaces_the_base_site(tmp_path):
    (tmp_path / "vllm-0.22.0+pb.abc.dist-info").mkdir()
    (tmp_path / "vllm-0.22.0+pb.abc.dist-info" / "METADATA").write_text("Version: 0.22.0+pb.abc")
    assert parse_variant(f"wheel={tmp_path}", "/site") == ("wheel", [str(tmp_path)], {})


def test_server_side_metrics_are_per_round_deltas():
    from verify.ab.vllm_bench import server_side

    before = {
        "vllm:generation_tokens_total": 1000,
        "vllm:inter_token_latency_seconds_sum": 5.0,
        "vllm:inter_token_latency_seconds_count": 1000,
        "vllm:iteration_tokens_total_count": 40,
    }
    after = {
        "vllm:generation_tokens_total": 3000,
        "vllm:inter_token_latency_seconds_sum": 17.0,
        "vllm:inter_token_latency_seconds_count": 3000,
        "vllm:iteration_tokens_total_count": 60,
    }
    got = server_side(before, after)
    assert got == {
        "server_mean_itl_ms": pytest.approx(6.0),
        "server_token_rate": pytest.approx(1000 / 6.0),
        "server_steps": 20,
        "server_generated_tokens": 2000,
    }
    assert server_side({}, {}) == {}


def test_records_round_trip():
    done = rounds.run_rounds(_noisy_machine({}, 0.01), ["a", "b"], 3, warmup=1)
    back = rounds.from_records(rounds.as_records(done))
    assert back == done


def test_cpu_plan_gives_each_server_its_own_cpus_and_keeps_some_for_the_client():
    from verify.ab.__main__ import cpu_plan

    driver, own = cpu_plan(4, 3, list(range(16)))
    assert driver == [0, 1, 2, 3]
    assert own == [[4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]]
    with pytest.raises(SystemExit, match="needs more than the 16 CPUs"):
        cpu_plan(4, 4, list(range(16)))  # nothing left for the benchmark client


def test_planted_prediction_of_request_throughput_is_the_stretched_run():
    rnd = rounds.Round(0, ("a", "p"))
    rnd.values = {"a": {"duration": 2.0}, "p": {"planted_steps": 80, "planted_slept_s": 0.04}}
    assert planted_prediction(rnd, "a", "p", "request_throughput") == pytest.approx(2.0 / 2.04)


class _FakeServer:
    """Stands in for `vllm serve`: healthy at once; its planted count file is written by the
    fake benchmark below, as the planted shim would."""

    def __init__(self, cmd, env, port, log, label, health_s):
        self.env, self.url = env, f"http://127.0.0.1:{port}"

    def start(self):
        return self

    def wait_healthy(self):
        return 1.0

    def stop(self):
        pass


def _fake_pooling_bench(monkeypatch, effects: dict[str, float]):
    """An embeddings benchmark (no output tokens): 2000 requests in 2 s x the variant's
    slowdown; the planted variant sleeps 10 ms in 50 steps per run."""
    import argparse

    from verify.ab import __main__ as ab
    from verify.ab import vllm_bench

    servers: dict[str, _FakeServer] = {}
    real_server_for = ab.server_for

    def server_for(name, paths, env, args, work, cpus=None):
        servers[name] = real_server_for(name, paths, env, args, work, cpus)
        return servers[name]

    def bench_args(url, model, tokenizer, extra):
        return argparse.Namespace(url=url)

    def run_bench(args, seed, at_start):
        name = next(n for n, s in servers.items() if s.url == args.url)
        duration = 2.0 / effects.get(name, 1.0) * (1 + 0.001 * (seed % 3))
        count = servers[name].env.get("PATCHBENCH_PLANT_COUNT")
        for slept, steps in ((0.05, 7), (0.01, 50)):  # the warm-ups, then the timed run
            if count:
                before = ab.read_count(Path(count))
                Path(count).write_text(f"{before[0] + steps} {before[1] + slept}")
            if steps == 7:
                at_start()
        return {"request_throughput": 2000 / duration, "duration": duration, "completed": 2000}

    monkeypatch.setattr(ab, "Server", _FakeServer)
    monkeypatch.setattr(ab, "server_for", server_for)
    monkeypatch.setattr(ab, "provenance", ab.host_provenance)
    monkeypatch.setattr(vllm_bench, "bench_args", bench_args)
    monkeypatch.setattr(vllm_bench, "run_bench", run_bench)


def test_serve_judges_the_metric_asked_for(tmp_path, monkeypatch):
    """A pooling server's A/B (--metric request_throughput): every comparison on request
    throughput, the planted one with its expected size, and no output-token metric."""
    import json

    from verify.ab.__main__ import main

    effects = {"planted": 2.0 / 2.01, "only-0001": 1.3}
    _fake_pooling_bench(monkeypatch, effects)
    out = tmp_path / "ab.json"
    argv = ["serve", "--model", "m", "--base-site", "/site", "--work", str(tmp_path / "w")]
    for spec in ("pristine=", "pristine2=", "planted=plant,PATCHBENCH_PLANT_DELAY_MS=1"):
        argv += ["--variant", spec]
    argv += ["--variant", "only-0001=/sites/only-0001", "--metric", "request_throughput"]
    for pair in ("pristine:pristine2", "pristine:planted", "pristine:only-0001"):
        argv += ["--compare", pair]
    assert main([*argv, "--rounds", "6", "--warmup", "1", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["metrics"] == ["request_throughput"]
    aa, planted, patch = record["comparisons"]
    assert all(c["metric"] == "request_throughput" for c in record["comparisons"])
    assert "output_throughput" not in json.dumps(record["comparisons"])
    assert planted["predicted_if_all_on_critical_path"] == pytest.approx(2.0 / 2.01, rel=2e-3)
    assert (patch["variant"], patch["outcome"]) == ("only-0001", "faster")
    assert patch["ratio"] == pytest.approx(1.3, rel=1e-2)


def test_run_bench_reads_the_server_when_the_timed_run_starts(monkeypatch):
    """The benchmark's warm-up requests count neither in the server's deltas nor in what
    `at_start` reads: both are taken when its printout says the timed run starts."""
    import argparse
    import sys
    import types

    from verify.ab import vllm_bench

    counter = {"vllm:iteration_tokens_total_count": 0.0}
    seen = []

    def main(args):
        print("Warming up with 100 requests...")
        counter["vllm:iteration_tokens_total_count"] += 30  # warm-up steps
        print("Warmup run completed.")
        print("Starting main benchmark run...")
        counter["vllm:iteration_tokens_total_count"] += 12  # the timed run's steps
        return {"completed": 2000, "request_throughput": 900.0, "duration": 2.2}

    serve = types.ModuleType("vllm.benchmarks.serve")
    serve.main = main
    monkeypatch.setitem(sys.modules, "vllm.benchmarks.serve", serve)
    monkeypatch.setattr(vllm_bench, "scrape", lambda url: dict(counter))
    args = argparse.Namespace(base_url="http://x")
    at_start = lambda: seen.append(counter["vllm:iteration_tokens_total_count"])  # noqa: E731
    values = vllm_bench.run_bench(args, seed=3, at_start=at_start)
    assert values["server_steps"] == 12 and values["request_throughput"] == 900.0
    assert seen == [0.0, 30.0]  # before the run (a fallback), then at the timed run's start


METRICS_TEXT = """# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 90.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 100.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 100.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 0.25
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 101.0
"""


def test_scrape_reads_the_engines_itl_from_prometheus_text():
    """/metrics as vLLM serves it, parsed by prometheus_client: a round's mean ITL follows."""
    import http.server
    import threading

    from verify.ab.vllm_bench import scrape, server_side

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server name)
            body = METRICS_TEXT.encode() if self.path == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        after = scrape(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
    assert after["vllm:generation_tokens_total"] == 101.0
    got = server_side({}, after)
    assert got["server_mean_itl_ms"] == pytest.approx(2.5)
    assert got["server_generated_tokens"] == 101.0
    assert scrape("http://127.0.0.1:9") == {}  # nothing listens: no metrics, no error


def test_rounds_with_restart_blocks_compare_over_blocks_and_round_trip() -> None:
    """Rounds tagged with their engine-restart block: the comparison counts blocks (n) and
    rounds, the raw records keep the tag, and untagged rounds compare per round as before."""
    from verify.ab import rounds as ab_rounds

    rounds = [
        ab_rounds.Round(i, ("a", "b"), {"a": {"x": 10.0}, "b": {"x": 10.0 * f}}, i == 0, i // 3)
        for i, f in enumerate([1.0, 1.01, 1.012, 0.99, 0.991, 0.989, 1.0, 1.001, 1.002])
    ]
    cmp = ab_rounds.compare(rounds, "a", "b", "x", threshold=0.01, higher_is_better=True)
    assert (cmp["n"], cmp["blocks"], cmp["rounds"]) == (3, 3, 8)
    assert "engine restarts (8 rounds)" in cmp["text"]
    back = ab_rounds.from_records(ab_rounds.as_records(rounds))
    assert [r.block for r in back] == [r.block for r in rounds]
    plain = [ab_rounds.Round(r.index, r.order, r.values, r.warmup) for r in rounds]
    assert "block" not in ab_rounds.as_records(plain)[0]
    assert ab_rounds.compare(plain, "a", "b", "x", threshold=0.01, higher_is_better=True)["n"] == 8
