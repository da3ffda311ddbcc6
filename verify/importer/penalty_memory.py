"""Bytes of MRV2's penalty statistics (scripts/penalty_state_memory.py: `PenaltiesState` built
in both import roots, the patched one after k penalty requests) -> the record its registry step
names (reader "penalty-state-memory").

pass: with no penalty request the patched state holds nothing, with k it holds at most the
doubling bound's rows (max(8, 2k), at most max_num_reqs) and never more bytes than the pin's
own state; fail otherwise.
"""

from __future__ import annotations

from pathlib import Path

from verify import results
from verify.importer.gpu import _record
from verify.verdicts import FAIL, PASS, Verdict

MIB = 1 << 20


def bound(row: dict) -> int:
    """The rows a state of k penalty requests may hold: the doubling's worst case."""
    k = row["penalty_requests"]
    return 0 if k == 0 else min(row["max_num_reqs"], max(8, 2 * k))


def judge(rows: list[dict], version: str = "0.22.0") -> Verdict:
    bad = [
        r for r in rows if r["patched_rows"] > bound(r) or r["patched_bytes"] > r["pristine_bytes"]
    ]
    if bad:
        return Verdict(
            FAIL, f"{len(bad)} shape(s) above the bound or v{version}'s bytes; first: {bad[0]}"
        )
    empty = [r for r in rows if r["penalty_requests"] == 0]
    shown = "; ".join(
        f"max_num_seqs {r['max_num_reqs']}, vocab {r['vocab']}: {r['pristine_bytes'] / MIB:.0f} "
        f"MiB -> 0 ({r['kv_tokens_freed']} KV tokens of Qwen3-8B freed)"
        for r in empty
    )
    return Verdict(PASS, f"without penalty requests the state holds nothing: {shown}; with k it "
                   "holds at most max(8, 2k) rows")  # fmt: skip


def table(rows: list[dict], version: str = "0.22.0") -> str:
    head = f"| max_num_seqs | vocab | penalty requests | v{version} MiB | patched MiB | rows |"
    out = [f"{head} KV tokens freed |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['max_num_reqs']} | {r['vocab']} | {r['penalty_requests']} | "
            f"{r['pristine_bytes'] / MIB:.1f} | {r['patched_bytes'] / MIB:.1f} | "
            f"{r['patched_rows']} | {r['kv_tokens_freed']} |"
        )
    return "\n".join(out)


def read(version: str, step, entry, runs: list[Path]) -> dict:
    """The importer loop's reader: the newest run (by date) of `runs`."""
    _, run = results.newest_run(runs)
    numbers = {"kv_model": run["kv_model"], "kv_bytes_per_token": run["kv_bytes_per_token"],
               "rows": run["rows"]}  # fmt: skip
    note = "(CPU: the tensors' sizes as the GPU allocates them)"
    record = _record(run, step.records[0], entry.slug, judge(run["rows"], version), numbers,
                     tables=[table(run["rows"], version)], note=note)  # fmt: skip
    warm = run.get("warmup_penalty_requests")
    record["headline"] = headline(run["rows"], warm)
    record["machine"]["gpu"] = "none (tensor sizes, measured on the CPU)"
    return record


def headline(rows: list[dict], warmup: int | None) -> str:
    """The largest shape's saving without penalty requests (the KV cache tokens it frees), what
    64 penalty requests take, and the rows the kernel warm-up's `warmup` penalty requests leave
    allocated after the KV cache is sized (as the run read them from the patched tree; None:
    not recorded)."""
    n, vocab = max((r["max_num_reqs"], r["vocab"]) for r in rows if r["vocab"] < 200_000)
    shape = [r for r in rows if (r["max_num_reqs"], r["vocab"]) == (n, vocab)]
    empty = next(r for r in shape if r["penalty_requests"] == 0)
    some = max((r for r in shape if 0 < r["penalty_requests"] <= 64),
               key=lambda r: r["penalty_requests"])  # fmt: skip
    taken = (
        f"{some['penalty_requests']} penalty requests take {some['patched_bytes'] / MIB:.0f} MiB"
    )
    warm = next((r for r in shape if warmup and r["penalty_requests"] == warmup), None)
    kept = (
        f"; the kernel warm-up's {warmup} rows, {warm['patched_bytes'] / MIB:.1f} "
        "MiB, stay allocated after the KV cache is sized"
        if warm
        else ""
    )
    return (
        f"{empty['pristine_bytes'] / MIB:.0f} MiB -> 0 of GPU memory for the penalty state at "
        f"max_num_seqs {n}, vocab {vocab}, when no request uses a penalty "
        f"({empty['kv_tokens_freed']} more KV cache tokens of Qwen3-8B{kept}); {taken}"
    )
