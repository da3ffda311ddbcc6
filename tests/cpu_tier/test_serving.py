"""Server lifecycle and bench parsing with fake servers (no vLLM needed)."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.e2e import serving
from verify.e2e.serving import Server, ServerError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours counts as gone
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _fake(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


NEVER_HEALTHY = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open(sys.argv[0] + ".child", "w").write(str(child.pid))
    print("fake engine: loading weights forever", flush=True)
    time.sleep(300)
"""

HEALTHY = """
    import http.server, sys
    port = int(sys.argv[1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_never_healthy_fails_with_log_tail_and_leaves_no_process(tmp_path):
    port = serving.free_port()
    cmd = _fake(tmp_path, NEVER_HEALTHY)
    srv = Server(cmd, dict(os.environ), port, tmp_path / "server.log", health_timeout=3)
    srv.start()
    pid = srv.proc.pid
    with pytest.raises(ServerError) as err:
        srv.wait_healthy()
    msg = str(err.value)
    assert "was not healthy" in msg and "within 3s" in msg and "it was killed" in msg
    assert "fake engine: loading weights forever" in msg  # the log tail
    child = int(Path(cmd[1] + ".child").read_text())
    time.sleep(0.5)
    assert not _alive(pid) and not _alive(child)


def test_server_that_exits_early(tmp_path):
    cmd = _fake(tmp_path, "import sys; print('boom: bad flag', flush=True); sys.exit(3)")
    srv = Server(cmd, dict(os.environ), serving.free_port(), tmp_path / "s.log", health_timeout=30)
    with pytest.raises(ServerError, match=r"exited with code 3 before it was healthy(.|\n)*boom"):
        with srv:
            pass


def test_port_in_use_is_refused_before_starting(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        srv = Server([sys.executable, "-c", "pass"], dict(os.environ), port, tmp_path / "s.log")
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            srv.start()
        assert srv.proc is None


def test_healthy_server_context_stops_it(tmp_path):
    port = serving.free_port()
    cmd = [*_fake(tmp_path, HEALTHY), str(port)]
    with Server(cmd, dict(os.environ), port, tmp_path / "s.log", health_timeout=30) as srv:
        pid = srv.proc.pid
        assert srv.healthy() and srv.startup_s is not None
    time.sleep(0.3)
    assert not _alive(pid)


def test_parse_bench_and_ratio_ci(tmp_path):
    data = {m: 10.0 for m in serving.METRICS}
    data["completed"] = 16
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    assert serving.parse_bench(path)["output_throughput"] == 10.0
    path.write_text(json.dumps({"output_throughput": 1}))
    with pytest.raises(serving.PatchbenchError, match="lacks"):
        serving.parse_bench(path)
    ci = serving.ratio_ci([100, 100, 100], [110, 90, 100])
    assert (
        ci["ratio"] == pytest.approx((1.1 * 0.9) ** (1 / 3)) and ci["ci95"][0] < 1 < ci["ci95"][1]
    )
    assert serving.ratio_ci([100], [105])["ci95"] == [None, None]
    # A round that measured ~0 (bursty ITL) is left out with its pair instead of giving a 500x
    # ratio; with no pair left there is no ratio.
    odd = serving.ratio_ci([4.26, 4.39, 0.0024], [3.9, 4.1, 3.7])
    assert odd["rounds_left_out"] == [2] and odd["n"] == 2
    assert odd["ratio"] == pytest.approx(((3.9 / 4.26) * (4.1 / 4.39)) ** 0.5)
    row = serving.table({"median_itl_ms": {"pristine_mean": 2.9, "patched_mean": 3.9, **odd}})
    assert "(1 pair(s) left out: a round measured ~0)" in row
    none = serving.ratio_ci([0.0024, 0.003], [3.9, 4.1])
    assert none["ratio"] is None and "0.0024" in none["degenerate"]
    row = serving.table({"median_itl_ms": {"pristine_mean": 0.0, "patched_mean": 4.0, **none}})
    assert "n/a (every pair measured ~0)" in row


def _rounds(*throughputs: float) -> list[dict]:
    """Bench rounds: every metric of serving.METRICS, output throughput as given."""
    return [
        {**{m: 1.0 for m in serving.METRICS}, "output_throughput": t, "p99_itl_ms": 20.0}
        for t in throughputs
    ]


def test_a_slowdown_of_two_rounds_is_confirmed_before_it_fails():
    """A CI run's two rounds with patched 23% below pristine in both (the host, not the
    patch: 33 other runs of the same code were unresolved). More rounds that show no
    slowdown join them and the slowdown is not believed; a slowdown that holds still fails;
    a first verdict that is no failure asks for no more rounds."""
    first = {"pristine": _rounds(6789, 6685), "patched": _rounds(5191, 5160)}
    assert serving.judge_runs(first, 0.05).outcome == "fail"
    asked = []

    def alike(count: int) -> dict:
        asked.append(count)
        noise = [1.0 + 0.01 * ((-1) ** i) for i in range(count)]
        return {"pristine": _rounds(*[6000 * x for x in noise]),
                "patched": _rounds(*[6000 / x for x in noise])}  # fmt: skip

    verdict, runs, note = serving.judged_with_confirmation(first, alike, 4, 0.05)
    assert asked == [4] and verdict.outcome != "fail" and len(runs["patched"]) == 6
    assert note.startswith("the first 2 rounds resolved a slowdown") and "over all 6" in note

    def slower(count: int) -> dict:
        return {"pristine": _rounds(*[6500 + i for i in range(count)]),
                "patched": _rounds(*[5000 + i for i in range(count)])}  # fmt: skip

    verdict, runs, note = serving.judged_with_confirmation(first, slower, 4, 0.05)
    assert verdict.outcome == "fail" and "fail over all 6" in note
    same = {"pristine": _rounds(6000, 6100), "patched": _rounds(6050, 6020)}
    verdict, runs, note = serving.judged_with_confirmation(same, alike, 4, 0.05)
    assert asked == [4] and note is None and runs is same


def test_serve_bench_confirms_on_the_same_servers_and_records_it(monkeypatch, tmp_path):
    calls, written = [], {}

    def run_bench(ctx, servers, work, repeats, num_prompts, input_len, output_len, first_rep=0):
        calls.append((repeats, first_rep, servers))
        if first_rep == 0:
            runs = {"pristine": _rounds(6789, 6685), "patched": _rounds(5191, 5160)}
        else:
            runs = {"pristine": _rounds(*[6000] * repeats), "patched": _rounds(*[6010] * repeats)}
        return {"runs": runs}

    def write_result(ctx, step, patch, outcome, numbers, tables, reason):
        written.update(outcome=outcome, numbers=numbers, reason=reason)

    monkeypatch.setattr(serving, "run_bench", run_bench)
    monkeypatch.setattr(serving, "write_result", write_result)
    monkeypatch.setattr(serving, "workdir", lambda version, name: tmp_path)
    servers = {
        "pristine": SimpleNamespace(startup_s=1.0),
        "patched": SimpleNamespace(startup_s=1.0),
    }
    ok = serving.serve_bench(SimpleNamespace(version="0.22.0"), repeats=2, servers=servers)
    assert ok and written["outcome"] != "fail"
    assert [(r, f) for r, f, _ in calls] == [(2, 0), (4, 2)] and calls[1][2] is servers
    assert written["numbers"]["repeats"] == 6 and "over all 6" in written["numbers"]["confirmation"]
    assert "more rounds on the same servers" in written["reason"]


class _EngineCounters:
    """A server's /metrics ITL counters: each round it serves adds 100 tokens of `itl_s`."""

    def __init__(self, itl_s: float):
        self.itl_s, self.calls = itl_s, 0

    def scrape(self) -> dict[str, float]:
        rounds = (self.calls + 1) // 2  # scraped before and after each round
        self.calls += 1
        return {
            "vllm:inter_token_latency_seconds_sum": self.itl_s * 100 * rounds,
            "vllm:inter_token_latency_seconds_count": 100.0 * rounds,
        }


def test_run_bench_records_the_engines_own_itl_per_round(monkeypatch, tmp_path):
    """Each round reads the engine's /metrics before and after it; the summary gives the
    paired ratio of the engine's mean ITL beside the client's metrics."""
    counters = {"http://p": _EngineCounters(0.002), "http://q": _EngineCounters(0.003)}
    monkeypatch.setattr(serving.vllm_bench, "scrape", lambda url: counters[url].scrape())
    monkeypatch.setattr(serving, "bench_cmd", lambda *args: ["vllm", "bench", "serve"])
    monkeypatch.setattr(serving.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    monkeypatch.setattr(serving, "parse_bench", lambda path: _rounds(5000)[0])
    ctx = SimpleNamespace(runtime=SimpleNamespace(env=lambda root: {}))
    servers = {
        "pristine": SimpleNamespace(url="http://p"),
        "patched": SimpleNamespace(url="http://q"),
    }
    runs = serving.run_bench(ctx, servers, tmp_path, 3, 8, 16, 16)["runs"]
    assert [r["server_mean_itl_ms"] for r in runs["pristine"]] == pytest.approx([2.0] * 3)
    summary = serving.summarize(runs)
    assert summary["server_mean_itl_ms"]["ratio"] == pytest.approx(1.5)
    assert "| server_mean_itl_ms | 2.00 | 3.00 | 1.500 |" in serving.table(summary)


def test_summary_leaves_out_an_engine_metric_some_round_lacks():
    """A server without /metrics gives no engine ITL; the summary then has no such row."""
    runs = {"pristine": _rounds(5000, 5100), "patched": _rounds(5050, 5020)}
    runs["pristine"][0]["server_mean_itl_ms"] = 2.0
    assert "server_mean_itl_ms" not in serving.summarize(runs)
    assert "output_throughput" in serving.summarize(runs)


def test_servers_keep_their_stats_for_the_engine_itl():
    """--disable-log-stats empties /metrics, and with it the engine ITL of every round."""
    ctx = SimpleNamespace(runtime=SimpleNamespace(vllm_cmd=lambda *args: list(args)), model="m")
    cmd = serving.serve_cmd(ctx, 8000)
    assert cmd[0] == "serve" and "--disable-log-stats" not in cmd
