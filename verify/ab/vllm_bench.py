"""One A/B round's measurement on a server: `vllm bench serve` run in this process (its
`main`, the code behind the CLI), so a round costs the benchmark and not a fresh Python that
imports vLLM. Needs vLLM importable (the GPU bundle, or the CPU runtime's Python)."""

from __future__ import annotations

import argparse
import contextlib
import io
import urllib.request
from collections.abc import Callable

#: What a round keeps of `vllm bench serve`'s result (the rest stays in its own output).
METRICS = (
    "output_throughput",
    "request_throughput",
    "total_token_throughput",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_e2el_ms",  # the only latency of a pooling (embeddings) benchmark
    "p99_e2el_ms",
)


#: Server-side counters read from /metrics before and after a round (Prometheus text): the
#: engine's own view of the round, free of the benchmark client's Python overhead.
SERVER_SERIES = (
    "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:iteration_tokens_total_count",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


def scrape(base_url: str) -> dict[str, float]:
    """The SERVER_SERIES values now (summed over label sets); {} when /metrics is not served."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SERVER_SERIES:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def server_side(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per-round server metrics from two scrapes: mean inter-token latency (ms) and its inverse
    `server_token_rate` (tokens/s per request: at a fixed batch, the engine's output throughput
    up to a constant), engine steps, generated tokens, speculative-decoding counters."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    out = {}
    if d.get("vllm:inter_token_latency_seconds_count"):
        itl = (
            d["vllm:inter_token_latency_seconds_sum"] / d["vllm:inter_token_latency_seconds_count"]
        )
        out["server_mean_itl_ms"] = 1000 * itl
        out["server_token_rate"] = 1 / itl
    if "vllm:iteration_tokens_total_count" in d:
        out["server_steps"] = d["vllm:iteration_tokens_total_count"]
    if "vllm:generation_tokens_total" in d:
        out["server_generated_tokens"] = d["vllm:generation_tokens_total"]
    for key in SERVER_SERIES:
        if key.startswith("vllm:spec_decode_") and key in d:
            out[key.removeprefix("vllm:").removesuffix("_total")] = d[key]
    return out


def bench_args(base_url: str, model: str, tokenizer: str, extra: list[str]) -> argparse.Namespace:
    """`vllm bench serve` arguments for `base_url` (`extra`: dataset, lengths, prompts...)."""
    from vllm.benchmarks.serve import add_cli_args

    parser = argparse.ArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    argv = ["--base-url", base_url, "--model", model, "--tokenizer", tokenizer, "--disable-tqdm"]
    return parser.parse_args([*argv, *extra])


class _TimedRunMark(io.StringIO):
    """Swallows the benchmark's printout, and calls `at_start` once when the printout says the
    timed run starts (after its endpoint test request and its --num-warmups requests)."""

    MARK = "Starting main benchmark run"

    def __init__(self, at_start: Callable[[], None]):
        super().__init__()
        self.at_start, self.seen = at_start, False

    def write(self, text: str) -> int:
        if not self.seen and self.MARK in text:
            self.seen = True
            self.at_start()
        return super().write(text)


def run_bench(
    args: argparse.Namespace, seed: int, at_start: Callable[[], None] | None = None
) -> dict[str, float]:
    """One benchmark run (prompts drawn with `seed`); its printout is swallowed. The server's
    counters are read, and `at_start` is called, when the timed run starts (so warm-up requests
    count in neither), or before the run where the benchmark does not say when."""
    from vllm.benchmarks.serve import main

    args.seed = seed
    before: dict[str, float] = {}

    def start() -> None:
        before.clear()
        before.update(scrape(args.base_url))
        if at_start:
            at_start()

    start()
    with contextlib.redirect_stdout(_TimedRunMark(start)):
        result = main(args)
    if not result.get("completed"):
        raise RuntimeError(f"vllm bench serve completed no request against {args.base_url}")
    values = {k: float(result[k]) for k in METRICS if result.get(k) is not None}
    return {**values, **server_side(before, scrape(args.base_url))}
