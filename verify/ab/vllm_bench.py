"""One A/B round's measurement on a server: `vllm bench serve` run in this process (its
`main`, the code behind the CLI), so a round costs the benchmark and not a fresh Python that
imports vLLM. Needs vLLM importable (the GPU bundle, or the CPU runtime's Python)."""

from __future__ import annotations

import argparse
import contextlib
import io

#: What a round keeps of `vllm bench serve`'s result (the rest stays in its own output).
METRICS = (
    "output_throughput",
    "request_throughput",
    "total_token_throughput",
    "duration",
    "completed",
    "total_output_tokens",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
)


def bench_args(base_url: str, model: str, tokenizer: str, extra: list[str]) -> argparse.Namespace:
    """`vllm bench serve` arguments for `base_url` (`extra`: dataset, lengths, prompts...)."""
    from vllm.benchmarks.serve import add_cli_args

    parser = argparse.ArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    argv = ["--base-url", base_url, "--model", model, "--tokenizer", tokenizer, "--disable-tqdm"]
    return parser.parse_args([*argv, *extra])


def run_bench(args: argparse.Namespace, seed: int) -> dict[str, float]:
    """One benchmark run (prompts drawn with `seed`); its printout is swallowed."""
    from vllm.benchmarks.serve import main

    args.seed = seed
    with contextlib.redirect_stdout(io.StringIO()):
        result = main(args)
    if not result.get("completed"):
        raise RuntimeError(f"vllm bench serve completed no request against {args.base_url}")
    return {k: float(result[k]) for k in METRICS if result.get(k) is not None}
