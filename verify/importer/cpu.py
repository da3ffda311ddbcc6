"""CPU tier: benchmark files of this machine's scripts and the CPU tier's own records -> records.

- ``bench_003.json`` (scripts/bench_penalty_host_cpu.py) -> microbench-003 (growth rule)
- ``bench_penalties_apply.json`` -> microbench-003-apply (verify.sparse_penalties)
- ``bench_003_build_ab.json`` -> microbench-003-build (verify.build_ab)
- the records `python -m verify.e2e` wrote (e2e-*) are re-judged by the rules of
  verify.verdicts from the numbers they carry (per-round serve-bench values, identity flags);
  the "e2e-not-run-*" markers are dropped: the registry says per patch what is not applicable.

Numbers, command, date and series come from the files, never recomputed; provenance fields a
file did not record are "unknown (not recorded by the run)".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from verify import build_ab, paths, registry, results, sparse_penalties
from verify.verdicts import FAIL, PASS, Verdict, growth, identity, serve_bench

Record = dict[str, Any]


def cpu_root(version: str) -> Path:
    return paths.results_root() / "cpu" / version


def provenance(data: dict) -> dict:
    machine, versions = data.get("machine", {}), data.get("versions", {})
    return {
        "python": versions.get("python")
        or data.get("python")
        or machine.get("python")
        or results.UNKNOWN,
        "cpu": machine.get("cpu_model") or machine.get("cpu") or results.UNKNOWN,
        "cpu_count": machine.get("cpu_count", results.UNKNOWN),
        "gpu": data.get("gpu"),
        "torch": versions.get("torch") or data.get("torch") or results.UNKNOWN,
    }


def _bench(
    version: str,
    step: str,
    src: Path,
    judge: Callable[[dict, list, str], Verdict],  # params, rows, record step
    numbers: Callable[[dict, list], dict],
    table: Callable[[list], str],
) -> Record | None:
    if not src.exists():
        return None
    data = results.read_json(src)
    params, rows = data["params"], data["results"]
    verdict = judge(params, rows, step)
    record = results.make(
        step, "003", version, verdict.outcome, {**numbers(params, rows), "source": src.name},
        reason=verdict.reason, command=data["command"], tables=[table(rows)],
        machine=provenance(data), date=data["date"],
    )  # fmt: skip
    results.restamp(record, data.get("series_hash") or "none")
    return record


def _bool_verdict(ok_reason: tuple[bool, str], effect: str = "") -> Verdict:
    """A (ok, reason) rule as a Verdict; `effect` states the measured effect on a pass."""
    ok, reason = ok_reason
    return Verdict(PASS, reason or effect) if ok else Verdict(FAIL, reason)


def build_effect(rows: list) -> str:
    """verify.build_ab rows: per-row loop time / one-gather time per length, with its CI."""
    return "per-row loop / one gather: " + ", ".join(
        f"{r['a_over_b']:.2f}x [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] at L={r['L']}" for r in rows
    )


def _growth_table(rows: list) -> str:
    lines = [
        "| L | penalties pristine ms | patched ms | ratio "
        "| think pristine ms | patched ms | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['L']} | {r['penalties_pristine_ms']:.2f} | {r['penalties_patched_ms']:.2f} | "
            f"{r['penalties_ratio']:.1f}x | {r['think_pristine_ms']:.2f} | "
            f"{r['think_patched_ms']:.2f} | {r['think_ratio']:.0f}x |"
        )
    return "\n".join(lines)


def bench_records(version: str) -> list[Record]:
    root = cpu_root(version)
    made = [
        _bench(
            version,
            "microbench-003",
            root / "bench_003.json",
            lambda _p, rows, _step: growth.judge(rows),
            lambda p, rows: {"batch": p["batch"], "growth": growth.length_growth(rows)},
            _growth_table,
        ),
        _bench(
            version,
            "microbench-003-apply",
            root / "bench_penalties_apply.json",
            lambda p, rows, step: sparse_penalties.verdict(
                p, rows, registry.threshold(version, step)
            ),
            sparse_penalties.numbers,
            sparse_penalties.table,
        ),
        _bench(
            version,
            "microbench-003-build",
            root / "bench_003_build_ab.json",
            lambda _p, rows, _step: _bool_verdict(build_ab.verdict(rows), build_effect(rows)),
            build_ab.numbers,
            build_ab.table,
        ),
    ]
    return [r for r in made if r]


def _serve(numbers: dict, threshold: float) -> Verdict:
    runs = numbers.get("runs", {})
    if not runs.get("pristine"):
        return Verdict("not run", "the record carries no per-round values")
    per = {v: {m: [r[m] for r in runs[v]] for m in serve_bench.METRICS} for v in runs}
    return serve_bench.judge(per["pristine"], per["patched"], threshold)


def _identity(record: Record, key: str, what: str) -> Verdict:
    """Identity from the record's `key` (pristine vs patched) and its control, pristine vs
    pristine: `control_<key>` (run before the A/B), or in older records `pristine_rerun_<key>`
    (run after a difference); neither: no control. A record already judged with its control
    keeps its own reason (it says how far the runs diverged)."""
    n = record.get("numbers", {})
    control = n.get(f"control_{key}", n.get(f"pristine_rerun_{key}"))
    verdict = identity.judge(not n.get(key), None if control is None else not control, what)
    if control is not None and record.get("outcome") == verdict.outcome and record.get("reason"):
        return Verdict(verdict.outcome, record["reason"])
    return verdict


def rejudge(record: Record) -> Record | None:
    """A CPU-tier record under the current rules (None: a marker the registry replaces)."""
    step, n = record["step"], record.get("numbers", {})
    if step.startswith("e2e-not-run"):
        return None
    if step == "e2e-serve-bench":
        verdict = _serve(n, registry.threshold(record["vllm_version"], step))
        n = {**n, **{f"{m}_patched_over_pristine": v for m, v in verdict.numbers.items()}}
    elif step == "e2e-token-identity":
        verdict = _identity(record, "differing", "tokens")
    elif step == "e2e-embeddings":
        verdict = _identity(record, "differing_vectors", "vectors")
    elif step == "e2e-gsm8k":
        verdict = _identity(record, "differing_doc_ids", "responses")
    else:
        return upgrade(record)
    record = upgrade({**record, "numbers": n})
    record.update(outcome=verdict.outcome, reason=verdict.reason)
    return record


def upgrade(record: Record) -> Record:
    """A schema-1 record as schema 2: same run, date, machine and series; patch ids added."""
    if record.get("schema") == 2:
        return record
    new = results.make(
        record["step"], record["seed"], record["vllm_version"],
        "not applicable" if record["outcome"] == "n/a" else record["outcome"],
        record.get("numbers"), reason=record.get("reason", ""), command=record.get("command"),
        tables=record.get("tables"), machine=record.get("machine"), date=record.get("date"),
    )  # fmt: skip
    results.restamp(new, record.get("series_hash") or "unknown")
    return new


def tier_records(version: str) -> tuple[list[Record], list[Path]]:
    """(re-judged records, marker files to remove) of the CPU tier's own records."""
    out, drop = [], []
    for path in sorted(cpu_root(version).glob("*.json")):
        data = results.read_record(path)
        if data is None or data["step"].startswith("microbench-"):
            continue  # a benchmark's raw file, or a record bench_records makes from one
        new = rejudge(data)
        if new is None:
            drop.append(path)
        else:
            out.append(new)
    return out, drop
