"""GPU tier: scripts/gpu_verify.py step files (results/gpu/<version>/<step>.json) -> records.

Numbers, command, GPU, date and series hash are copied from the step files (measured on the
device), never recomputed or re-dated: a step measured with an older series shows as "stale"
in the reports until it is repeated. Provenance is what the step file recorded; a field it
lacks (the step files name no Python or CPU) is "unknown (not recorded by the run)". Each
record's verdict comes from a rule in verify.verdicts.
"""

from __future__ import annotations

from pathlib import Path

from verify import build_ab, paths, registry, results, sparse_penalties, stats
from verify.importer.cpu import build_effect
from verify.series import read_series
from verify.verdicts import (
    FAIL,
    Verdict,
    combine,
    growth,
    identity,
    performance,
    serve_bench,
)
from verify.verdicts.growth import length_growth

DEVICE_NOTE = "(device run, vLLM offline bundle, see docs/gpu-runbook.md)"


def gpu_root() -> Path:
    return paths.results_root() / "gpu"


def _load(version: str, step: str) -> dict | None:
    path = gpu_root() / version / f"{step}.json"
    return results.read_json(path) if path.exists() else None


def params(version: str, record: str) -> dict:
    """The `params` of the first registry step on `version` that names record step `record`
    and states any ({} where none does): what its reader judges or shows besides the rule."""
    return next((step.params for _, step in registry.naming(version, record) if step.params), {})


def provenance(src: dict) -> dict:
    """The machine fields a step file recorded (at its top level, under `versions`, or under
    `machine` as the A/B core's front-ends write them); the rest said to be unknown, never
    filled in."""
    versions = src.get("versions", {})
    machine = src.get("machine", {})
    spec = src.get("spec", {})
    out = {
        "python": src.get("python") or versions.get("python") or machine.get("python"),
        "cpu": machine.get("cpu_model") or src.get("cpu") or machine.get("cpu"),
        "gpu": src.get("gpu") or machine.get("gpu"),
        "torch": src.get("torch") or versions.get("torch") or machine.get("torch"),
    }
    out = {k: v or results.UNKNOWN for k, v in out.items()}
    if spec or "compile_env" in src:  # an engine step: its engine settings
        out["env"] = {**spec.get("env", {}), **src.get("compile_env", {})} or results.UNKNOWN
        out["engine"] = spec.get("engine") or results.UNKNOWN
    return out


def _record(
    src: dict,
    step: str,
    seed: str,
    outcome: str | Verdict,
    numbers: dict,
    reason: str = "",
    tables: list[str] | None = None,
    key_table: str | None = None,
    note: str = "",  # follows the command (default: where a GPU run ran)
) -> dict:
    if isinstance(outcome, Verdict):
        outcome, reason = outcome.outcome, outcome.reason
    result = results.make(
        step,
        seed,
        src["vllm_version"],
        outcome,
        numbers,
        reason=reason,
        command=f"{src['command']}  {note or DEVICE_NOTE}",
        tables=tables,
        key_table=key_table,
        machine=provenance(src),
        date=src["date"],
    )
    results.restamp(result, src.get("series_hash") or "unknown")
    recorded = src.get("patch_hashes") or {}
    if recorded:  # the run recorded each patch's diff hash: staleness per patch from it
        entries = registry.load()
        for slug in result["patches"]:
            subject = entries[slug].pins.get(src["vllm_version"], "") if slug in entries else ""
            result["patches"][slug] = recorded.get(subject, "unknown")
    return result


def _tok_ratio(entry: dict, key: str = "tok_per_s") -> stats.Ratio | None:
    """Patched/pristine ratio of paired rounds (index i of each list = round i)."""
    a, b = entry["pristine"].get(key, []), entry["patched"].get(key, [])
    n = min(len(a), len(b))
    return stats.paired_ratio(a[:n], b[:n]) if n else None


def _identity_and_speed(
    entries: dict, claim: str, threshold: float, key: str = "tok_per_s", what: str = "tokens"
) -> tuple[Verdict, dict]:
    """Identity per config (no pristine-vs-pristine control in these runs) and the speed rule
    on each config's paired tok/s rounds."""
    parts, ratios = [], {}
    for config, e in entries.items():
        parts.append(identity.judge(e["outputs_identical"], None, f"{config} {what}"))
        ratio = _tok_ratio(e, key)
        if ratio:
            ratios[config] = ratio.as_dict()
            parts.append(
                performance.judge(
                    ratio, threshold, claim=claim, lower_is_better=False, what=f"{config} {key}"
                )
            )
    return combine(parts), ratios


def _round_pairs(rounds: list[dict], shape: str, key: str = "wall_us") -> tuple[list, list]:
    """(pristine, patched) values of `shape`, paired by round (rounds lacking either dropped)."""
    by_round: dict[int, dict[str, float]] = {}
    for r in rounds:
        if r.get("shape") == shape and r.get("ok", True) and key in r:
            by_round.setdefault(r["round"], {})[r["variant"]] = r[key]
    pairs = [v for _, v in sorted(by_round.items()) if {"pristine", "patched"} <= set(v)]
    return [p["pristine"] for p in pairs], [p["patched"] for p in pairs]


def micro_000(version: str) -> dict | None:
    src = _load(version, "micro-000")
    if not src or "summary" not in src:
        return None
    if (meta := _load(version, "micro") or {}).get("series_hash") == src.get("series_hash"):
        src = {"patch_hashes": meta.get("patch_hashes"), **src}  # the micro step that ran it
    s = src["summary"]
    parts, ratios = [], {}
    limit = registry.threshold(version, "microbench-gpu-000")
    for shape, e in s.items():
        pristine, patched = _round_pairs(src.get("rounds", []), shape)
        if not e["ids_identical"]:
            parts.append(Verdict(FAIL, f"{shape}: sampled ids differ"))
        if pristine:
            ratios[shape] = stats.paired_ratio(pristine, patched)
    # Where the batch needs processing the patch skips nothing: it must not be slower there.
    for claim, skips in (("faster", True), ("not slower", False)):
        group = {k: r for k, r in ratios.items() if bool(s[k].get("patched_skips")) == skips}
        if group:
            parts.append(performance.judge_shapes(group, limit, claim=claim))
    rows = [
        f"| {k} | {e['pristine_us']:.0f} | {e['patched_us']:.0f} | "
        f"{ratios[k].text(2) if k in ratios else '-'} | {e['copy_us']:.0f} | {e['ids_identical']} |"
        for k, e in s.items()
    ]
    table = "\n".join(
        [
            "| batch config / size | pristine µs | patched µs | patched/pristine time (95% CI) "
            "| FP32 copy alone µs | ids identical |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    numbers = {
        "what": "MRV2 Sampler.__call__(logits, input_batch), vocab 151936, bf16 logits; median "
        "per round of 200 calls (perf_counter + synchronize), 5 rounds, order alternated",
        "summary": s,
        "time_patched_over_pristine": {k: r.as_dict() for k, r in ratios.items()},
    }
    if sum(e["errors"] for e in s.values()):
        parts.append(Verdict(FAIL, "a configuration failed"))
    worst = combine(parts).outcome  # the reason keeps every group's finding
    verdict = Verdict(worst, "; ".join(p.reason for p in parts if p.reason) or "-")
    return _record(src, "microbench-gpu-000", "000", verdict, numbers, "", [table])


def _micro_job(version: str, name: str) -> tuple[dict, dict] | None:
    """(the job's output, its provenance) for a job of the micro step: the step's metadata with
    the job's own command and date; None unless both files are there."""
    job = _load(version, name)
    meta = _load(version, "micro")
    if not job or not meta:
        return None
    # The job's own provenance (Python, host CPU) where it recorded it, else the step's.
    own = {k: job[k] for k in ("versions", "machine", "python") if k in job}
    return job, {**meta, "command": job["command"], "date": job["date"], **own}


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
    # Rule: verify.verdicts.growth (patched grows far less than pristine and is faster).
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
    step = "microbench-gpu-003-apply"
    judged = sparse_penalties.verdict(p, rows, registry.threshold(version, step))
    numbers = sparse_penalties.numbers(p, rows)
    table = sparse_penalties.table(rows)
    # The same sparse function, timed in an earlier device call of series 232dc57cb5 (before
    # the dense path was kept for CUDA logits): shown beside this run, not pooled.
    earlier = gpu_root() / version / "raw" / "micro-003-apply-232dc57cb5.json"
    if earlier.exists():
        numbers["earlier_run_232dc57cb5"] = results.read_json(earlier)["results"]
        table += "\n\nEarlier run (series 232dc57cb5, same sparse function):\n\n"
        table += sparse_penalties.table(numbers["earlier_run_232dc57cb5"])
    return _record(src, step, "003", judged.outcome, numbers, judged.reason, [table])


def micro_003_build(version: str) -> dict | None:
    """0009: the penalty staging fill, per-row loop (series up to 0008) vs one gather per step,
    on the GPU machine's host with CUDA staging (scripts/bench_penalty_staging_ab.py; run in the
    micro step's device call, so the micro step's metadata is its provenance)."""
    if not (loaded := _micro_job(version, "micro-003-build-ab")):
        return None
    bench, src = loaded
    rows = bench["results"]
    numbers = build_ab.numbers(bench["params"], rows)
    ok, reason = build_ab.verdict(rows)
    reason = reason or build_effect(rows)
    return _record(
        src,
        "microbench-gpu-003-build",
        "003",
        "pass" if ok else "fail",
        numbers,
        reason,
        [build_ab.table(rows)],
    )


STATE_FILES = ("vllm/v1/sample/ops/penalty_state.py",)


#: What each bench of scripts/gpu_penalty_state_bench.py times, as the record names it.
STATE_BENCHES = {
    "record": "record_sampled",
    "apply": "kernel",
    "step": "decode step (apply, then record_sampled)",
}


def state_claims(rows: list[dict]) -> tuple[list[tuple[str, str]], list[str]]:
    """(judged (bench, claim) pairs, benches only shown). With `step` rows (a decode step's
    apply and record_sampled, timed together) the step must be faster and the kernel not
    slower; record_sampled called on its own is shown, not judged (a form that counts a step's
    ids in the next penalty launch does its record work there). Without them (runs before the
    step bench), record_sampled must be faster."""
    benches = {r["bench"] for r in rows}
    if "step" in benches:
        return [("step", "faster"), ("apply", "not slower")], sorted(benches & {"record"})
    return [("record", "faster"), ("apply", "not slower")], []


def staging_003(version: str) -> dict | None:
    """The micro step's race check of 003's double-buffered CUDA staging."""
    check = _load(version, "gpu_check_003_staging")
    meta = _load(version, "micro")
    # Only runs made by the micro step (they name the patched file they loaded); the earliest
    # file checked a pre-series staging patch outside any series and stays unimported.
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


def _round_ratio(m: dict) -> stats.Ratio:
    """Patched/pristine time of one measure from its per-round medians (verify.stats)."""
    return stats.paired_ratio(m["round_median_us"]["pristine"], m["round_median_us"]["patched"])


def micro_002() -> dict | None:
    src = _load("0.18.1", "micro-002")
    if not src or "results" not in src:
        return None
    rows = [
        f"| {r['batch']} | {r['prompt_len']} | {name} | {m['median_us']['pristine']:.1f} "
        f"| {m['median_us']['patched']:.1f} | {_round_ratio(m).text(2)} |"
        for r in src["results"]
        for name, m in r["measures"].items()
    ]
    table = "\n".join(
        [
            "| batch | prompt len | measure | pristine µs | patched µs "
            "| patched/pristine time (95% CI) |",
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
        "python": src.get("python"),
        "torch": src.get("torch"),
    }
    numbers = {
        "measures": {
            "md": "InputBatch.get_pooling_metadata() alone",
            "md_read": "get_pooling_metadata() + the GritLM pooler's host read of the prompt ids "
            "+ synchronize",
            "step": "_make_sampling_metadata() (pristine copies the ids to the GPU there) + md_read",
        },
        "contents_identical": src["contents_ok"],
    }
    for name in ("step", "md_read", "md"):
        numbers[f"{name}_time_patched_over_pristine"] = {
            f"b{r['batch']}/p{r['prompt_len']}": _round_ratio(r["measures"][name]).as_dict()
            for r in src["results"]
            if name in r["measures"]
        }
    # Rule: contents identical; speed judged on "step" (the sampling-metadata build plus the
    # pooler's host read: what a pooling step runs), per shape, patched/pristine time. "md"
    # alone does more host work by design (the host buffer) and is reported, not judged.
    shapes = {
        f"b{r['batch']}/p{r['prompt_len']}": _round_ratio(r["measures"]["step"])
        for r in src["results"]
        if "step" in r["measures"]
    }
    verdict = performance.judge_shapes(shapes, registry.threshold("0.18.1", "microbench-gpu-002"))
    if not (src["contents_ok"] and src.get("status") == "ok"):
        verdict = Verdict(FAIL, "prompt-id contents differ or the run failed")
    return _record(record_src, "microbench-gpu-002", "002", verdict, numbers, "", [table])


def embeddings(version: str) -> dict | None:
    src = _load(version, "embed-gritlm")
    if not src or "summary" not in src:
        return None
    e = src["summary"]["embed"]
    verdict, ratios = _identity_and_speed(
        {"embed": e},
        "not slower",
        registry.threshold(version, "gpu-embeddings-gritlm"),
        key="prompts_per_s",
        what="vectors",
    )
    numbers = {
        "model": "random-weight GritLM (Llama body, instruction-trimming mean pooler)",
        "prompts": 2048,
        "pristine_prompts_per_s": e["pristine"]["prompts_per_s"],
        "patched_prompts_per_s": e["patched"]["prompts_per_s"],
        "prompts_per_s_patched_over_pristine": ratios.get("embed"),
        "vectors_identical": e["outputs_identical"],
    }
    return _record(src, "gpu-embeddings-gritlm", "002", verdict, numbers)


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


def serve_rounds(rounds: list[dict], metrics=serve_bench.METRICS) -> dict[str, dict]:
    """{variant: {metric: [per-round values]}} ordered by repeat."""
    out: dict[str, dict] = {"pristine": {}, "patched": {}}
    for r in sorted(rounds, key=lambda r: r["repeat"]):
        for m in metrics:
            out[r["variant"]].setdefault(m, []).append(r[m])
    return out


def serving(version: str) -> list[dict]:
    src = _load(version, "serve-bench")
    if not src or "summary" not in src:
        return []
    per = serve_rounds(src["rounds"])
    limit = registry.threshold(version, "gpu-serve-bench")
    verdict = serve_bench.judge(per["pristine"], per["patched"], limit, claim="faster")
    table = "\n".join(
        [
            "| round | variant | output tok/s | median TPOT ms | p99 TPOT ms | p99 ITL ms |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['repeat']} | {r['variant']} | {r['output_throughput']:.0f} "
                f"| {r['median_tpot_ms']:.2f} | {r['p99_tpot_ms']:.2f} | {r['p99_itl_ms']:.2f} |"
                for r in src["rounds"]
            ),
        ]
    )
    numbers = {
        **{f"{m}_patched_over_pristine": v for m, v in verdict.numbers.items()},
        "workload": "vllm bench serve random 2 in / 512 out, 128 prompts, 16 warmups, rate inf, "
        "MRV2, --ignore-eos",
    }
    return [_record(src, "gpu-serve-bench", "000", verdict, numbers, "", [table])]


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
        _record(src, "gpu-gsm8k-identity", "000", identity.judge(same, None, "responses"), numbers)
    ]
    lm = src.get("lm_eval")
    if lm and "error" not in lm:
        same_lm = (
            not lm["differing_doc_ids"] and lm["scores"]["pristine"] == lm["scores"]["patched"]
        )
        verdict = identity.judge(same_lm, None, "lm_eval responses and scores")
        out.append(_record(src, "gpu-gsm8k-lmeval", "000", verdict, lm))
    elif lm:
        out.append(_record(src, "gpu-gsm8k-lmeval", "000", "fail", lm, "lm_eval failed"))
    return out


def _patch_numbers(version: str, step: str) -> dict[str, str]:
    """{registry slug: patch number NNNN} of the patches whose registry steps name `step`."""
    entries = registry.load()
    found = [(registry.entry_for(p, version, entries), p.name[:4]) for p in read_series(version)]
    numbers = {entry.slug: number for entry, number in found if entry}
    slugs = registry.patches_for_record(version, step, entries)
    return {slug: numbers[slug] for slug in slugs if slug in numbers}


def records(version: str) -> list[dict]:
    """Every GPU-tier record of `version` that its step files allow."""
    made = [
        embeddings(version),
        upstream_tests(version),
        *serving(version),
        *gsm8k(version),
        micro_000(version),
        micro_003(version),
        micro_003_apply(version),
        micro_003_build(version),
        staging_003(version),
        micro_002() if version == "0.18.1" else None,
    ]
    return [r for r in made if r]
