"""Turn scripts/gpu_verify.py step files (results/gpu/<version>/<step>.json) into schema results.

    python scripts/import_gpu_results.py [--version 0.22.0]

Numbers, command, GPU, date and series hash are copied from the step files (measured on the
device), never recomputed or re-dated: a step measured with an older series shows as "stale"
in the reports until it is repeated. The verdict rules are written out below, per step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verify import build_ab, results, sparse_penalties
from verify.e2e.serving import interval_verdict
from verify.verdicts import growth
from verify.verdicts.growth import length_growth

ROOT = Path(__file__).resolve().parent.parent / "results" / "gpu"
DEVICE_NOTE = "(device run: H100, vLLM offline bundle, see results/gpu/README.md)"


def _load(version: str, step: str) -> dict | None:
    path = ROOT / version / f"{step}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _record(
    src: dict,
    step: str,
    seed: str,
    outcome: str,
    numbers: dict,
    reason: str = "",
    tables: list[str] | None = None,
) -> dict:
    result = results.make(
        step,
        seed,
        src["vllm_version"],
        outcome,
        numbers,
        reason=reason,
        command=f"{src['command']}  {DEVICE_NOTE}",
        gpu=src["gpu"],
        tables=tables,
    )
    result.update(date=src["date"], series_hash=src["series_hash"])
    result["machine"]["cpu"] = "GPU machine (16 cores)"
    return result


def _ratio(entry: dict) -> str:
    low, high = entry.get("ci95_low"), entry.get("ci95_high")
    ci = f" [{low:.2f}, {high:.2f}]" if low is not None else " (n=1, no CI)"
    return f"{entry['ratio']:.3f}{ci}"


def _attr_row(name: str, variant: str, a: dict | None) -> str:
    if not a:
        return f"| {name} | {variant} | - | - | - | - | - | - | - |"
    return (
        f"| {name} | {variant} | {a['sample_tokens_p50_ms']:.2f} | {a['sample_tokens_p99_ms']:.2f} "
        f"| {a['ready_wait_p50_ms']:.2f} | {a['ready_wait_p99_ms']:.2f} | {a['compute_p50_ms']:.2f} "
        f"| {a['compute_p99_ms']:.2f} | {a['get_output_wait_p99_ms']:.2f} |"
    )


def _round_attr_rows(
    src: dict, config: str, variants: dict[str, str], prefix: str = ""
) -> list[str]:
    """One attribution row per round and variant (the summary keeps only the first round,
    which can carry first-use costs of a freshly started engine)."""
    return [
        _attr_row(f"{prefix}{config} r{r['repeat']}", label, r.get("attribution"))
        for r in sorted(src["rounds"], key=lambda r: (r["repeat"], r["variant"]))
        for variant, label in variants.items()
        if r["config"] == config and r["variant"] == variant
    ]


ATTR_HEADER = (
    "| workload | variant | sample_tokens p50 ms | p99 | readiness wait p50 | p99 "
    "| compute p50 | p99 | get_output wait p99 |\n|---|---|---|---|---|---|---|---|---|"
)


def _penalty_rounds(src: dict) -> list[dict]:
    """Per round: plain and penalties tok/s of each variant, paired by round."""
    rounds = []
    for repeat in sorted({r["repeat"] for r in src["rounds"]}):
        row = {"run": src["date"], "repeat": repeat}
        for r in src["rounds"]:
            if r["repeat"] == repeat:
                row[f"{r['variant']}_{r['config']}"] = r["tok_per_s"]
        if len(row) == 6:
            rounds.append(row)
    return rounds


def _runs(version: str, step: str, src: dict) -> list[dict]:
    """Every complete run of `step` measured with src's series: an earlier n=1 run
    (`<step>-single.json`), further device calls (`<step>-run<k>.json`) and the main file."""
    extra = [_load(version, f"{step}-single")]
    extra += [
        json.loads(path.read_text()) for path in sorted((ROOT / version).glob(f"{step}-run*.json"))
    ]
    same = [
        run
        for run in extra
        if run and run.get("series_hash") == src["series_hash"] and "summary" in run
    ]
    return sorted([*same, src], key=lambda run: run["date"])


def _run_identity(run: dict) -> dict:
    """Token identity of one run: each config's token-id hash per variant."""
    return {
        "run": run["date"],
        **{
            config: {
                "identical": entry["outputs_identical"],
                **{v: entry[v]["hashes"] for v in ("pristine", "patched")},
            }
            for config, entry in run["summary"].items()
        },
    }


def penalties(version: str, step: str = "penalties-v1") -> dict | None:
    """Record of a V1 plain-vs-penalties step (penalties-v1: L=4096, penalties-v1-long)."""
    src = _load(version, step)
    if not src or "summary" not in src:
        return None
    runs = _runs(version, step, src)
    rounds = [r for run in runs for r in _penalty_rounds(run)]
    identity = [_run_identity(run) for run in runs]
    cost = {
        v: [1 - r[f"{v}_penalties"] / r[f"{v}_plain"] for r in rounds]
        for v in ("pristine", "patched")
    }
    mean_cost = {v: sum(c) / len(c) for v, c in cost.items()}
    identical = all(i[c]["identical"] for i in identity for c in ("plain", "penalties"))
    # Pristine's own tokens can change between engine starts (the per-run hashes show it):
    # say whether the patched tokens of each config are the same in every run.
    patched_stable = all(
        len({h for i in identity for h in i[c]["patched"]}) == 1 for c in ("plain", "penalties")
    )
    numbers = {
        "batch": src["spec"]["configs"]["penalties"]["batch"],
        "output_len": src["spec"]["configs"]["penalties"]["output_len"],
        "runner": "V1 (VLLM_USE_V2_MODEL_RUNNER=0)",
        "rounds": rounds,
        "pristine_penalty_cost_per_round": cost["pristine"],
        "patched_penalty_cost_per_round": cost["patched"],
        "pristine_penalty_cost_mean": mean_cost["pristine"],
        "patched_penalty_cost_mean": mean_cost["patched"],
        "penalties_patched_over_pristine_per_round": [
            r["patched_penalties"] / r["pristine_penalties"] for r in rounds
        ],
        "tokens_identical": identical,
        "tokens_per_run": identity,
        "patched_tokens_same_in_every_run": patched_stable,
        "note": "penalty cost = 1 - penalties tok/s / plain tok/s of the same variant and round; "
        "rounds of one run are interleaved, runs differ in machine state (spread of several "
        "points between runs)",
    }
    table = "\n".join(
        [
            "| run, round | pristine plain | pristine penalties | cost | patched plain "
            "| patched penalties | cost | penalties patched / pristine |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {r['run']} r{r['repeat']} | {r['pristine_plain']:.0f} "
                f"| {r['pristine_penalties']:.0f} | {cp:.1%} | {r['patched_plain']:.0f} "
                f"| {r['patched_penalties']:.0f} | {cq:.1%} "
                f"| {r['patched_penalties'] / r['pristine_penalties']:.2f}x |"
                for r, cp, cq in zip(rounds, cost["pristine"], cost["patched"], strict=True)
            ),
            f"| mean | | | {mean_cost['pristine']:.1%} | | | {mean_cost['patched']:.1%} | |",
        ]
    )
    attr = "\n".join(
        [
            ATTR_HEADER,
            *(
                row
                for config in ("plain", "penalties")
                for run in runs
                for row in _round_attr_rows(
                    run,
                    config,
                    {"patched": "patched"},
                    f"{run['date'][11:16]} " if len(runs) > 1 else "",
                )
            ),
        ]
    )
    # Rule: tokens identical in both configs, and the patched penalty cost within 5 % on the
    # mean over every round measured with this series (single rounds are listed beside it).
    ok = identical and mean_cost["patched"] <= 0.05
    problems = []
    if mean_cost["patched"] > 0.05:
        problems.append(f"patched mean penalty cost {mean_cost['patched']:.1%} > 5%")
    differing = [
        f"{i['run']} {c}" for i in identity for c in ("plain", "penalties") if not i[c]["identical"]
    ]
    if differing:
        problems.append(
            "pristine and patched tokens differ in "
            + ", ".join(differing)
            + (" (the patched tokens are the same in every run)" if patched_stable else "")
        )
    reason = "; ".join(problems)
    return _record(
        src, f"e2e-gpu-{step}", "003", "pass" if ok else "fail", numbers, reason, [table, attr]
    )


def spec_ngram(version: str) -> dict | None:
    src = _load(version, "spec-ngram")
    if not src or "summary" not in src:
        return None
    s = src["summary"]
    drafts = {c: e["pristine"].get("spec_decode", {}) for c, e in s.items()}
    numbers = {
        "runner": "V1, speculative_config ngram (4 tokens, lookup 2..4), random sampling with "
        "per-request seeds; prompts: an 8-token phrase repeated to 64 tokens",
        **{f"{c}_tokens_identical": e["outputs_identical"] for c, e in s.items()},
        **{f"{c}_patched_over_pristine": e["patched_over_pristine"] for c, e in s.items()},
        "spec_decode_counters_per_round": drafts,
    }
    table = "\n".join(
        [
            "| config | draft tokens / accepted (per round) | pristine tok/s | patched tok/s "
            "| patched / pristine (95% CI) | tokens identical |",
            "|---|---|---|---|---|---|",
            *(
                f"| {c} (T={src['spec']['configs'][c]['params']['temperature']}, "
                f"B={src['spec']['configs'][c]['batch']}) "
                f"| {drafts[c].get('vllm:spec_decode_num_draft_tokens', 0)} / "
                f"{drafts[c].get('vllm:spec_decode_num_accepted_tokens', 0)} "
                f"| {', '.join(f'{x:.0f}' for x in e['pristine']['tok_per_s'])} "
                f"| {', '.join(f'{x:.0f}' for x in e['patched']['tok_per_s'])} "
                f"| {_ratio(e['patched_over_pristine'])} | {e['outputs_identical']} |"
                for c, e in s.items()
            ),
        ]
    )
    identical = all(e["outputs_identical"] for e in s.values())
    proposed = sum(d.get("vllm:spec_decode_num_draft_tokens", 0) for d in drafts.values())
    ok = identical and proposed > 0
    reason = "" if ok else ("tokens differ" if not identical else "no draft tokens were proposed")
    return _record(
        src, "e2e-gpu-spec-ngram", "010", "pass" if ok else "fail", numbers, reason, [table]
    )


def micro_000(version: str) -> dict | None:
    src = _load(version, "micro-000")
    if not src or "summary" not in src:
        return None
    s = src["summary"]
    table = "\n".join(
        [
            "| batch config / size | pristine µs | patched µs | speedup (95% CI) | FP32 copy alone µs "
            "| copy skipped (patched) | ids identical |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {k} | {e['pristine_us']:.0f} | {e['patched_us']:.0f} | {e['speedup']:.2f} "
                f"[{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}] | {e['copy_us']:.0f} "
                f"| {e['patched_skips']} | {e['ids_identical']} |"
                for k, e in s.items()
            ),
        ]
    )
    identical = all(e["ids_identical"] for e in s.values())
    errors = sum(e["errors"] for e in s.values())
    numbers = {
        "what": "MRV2 Sampler.__call__(logits, input_batch), vocab 151936, bf16 logits; median "
        "per round of 200 calls (perf_counter + synchronize), 5 rounds, order alternated",
        "summary": s,
    }
    ok = identical and not errors
    return _record(
        src,
        "microbench-gpu-000",
        "000",
        "pass" if ok else "fail",
        numbers,
        "" if ok else "sampled ids differ or a configuration failed",
        [table],
    )


def _micro_job(version: str, name: str) -> tuple[dict, dict] | None:
    """(the job's output, its provenance) for a job of the micro step: the step's metadata with
    the job's own command and date; None unless both files are there."""
    job = _load(version, name)
    meta = _load(version, "micro")
    if not job or not meta:
        return None
    return job, {**meta, "command": job["command"], "date": job["date"]}


def micro_003(version: str) -> dict | None:
    if not (loaded := _micro_job(version, "micro-003")):
        return None
    bench, src = loaded
    rows = bench["results"]
    table = "\n".join(
        [
            "| L | penalty build pristine ms | patched ms | ratio | think scan pristine ms "
            "| patched ms | ratio |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {r['L']} | {r['penalties_pristine_ms']:.2f} | {r['penalties_patched_ms']:.2f} "
                f"| {r['penalties_ratio']:.1f}x | {r['think_pristine_ms']:.2f} "
                f"| {r['think_patched_ms']:.2f} | {r['think_ratio']:.0f}x |"
                for r in rows
            ),
        ]
    )
    numbers = {
        "batch": bench["params"]["batch"],
        "device": bench["device"],
        "results": rows,
        "growth_shortest_to_longest_L": length_growth(rows),
        "note": "host time per decode step on the GPU machine's CPU",
    }
    # Rule (issue 8, step 2): verify.growth (pristine grows > 4x, patched < 2x).
    judged = growth.judge(rows)
    ok, reason = judged.outcome == "pass", judged.reason
    return _record(
        src, "microbench-gpu-003", "003", "pass" if ok else "fail", numbers, reason, [table]
    )


def micro_003_apply(version: str) -> dict | None:
    """0008: dense vs sparse penalty math on the GPU (scripts/bench_penalties_apply.py)."""
    if not (loaded := _micro_job(version, "micro-003-apply")):
        return None
    bench, src = loaded
    p, rows = {**bench["params"], "device": bench["device"]}, bench["results"]
    ok, reason = sparse_penalties.verdict(p, rows)
    numbers = sparse_penalties.numbers(p, rows)
    table = sparse_penalties.table(rows)
    # The same sparse function, timed in an earlier device call of series 232dc57cb5 (before
    # the dense path was kept for CUDA logits): shown beside this run, not pooled.
    earlier = ROOT / version / "raw" / "micro-003-apply-232dc57cb5.json"
    if earlier.exists():
        numbers["earlier_run_232dc57cb5"] = json.loads(earlier.read_text())["results"]
        table += "\n\nEarlier run (series 232dc57cb5, same sparse function):\n\n"
        table += sparse_penalties.table(numbers["earlier_run_232dc57cb5"])
    return _record(
        src, "microbench-gpu-003-apply", "003", "pass" if ok else "fail", numbers, reason, [table]
    )


def micro_003_build(version: str) -> dict | None:
    """0009: the penalty staging fill, per-row loop (series up to 0008) vs one gather per step,
    on the GPU machine's host with CUDA staging (scripts/bench_003_build_ab.py; run in the
    micro step's device call, so the micro step's metadata is its provenance)."""
    if not (loaded := _micro_job(version, "micro-003-build-ab")):
        return None
    bench, src = loaded
    rows = bench["results"]
    numbers = build_ab.numbers(bench["params"], rows)
    ok, reason = build_ab.verdict(rows)
    return _record(
        src,
        "microbench-gpu-003-build",
        "003",
        "pass" if ok else "fail",
        numbers,
        reason,
        [build_ab.table(rows)],
    )


def staging_003(version: str) -> dict | None:
    """The micro step's race check of 003's double-buffered CUDA staging."""
    check = _load(version, "gpu_check_003_staging")
    meta = _load(version, "micro")
    # Only runs made by the micro step (they name the patched file they loaded); the file of
    # session 2 checked a pre-series staging patch outside any series and stays unimported.
    if not check or not meta or "penalties" not in check:
        return None
    src = {**meta, "command": check["command"]}
    stress, control = check["stress"], check["control_no_events"]
    numbers = {"stress": stress, "control_no_events": control, "timing_B128": check["timing_B128"]}
    # Rule: every build under a busy stream equals the list reference, the staging is pinned,
    # and the control (copy-done events disabled) shows corruption, so the check can see a race.
    ok = stress["mismatched_steps"] == 0 and stress["staging_pinned"]
    sees_races = control["mismatched_steps"] > 0
    reason = (
        ""
        if ok and sees_races
        else f"{stress['mismatched_steps']} of {stress['steps']} builds differ"
        if not ok
        else "the control saw no race: the stress test proves nothing"
    )
    return _record(
        src,
        "equivalence-gpu-003-staging",
        "003",
        "pass" if ok and sees_races else "fail",
        numbers,
        reason,
    )


def micro_002() -> dict | None:
    src = _load("0.18.1", "micro-002")
    if not src or "results" not in src:
        return None
    rows = []
    for r in src["results"]:
        for name, m in r["measures"].items():
            rows.append(
                f"| {r['batch']} | {r['prompt_len']} | {name} | {m['median_us']['pristine']:.1f} "
                f"| {m['median_us']['patched']:.1f} | {m['speedup']:.2f} "
                f"[{m['ci95'][0]:.2f}, {m['ci95'][1]:.2f}] |"
            )
    table = "\n".join(
        [
            "| batch | prompt len | measure | pristine µs | patched µs | speedup (95% CI) |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    record_src = {
        "vllm_version": "0.18.1",
        "command": src["command"],
        "gpu": src["gpu"],
        "date": src["date_utc"],
        "series_hash": src["series_hash"],
    }
    numbers = {
        "measures": {
            "md": "InputBatch.get_pooling_metadata() alone",
            "md_read": "get_pooling_metadata() + the GritLM pooler's host read of the prompt ids "
            "+ synchronize",
            "step": "_make_sampling_metadata() (pristine copies the ids to the GPU there) + md_read",
        },
        "results": [
            {
                "batch": r["batch"],
                "prompt_len": r["prompt_len"],
                **{
                    k: {
                        "pristine_us": m["median_us"]["pristine"],
                        "patched_us": m["median_us"]["patched"],
                        "speedup": m["speedup"],
                        "ci95": m["ci95"],
                    }
                    for k, m in r["measures"].items()
                },
            }
            for r in src["results"]
        ],
        "contents_identical": src["contents_ok"],
    }
    ok = bool(src["contents_ok"]) and src.get("status") == "ok"
    result = _record(
        record_src,
        "microbench-gpu-002",
        "002",
        "pass" if ok else "fail",
        numbers,
        "" if ok else "prompt-id contents differ or the run failed",
        [table],
    )
    return result


def attribution(version: str) -> dict | None:
    src = _load(version, "attribution")
    if not src or "summary" not in src:
        return None
    labels = {"only-0005": "pristine+004 timers", "patched": "full series"}
    rows, numbers = [ATTR_HEADER], {}
    for config, entry in src["summary"].items():
        rows += _round_attr_rows(src, config, labels)
        for variant in labels:
            # Per round (in repeat order): the rounds of one run can differ a lot.
            per_round = [
                r["attribution"]
                for r in sorted(src["rounds"], key=lambda r: r["repeat"])
                if r["config"] == config and r["variant"] == variant and r.get("attribution")
            ]
            key = f"{config}_{'pristine' if variant == 'only-0005' else 'patched'}"
            for field in (
                "sample_tokens_p50_ms",
                "sample_tokens_p99_ms",
                "ready_wait_p99_ms",
                "p99_tail_wait_share",
            ):
                numbers[f"{key}_{field.removesuffix('_ms')}_per_round"] = [
                    a[field] for a in per_round
                ]
        numbers[f"{config}_tokens_identical"] = entry["outputs_identical"]
    ok = all(e["outputs_identical"] for e in src["summary"].values())
    return _record(
        src,
        "gpu-attribution",
        "004",
        "pass" if ok else "fail",
        numbers,
        "" if ok else "tokens differ between the variants",
        ["\n".join(rows)],
    )


def mrv2(version: str) -> dict | None:
    src = _load(version, "mrv2")
    if not src or "summary" not in src:
        return None
    s = src["summary"]
    numbers = {f"{c}_patched_over_pristine": e["patched_over_pristine"] for c, e in s.items()}
    numbers.update({f"{c}_tokens_identical": e["outputs_identical"] for c, e in s.items()})
    numbers["runner"] = "MRV2 (VLLM_USE_V2_MODEL_RUNNER=1), 128 prompts x 2 in / 512 out"
    table = "\n".join(
        [
            "| config | pristine tok/s | patched tok/s | patched / pristine (95% CI) | tokens identical |",
            "|---|---|---|---|---|",
            *(
                f"| {c} | {', '.join(f'{x:.0f}' for x in e['pristine']['tok_per_s'])} "
                f"| {', '.join(f'{x:.0f}' for x in e['patched']['tok_per_s'])} "
                f"| {_ratio(e['patched_over_pristine'])} | {e['outputs_identical']} |"
                for c, e in s.items()
            ),
        ]
    )
    ok = all(e["outputs_identical"] for e in s.values())
    return _record(
        src,
        "e2e-gpu-mrv2",
        "000",
        "pass" if ok else "fail",
        numbers,
        "" if ok else "tokens differ",
        [table],
    )


def embeddings(version: str) -> dict | None:
    src = _load(version, "embed-gritlm")
    if not src or "summary" not in src:
        return None
    e = src["summary"]["embed"]
    numbers = {
        "model": "random-weight GritLM (Llama body, instruction-trimming mean pooler)",
        "prompts": 2048,
        "pristine_prompts_per_s": e["pristine"]["prompts_per_s"],
        "patched_prompts_per_s": e["patched"]["prompts_per_s"],
        "patched_over_pristine": e["patched_over_pristine"],
        "vectors_identical": e["outputs_identical"],
    }
    ok = e["outputs_identical"]
    return _record(
        src,
        "gpu-embeddings-gritlm",
        "002",
        "pass" if ok else "fail",
        numbers,
        "" if ok else "embedding vectors differ",
    )


def upstream_tests(version: str) -> dict | None:
    src = _load(version, "upstream-tests")
    if not src or "variants" not in src:
        return None
    v = src["variants"]
    numbers = {
        f"{name}_{key}": v[name][key]
        for name in ("pristine", "patched")
        for key in ("tests", "passed", "failures", "errors", "skipped")
    }
    numbers["new_failures"] = src["summary"]["new_failures"]
    numbers["pre_existing_failures"] = src["summary"]["pre_existing_failures"]
    numbers["commands"] = {name: v[name]["command"] for name in v}
    ok = not numbers["new_failures"] and v["patched"]["failures"] == v["patched"]["errors"] == 0
    return _record(
        src,
        "upstream-tests-gpu",
        "series",
        "pass" if ok else "fail",
        numbers,
        "" if ok else f"new failures: {numbers['new_failures']}",
    )


def serving(version: str) -> list[dict]:
    src = _load(version, "serve-bench")
    if not src or "summary" not in src:
        return []
    ratio = src["summary"]["output_throughput_patched_over_pristine"]
    table = "\n".join(
        [
            "| round | variant | output tok/s | median TPOT ms | p99 TPOT ms | p99 ITL ms |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['repeat']} | {r['variant']} | {r['output_throughput']:.0f} | {r['median_tpot_ms']:.2f} "
                f"| {r['p99_tpot_ms']:.2f} | {r['p99_itl_ms']:.2f} |"
                for r in src["rounds"]
            ),
        ]
    )
    out = [
        _record(
            src,
            "gpu-serve-bench",
            "000",
            "pass",
            {
                "output_throughput_patched_over_pristine": ratio,
                "workload": "vllm bench serve random 2 in / 512 out, 128 prompts, 16 warmups, rate inf, "
                "MRV2, --ignore-eos",
                "verdict": interval_verdict(ratio.get("ci95_low"), ratio.get("ci95_high")),
            },
            tables=[table],
        )
    ]
    return out


def gsm8k(version: str) -> list[dict]:
    src = _load(version, "gsm8k-lmeval")
    if not src or "gsm8k" not in src:
        return []
    g = src["gsm8k"]
    seq, conc = g["sequential"], g["concurrent"]
    same = seq["identical_responses"] == g["samples"]
    numbers = {
        "samples": g["samples"],
        "sequential_identical": seq["identical_responses"],
        "concurrent_identical": conc["identical_responses"],
        "concurrent_differing": conc["differing"],
        "accuracy": seq["accuracy"],
        "note": "greedy zero-shot /v1/completions to both servers; one request at a time (the A/B "
        "check) and all 64 in flight (batch composition differs between the servers, so float "
        "rounding may; reported, not the verdict); random weights, accuracy ~0",
    }
    out = [
        _record(
            src,
            "gpu-gsm8k-identity",
            "000",
            "pass" if same else "fail",
            numbers,
            ""
            if same
            else f"{g['samples'] - seq['identical_responses']} sequential responses differ",
        )
    ]
    lm = src.get("lm_eval")
    if lm and "error" not in lm:
        ok = not lm["differing_doc_ids"] and lm["scores"]["pristine"] == lm["scores"]["patched"]
        out.append(
            _record(
                src,
                "gpu-gsm8k-lmeval",
                "000",
                "pass" if ok else "fail",
                lm,
                "" if ok else f"responses differ for docs {lm['differing_doc_ids']}",
            )
        )
    elif lm:
        out.append(_record(src, "gpu-gsm8k-lmeval", "000", "fail", lm, "lm_eval failed"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="0.22.0")
    args = parser.parse_args()
    made = [
        penalties(args.version),
        penalties(args.version, "penalties-v1-long"),
        attribution(args.version),
        mrv2(args.version),
        embeddings(args.version),
        upstream_tests(args.version),
        *serving(args.version),
        *gsm8k(args.version),
        spec_ngram(args.version),
        micro_000(args.version),
        micro_003(args.version),
        micro_003_apply(args.version),
        micro_003_build(args.version),
        staging_003(args.version),
        micro_002() if args.version == "0.22.0" else None,
    ]
    for result in filter(None, made):
        path = results.write(result, "gpu", result["step"])
        print(
            f"{path.relative_to(ROOT.parent.parent)}: {result['outcome']} "
            f"(series {result['series_hash']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
