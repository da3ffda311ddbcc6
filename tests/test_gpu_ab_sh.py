"""scripts/gpu_ab.sh without a GPU: a stand-in `python3` on PATH takes the device steps (model,
roots) and records the `python -m verify.ab serve` command line, which must parse with the A/B
core's own parser and carry each workload's bundle, variants, benchmark and metric."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from verify.ab.__main__ import build_parser

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_ab.sh"
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = - ]; then cat > /dev/null; exit 0; fi   # the device steps (model, roots, meta)
shift 2  # -m verify.ab
{ printf '%q ' "$@"; echo; } >> "$PB_TEST_ARGV"
exit "${PB_TEST_RC:-0}"
"""


def run(tmp_path: Path, workload: str, rc: int = 0, overlays=("0.18.1", "0.22.0")) -> list:
    """(exit code, [the serve argv of each attempt]) of `gpu_ab.sh t <workload>`; the stand-in
    serve exits with `rc`."""
    bin_dir, out, bundle = tmp_path / "bin", tmp_path / "out", tmp_path / "bundle"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (bundle / "site").mkdir(parents=True)
    (bundle / "site" / ".ready").touch()
    for version in overlays:
        (tmp_path / ".gpu" / "overlay" / version).mkdir(parents=True)
        (tmp_path / ".gpu" / "overlay" / version / "SERIES_HASH").write_text("abc\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out)}
    env |= {"PB_BUNDLE": str(bundle), "PB_WORK": str(tmp_path / "work"), "PB_CPUS": "0"}
    env |= {"PB_TEST_ARGV": str(tmp_path / "argv"), "PB_TEST_RC": str(rc)}
    done = subprocess.run(
        ["bash", str(SCRIPT), "t", workload], cwd=tmp_path, env=env, capture_output=True
    )
    lines = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else []
    return [done.returncode, [build_parser().parse_args(shlex.split(line)) for line in lines]]


def test_grit_serves_the_0181_bundle_through_the_embeddings_endpoint(tmp_path):
    code, (args,) = run(tmp_path, "grit")
    assert code == 0
    assert args.command == "serve" and args.metric == ["request_throughput"]
    assert args.base_site == str(tmp_path / "bundle" / "site")
    names = [v.split("=", 1)[0] for v in args.variant]
    assert names == ["pristine", "pristine2", "planted", "only-0001"]
    assert "only-0001=/tmp/pb-sites-0.18.1/only-0001" in args.variant
    assert "PATCHBENCH_PLANT_DELAY_MS=2," in args.variant[2]
    assert args.variant[2].endswith("PATCHBENCH_PLANT_COUNT_EVERY=1")
    assert args.compare == ["pristine:pristine2", "pristine:planted", "pristine:only-0001"]
    assert "--runner pooling --max-model-len 4000" in args.serve_args
    bench = shlex.split(args.bench_args)
    for flag in ("--backend openai-embeddings", "--endpoint /v1/embeddings", "--num-prompts 2000",
                 "--num-warmups 100", "--request-rate inf", "--dataset-name custom",
                 "--custom-output-len 1"):  # fmt: skip
        assert flag in args.bench_args
    assert bench[bench.index("--dataset-path") + 1] == str(tmp_path / "work/t/gritlm_bench.jsonl")
    assert "--skip-chat-template" in bench and "--ignore-eos" not in bench


def test_grit_tries_once_more_without_compilation_when_the_servers_fail(tmp_path):
    code, attempts = run(tmp_path, "grit", rc=1)
    assert code == 1 and len(attempts) == 2
    assert "--enforce-eager" not in attempts[0].serve_args
    assert "--enforce-eager" in attempts[1].serve_args
    assert attempts[1].work.endswith("/t/eager")


@pytest.mark.parametrize("workload", ["mrv2", "ngram"])
def test_generation_workloads_keep_their_bundle_metric_and_random_dataset(tmp_path, workload):
    code, attempts = run(tmp_path, workload, rc=1)
    assert code == 1 and len(attempts) == 1  # no retry outside grit
    (args,) = attempts
    assert args.metric == [] and "--dataset-name random --ignore-eos" in args.bench_args
    assert not any("0.18.1" in v for v in args.variant)


def test_unknown_workload_and_missing_overlay_are_refused(tmp_path):
    assert run(tmp_path / "a", "nope")[0] == 2
    assert run(tmp_path / "b", "grit", overlays=("0.22.0",)) == [3, []]
