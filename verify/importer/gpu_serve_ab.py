"""GPU tier, serving A/B runs of the A/B core (scripts/gpu_ab.sh: `python -m verify.ab serve`,
servers pristine, pristine2, planted and the patch's variants alive at once, measured in
rotating order) -> one record per patch the run measured, judged only where the same rounds'
A/A and planted controls behaved. Runs named in SERVE_AB are read by name; a registry step with
reader `serve-ab` names its own record and runs (the importer loop).
"""

from __future__ import annotations

from pathlib import Path

from verify import registry, results
from verify.ab import rounds as ab_rounds
from verify.errors import PatchbenchError
from verify.gpu import shapes as model_shapes
from verify.importer.gpu import _patch_numbers, _record, provenance
from verify.verdicts import FAIL, INCONCLUSIVE, Verdict, performance, resolution

#: The metrics a serving A/B is judged on: the engine's token rate (the inverse of the server's
#: own mean inter-token latency, free of the benchmark client's overhead), the client's output
#: throughput, and for a pooling server (no tokens generated) the client's request throughput.
SERVE_METRICS = {
    "server_token_rate": "engine token rate (1 / server mean ITL)",
    "output_throughput": "client output throughput",
    "request_throughput": "client request throughput",
}
GENERATION = ("server_token_rate", "output_throughput")  # in order of preference

#: gpu_ab.sh's workloads: name -> (what a round runs, the metrics it may be judged on, in
#: order of preference: the first the run has is judged).
WORKLOADS = {
    "mrv2": (
        "vllm bench serve in process, random 2 in / 512 out, 128 prompts, rate inf, "
        "--ignore-eos, MRV2 (the default runner for Qwen3)",
        GENERATION,
    ),
    "ngram": (
        "vllm bench serve in process, random 64 in / 512 out, 16 prompts, 4 at a time, "
        "temperature 1, --ignore-eos; V1 runner with ngram speculative decoding (4 tokens); a "
        "random model that repeats its last token, so drafts are proposed at every step",
        GENERATION,
    ),
    "grit": (
        "vllm bench serve in process, --backend openai-embeddings --endpoint /v1/embeddings, "
        "custom dataset of 2000 GritLM instruction prompts (upstream PR #38139's), rate inf, "
        "100 warm-up requests per run; vllm serve --runner pooling --max-model-len 4000 on a "
        "random-weight GritLM (Llama body, 12 layers, hidden 1024) whose tokenizer yields the "
        "instruction pattern the GritLM pooler trims (verify/gpu/gritlm.py)",
        ("request_throughput",),
    ),
}


def patch_comparison(src: dict, number: str) -> tuple[str, str] | None:
    """(baseline, variant) of the run's comparison for patch `number`: `only-NNNN` against
    pristine, or `at-NNNN` against the series one patch earlier (a variant, or an engine run's
    cell `variant/config`)."""
    for cmp in src["comparisons"]:
        if cmp["variant"].split("/", 1)[0] in (f"only-{number}", f"at-{number}"):
            return cmp["baseline"], cmp["variant"]
    return None


def _predicted(comparison: dict, metric: str) -> float | None:
    """The planted comparison's expected ratio of `metric` (the first metric of the run sits
    at the comparison's top level, the others under their names)."""
    entry = comparison.get(metric) or (comparison if comparison.get("metric") == metric else {})
    return entry.get("predicted_if_all_on_critical_path")


def short_rounds(rounds: list[ab_rounds.Round]) -> dict[str, int]:
    """{variant: counted rounds in which it completed fewer requests than the run's most}: a
    server that failed requests (a failed request shortens the benchmark, not its rate)."""
    done = [v["completed"] for r in rounds for v in r.values.values() if "completed" in v]
    most = max(done, default=0)
    short: dict[str, int] = {}
    for rnd in rounds:
        for name, values in rnd.values.items():
            if values.get("completed", most) < most:
                short[name] = short.get(name, 0) + 1
    return short


class UnknownWorkload(PatchbenchError):
    """A serving A/B run names a workload this reader does not describe."""


def workload_of(src: dict, where: Path) -> tuple[str, tuple[str, ...]]:
    """(description, judged metrics) of the run's workload; a production shape adds its model
    and logit scale to the description."""
    if src.get("workload") not in WORKLOADS:
        raise UnknownWorkload(
            f"{where}: workload {src.get('workload')!r}; known: {', '.join(WORKLOADS)}"
        )
    text, judged = WORKLOADS[src["workload"]]
    if src.get("model") in model_shapes.SHAPES:
        text += (
            f"; model: the {src['model']} shape on vLLM's dummy weights, logits scaled by "
            f"{float(src['logit_scale']):.6g} (the engine calibration for 1.0 nats of mean "
            "next-token entropy)"
        )
    return text, judged


def read(version: str, step: registry.Step, entry: registry.Entry, runs: list[Path]) -> dict | None:
    """The importer loop's reader `serve-ab`: the newest of `runs` (by date) judged into the
    record the registry step names, for the step's patch; None when the run did not measure it."""
    where, src = results.newest_run(runs)
    number = _patch_numbers(version, step.records[0]).get(entry.slug)
    pair = patch_comparison(src, number) if number else None
    if pair is None:
        return None  # this run did not measure the patch
    return judged_record(version, src, where, step.records[0], entry.slug, pair)


def _gpu_name(src: dict) -> str:
    gpu = provenance(src)["gpu"]
    return "GPU" if gpu == results.UNKNOWN else gpu


def judged_record(
    version: str, src: dict, where: Path, record_step: str, seed: str, pair: tuple[str, str]
) -> dict:
    """The record of serving A/B run `src` (file `where`) for the patch compared as `pair`
    (baseline, variant): judged only where the same rounds' A/A and planted controls behaved."""
    workload, judged = workload_of(src, where)
    done = ab_rounds.from_records(src["rounds"])
    counted = [r for r in done if not r.warmup]
    present = [m for m in judged if all(m in v for r in counted for v in r.values.values())]
    if not present:
        raise PatchbenchError(
            f"{where}: no counted round has {' or '.join(judged)} "
            "for every variant (what this workload is judged on); re-run scripts/gpu_ab.sh"
        )
    metric = present[0]
    planted_cmp = next(c for c in src["comparisons"] if c["variant"] == "planted")
    aa = ab_rounds.paired(done, "pristine", "pristine2", metric)
    planted = ab_rounds.paired(done, "pristine", "planted", metric)
    limit = registry.threshold(version, record_step)  # also the A/A the controls must hold
    calibration = resolution.judge(aa, planted, _predicted(planted_cmp, metric), limit)
    short = short_rounds(counted)
    eager = (
        "; vllm serve ran with --enforce-eager (gpu_ab.sh's retry after the servers failed to "
        "start with compilation)"
        if "--enforce-eager" in " ".join(src.get("argv", []))
        else ""
    )
    controls = [("pristine2 / pristine (A/A)", "pristine", "pristine2")]
    controls.append(("planted / pristine", "pristine", "planted"))
    wheel = (
        [("patched CUDA wheel / pristine", "pristine", "wheel")]
        if "wheel" in src["variants"]
        else []
    )
    rows = ["| comparison | metric | ratio [95% CI] | n | MDE |", "|---|---|---|---|---|"]
    for m in present:
        for title, base, var in [*controls, (f"{pair[1]} / {pair[0]}", *pair), *wheel]:
            r = ab_rounds.paired(done, base, var, m)
            rows.append(f"| {title} | {SERVE_METRICS[m]} | {r.text()} | {r.n} | {r.mde:.1%} |")
    ratio = ab_rounds.paired(done, *pair, metric)
    what = SERVE_METRICS[metric]
    perf = performance.judge(ratio, limit, claim="faster", lower_is_better=False, what=what)
    failed = ", ".join(f"{v} in {n} of {len(counted)} rounds" for v, n in sorted(short.items()))
    if pair[1] in short:
        verdict = Verdict(FAIL, f"requests failed ({failed}): fewer completed than the run's most")
    elif short:
        verdict = Verdict(INCONCLUSIVE, f"requests failed ({failed}); {perf.reason}")
    elif calibration.outcome == FAIL:
        verdict = Verdict(INCONCLUSIVE, f"the run's controls failed: {calibration.reason}")
    else:
        verdict = Verdict(perf.outcome, f"{perf.reason}; this run {calibration.reason}")
    numbers = {
        "metric": metric,
        "baseline": pair[0],
        "variant": pair[1],
        "ratio": ratio.as_dict(),
        "calibration": calibration.outcome,
        **calibration.numbers,
        "startup_s": src["startup_s"],
        "wheel": src.get("wheel"),
        "workload": f"{workload}; {len(src['variants'])} servers on one "
        f"{_gpu_name(src)}, one "
        "measurement per variant per round, rotating order, warm-up rounds discarded" + eager,
    }
    if short:
        numbers["rounds_with_failed_requests"] = short
    tokens = {v.get("total_input_tokens") for r in counted for v in r.values.values()} - {None}
    if tokens:  # what the server counted (usage.prompt_tokens): the prompts' real length
        numbers["total_input_tokens_per_run"] = sorted(tokens)
    tables = ["\n".join(rows)]
    return _record(src, record_step, seed, verdict, numbers, tables=tables)
