"""0011's device penalty state on the GPU, two readers of the importer loop.

The state micro (`read_state_micro`): two forms of the state side by side, judged as
`verify.importer.gpu.state_claims` says.

The host-time goal for the penalty kernel (`read`): host time per call must not grow with
the output length L (scripts/gpu_penalty_state_length_bench.py; each length a "variant" of one
shape, timed side by side, the shortest the baseline).

    micro-penalty-state-length.json -> the record its registry step names

Per shape, the longest length's host time over the shortest's (paired rounds, verify.stats) is
judged `not slower` against the registry step's threshold (verify.verdicts.performance). GPU
and eager time are shown per length, never judged: the kernel walks each row's listed ids, so
they grow with L by design.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from verify import results, stats
from verify.importer.gpu import DEVICE_NOTE, STATE_BENCHES, STATE_FILES, state_claims
from verify.importer.gpu_kernels import _kernel_table, kernel_rows, variant_is_current
from verify.verdicts import INCONCLUSIVE, NOT_RUN, Verdict, combine, kernel, performance


def judge_lengths(rows: list[dict], threshold: float) -> tuple[Verdict, dict]:
    """(verdict, numbers): per shape, host time at the longest L over the shortest."""
    parts, numbers = [], {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        base = next((r for r in mine if r["variant"] == r["baseline"]), None)
        longest = max(mine, key=lambda r: int(r["variant"].removeprefix("L=")))
        if base is None or longest is base:
            parts.append(Verdict(INCONCLUSIVE, f"{shape}: fewer than two lengths"))
            continue
        ratio = stats.paired_ratio(base["host_us"], longest["host_us"])
        pair = f"{longest['variant']}/{base['variant']}"
        verdict = performance.judge(
            ratio, threshold, claim="not slower", what=f"{shape}: host per call", pair=pair
        )
        parts.append(verdict)
        numbers[f"{shape}: host {pair}"] = ratio.as_dict()
    if not parts:
        return Verdict(NOT_RUN, "no length rows in the run"), numbers
    return combine(parts), numbers


def table(rows: list[dict]) -> str:
    """Median µs per shape and length: graph / eager (L2 flushed) / host per call."""
    lines = ["| shape | L | graph µs | eager µs | host µs |", "|---|---|---|---|---|"]
    for r in rows:
        med = [f"{statistics.median(r[k]):.1f}" for k in ("graph_us", "eager_us", "host_us")]
        lines.append(f"| {r['shape']} | {r['variant'].removeprefix('L=')} | {' | '.join(med)} |")
    return "\n".join(lines)


def read(version: str, step, entry, runs: list) -> dict | None:
    """The importer loop's reader (registry reader "penalty-state-length"): the record of the
    length run (the newest of `runs`), or None when it timed nothing."""
    data = results.read_json(runs[-1])
    if not data or not data.get("timed"):
        return None
    timed = kernel_rows(data)
    verdict, numbers = judge_lengths(timed[0], step.threshold)
    numbers["ratios"] = "host time at the longest L / the shortest; below 1 is faster"
    (name,) = data["variants"]
    return _state_record(version, step, entry, data, timed, name, verdict, numbers,
                         [table(timed[0])])  # fmt: skip


def _state_record(
    version: str, step, entry, data: dict, timed: tuple, variant: str, verdict: Verdict,
    numbers: dict, tables: list[str],
) -> dict:  # fmt: skip
    """The step's record of a timed penalty-state file (`timed`: its `kernel_rows`), stamped
    with the series only where `variant` measured the build tree's penalty_state.py."""
    _, machine, command, date = timed
    record = results.make(
        step.records[0], entry.slug, version, verdict.outcome, numbers, reason=verdict.reason,
        command=f"{command}  {DEVICE_NOTE}", tables=tables, machine=machine, date=date,
        patches=[entry.slug],
    )  # fmt: skip
    current = variant_is_current(data, variant, version, STATE_FILES)
    results.restamp(record, results.series_hash(version) if current else "unknown")
    return record


def read_state_micro(version: str, step, entry, runs: list[Path]) -> dict | None:
    """The importer loop's reader "penalty-state-micro": 0011's device penalty state, two forms
    side by side (scripts/gpu_penalty_state_bench.py; the newest of `runs`), judged as
    `state_claims` says (verify.verdicts.kernel: eager with L2 flushed and host per call; the
    graph time is shown, never judged alone)."""
    data = results.read_json(runs[-1])
    if not data or not data.get("timed"):
        return None
    timed = kernel_rows(data)
    rows = timed[0]
    baseline = rows[0]["baseline"]
    variant = next(n for n in data["variants"] if n != baseline)
    judged, shown = state_claims(rows)
    parts, tables, numbers = [], [], {}
    limit = step.threshold
    for bench, claim in judged:
        mine = [r for r in rows if r["bench"] == bench]
        parts.append(kernel.judge(mine, variant, limit, claim))
        numbers[STATE_BENCHES[bench]] = parts[-1].numbers
        tables.append(f"{bench} ({variant} / {baseline})\n\n" + _kernel_table(mine, variant))
    for bench in shown:
        mine = [r for r in rows if r["bench"] == bench]
        tables.append(
            f"{bench} ({variant} / {baseline}), not judged\n\n" + _kernel_table(mine, variant)
        )
    reason = "; ".join(
        f"{STATE_BENCHES[b]}: {p.reason}" for (b, _), p in zip(judged, parts, strict=True)
    )
    numbers["ratios"] = "variant/baseline time; below 1 is faster"
    verdict = Verdict(combine(parts).outcome, reason)
    return _state_record(version, step, entry, data, timed, variant, verdict, numbers, tables)
