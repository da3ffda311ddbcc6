"""GPU tier, engine A/B runs (`python -m verify.ab engine`, scripts/gpu_penalties_ab.sh) ->
records. Issue 22's penalty cost: results/gpu/<version>/penalties-ab*.json (one file per
device call) -> the record `e2e-gpu-penalty-cost`.

Per run and batch shape, every variant's penalty cost is the paired ratio of its penalized
over its plain tok/s (same engine, same rounds; below 1 is a cost), and patched is compared
with the series and pristine cell by cell. The rule (verify.verdicts.performance, claim "not
slower", the registry step's threshold, 2%):

- patched's penalty cost: pass when the interval's lower bound of penalized/plain tok/s
  excludes a cost beyond the threshold; fail when a cost beyond it is resolved; else no
  difference resolved (the interval is too wide to tell);
- patched against the series, every sampling: not slower, same three outcomes;
- tokens: patched identical to the series (and pristine) per config, judged only where the run
  has a second engine of the baseline's build (`series2`, `pristine2`) as the control
  (verify.verdicts.identity): GPU engines of one build need not agree across starts. Otherwise,
  and for sampled configs without per-request seeds, the comparison is reported, not judged.
Shapes that a run did not reach are listed as not run with its reason.

The record's key table (the PR report's) puts, per run, shape and sampling, pristine's, the
series' and patched's penalty cost side by side. Pristine's cost is also taken from runs made
with an earlier form of the series: pristine runs the pin's sdist, whatever the series; the other
variants of such runs are left out.
"""

from __future__ import annotations

import json

from verify import registry, stats
from verify.ab import rounds as ab_rounds
from verify.importer import gpu
from verify.importer.gpu import _record
from verify.verdicts import NOT_RUN, Verdict, combine, identity, performance

STEP = "e2e-gpu-penalty-cost"
FILES = "penalties-ab*.json"
PENALTY_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty")
BASELINES = ("series", "pristine")


def load_runs(version: str, files: str = FILES) -> list[dict]:
    """Every engine A/B run (`python -m verify.ab engine`) of `version` in the step files
    matching `files` (default: issue 22's), oldest first."""
    runs = [json.loads(p.read_text()) for p in sorted((gpu.gpu_root() / version).glob(files))]
    return sorted((r for r in runs if r.get("kind") == "engine-ab"), key=lambda r: r["date"])


def sampling_of(config: dict) -> tuple[bool, bool]:
    """(penalized, with top-k/top-p) of a config."""
    penalized = any(config.get(k, 1.0 if k == "repetition_penalty" else 0.0) not in (0.0, 1.0)
                    for k in PENALTY_KEYS)  # fmt: skip
    return penalized, "top_k" in config or "top_p" in config


def stage_cells(run: dict, stage: dict) -> dict[tuple[str, bool, bool], str]:
    """{(variant, penalized, top-k/top-p): cell} of one stage."""
    out = {}
    for cell in stage["cells"]:
        variant, config = cell.split("/", 1)
        out[(variant, *sampling_of(run["configs"][config]))] = cell
    return out


def ratio(rounds: list[ab_rounds.Round], base: str, var: str) -> stats.Ratio | None:
    """var/base tok/s over the counted rounds that measured both; None when none did."""
    both = [r for r in rounds if base in r.values and var in r.values]
    if not any(not r.warmup for r in both):
        return None
    return ab_rounds.paired(both, base, var, "tok_per_s")


def _kind(topkp: bool) -> str:
    return "top-k/top-p" if topkp else "no top-k/top-p"


def not_slower(r: stats.Ratio, threshold: float, what: str, pair: str) -> Verdict:
    """Throughput `pair` must exclude a loss beyond `threshold` (verify.verdicts.performance)."""
    return performance.judge(
        r, threshold, claim="not slower", lower_is_better=False, what=what, pair=pair
    )


def costs(run: dict, stage: dict, rounds: list) -> dict[tuple[str, bool], stats.Ratio]:
    """{(variant, top-k/top-p): penalized/plain tok/s} of one stage, where both were measured."""
    cells, out = stage_cells(run, stage), {}
    for variant in dict.fromkeys(v for v, _, _ in cells):
        for topkp in (False, True):
            plain, pen = cells.get((variant, False, topkp)), cells.get((variant, True, topkp))
            r = ratio(rounds, plain, pen) if plain and pen else None
            if r is not None:
                out[(variant, topkp)] = r
    return out


def judge_stage(run: dict, stage: dict, rounds: list, threshold: float) -> tuple[list, dict, list]:
    """(verdict parts, numbers, table rows) of one measured stage."""
    cells, parts, numbers, rows = stage_cells(run, stage), [], {}, []
    shape = f"B={stage['batch']} L={stage['output_len']}"
    for (variant, topkp), r in costs(run, stage, rounds).items():
        numbers[f"{variant} penalized/plain ({_kind(topkp)})"] = r.as_dict()
        rows.append(_cost_row(f"{variant} penalty cost, {_kind(topkp)}", r))
        if variant == "patched":
            what = f"{shape} {_kind(topkp)} tok/s"
            parts.append(not_slower(r, threshold, what, "penalized/plain"))
    for base in BASELINES:
        for (variant, pen, topkp), cell in cells.items():
            other = cells.get((base, pen, topkp))
            if variant != "patched" or not other:
                continue
            what = f"{'penalized' if pen else 'plain'}, {_kind(topkp)}"
            r = ratio(rounds, other, cell)
            if r is not None:
                numbers[f"patched/{base} ({what})"] = r.as_dict()
                rows.append(_cost_row(f"patched / {base} tok/s, {what}", r, cost=False))
                if base == "series":
                    parts.append(
                        not_slower(r, threshold, f"{shape} {what} tok/s", "patched/series")
                    )
            if comparable(run["configs"][cell.split("/", 1)[1]]):
                control = cells.get((f"{base}2", pen, topkp))
                verdict = _tokens(rounds, other, cell, control, f"{shape} {what} tokens vs {base}")
                numbers[f"tokens patched vs {base} ({what})"] = verdict.reason
                if control:  # judged only against a second engine of the baseline's build
                    parts.append(verdict)
    return parts, numbers, rows


def comparable(config: dict) -> bool:
    """Whether two engines' tokens of `config` can be compared: greedy, or a seed per request
    (without one, each engine draws from its own generator in its own order of calls)."""
    return config.get("temperature") == 0 or config.get("seed", 0) is not None


def _tokens(rounds: list, base: str, cell: str, control: str | None, what: str) -> Verdict:
    """Identity of `cell`'s tokens with `base`'s. The control is a second engine of `base`'s
    build (`control`): GPU engines of one build need not agree across starts, so without it the
    comparison is reported, not judged."""

    def hashes(c: str) -> set:
        return {r.values[c]["token_ids_hash"] for r in rounds if c in r.values}

    identical = hashes(base) == hashes(cell)
    if control is None:
        seen = "identical" if identical else "differ"
        return Verdict(
            NOT_RUN, f"{what}: {seen}; not judged (no second engine of the baseline's build)"
        )
    return identity.judge(
        identical, hashes(base) == hashes(control), what, baseline=base.split("/")[0]
    )


def _cost_row(label: str, r: stats.Ratio, cost: bool = True) -> str:
    share = _cost_text(r).rsplit(", n=", 1)[0] if cost else "-"
    mde = f"{r.mde:.1%}" if r.mde is not None else "-"
    return f"| {label} | {_interval_text(r)} | {share} | {r.n} | {mde} |"


def _interval_text(r: stats.Ratio) -> str:
    interval = f"[{r.low:.3f}, {r.high:.3f}]" if r.low is not None else "(no interval)"
    return f"{r.ratio:.3f} {interval}"


def _cost_text(r: stats.Ratio | None) -> str:
    """Penalty cost (1 - penalized/plain) with its interval, e.g. `2.5% [-0.1%, 5.0%], n=9`."""
    if r is None:
        return "not run"
    text = f"{1 - r.ratio:.1%}"
    if r.low is not None:
        text += f" [{1 - r.high:.1%}, {1 - r.low:.1%}]"
    return f"{text}, n={r.n}"


KEY_HEADER = (
    "Penalty cost: 1 - penalized/plain output tok/s of one engine over the same rounds [95% CI],"
    " n rounds. patched / series: penalized tok/s, paired rounds of one run. '-': not in the run"
    " (or, in a run of an earlier patch form, left out).\n\n"
    "| B | L | sampling | pristine cost | series cost | patched cost | patched / series, "
    "penalized | run |\n|---|---|---|---|---|---|---|---|"
)


def key_rows(run: dict, stage: dict, rounds: list, pristine_only: bool) -> list[str]:
    """Rows of the key table for one stage: each build's penalty cost side by side, and
    patched/series on penalized tok/s. `pristine_only`: a run of an earlier series form."""
    found = costs(run, stage, rounds)
    cells = stage_cells(run, stage)
    config = run["configs"][next(iter(cells.values())).split("/", 1)[1]]
    seeded = "seeded" if comparable(config) else "unseeded"
    label = run["date"][:16] + (" (earlier patch form: pristine only)" if pristine_only else "")
    rows = []
    for topkp in (False, True):
        builds = ("pristine",) if pristine_only else ("pristine", "series", "patched")
        if not any((b, topkp) in found for b in builds):
            continue
        cost = {b: "-" for b in ("pristine", "series", "patched")}
        ran = {v for v, _, t in cells if t == topkp}
        cost |= {b: _cost_text(found.get((b, topkp))) for b in builds if b in ran}
        pen_s, pen_p = cells.get(("series", True, topkp)), cells.get(("patched", True, topkp))
        vs = ratio(rounds, pen_s, pen_p) if pen_s and pen_p and not pristine_only else None
        vs_text = "-" if vs is None else _interval_text(vs)
        rows.append(
            f"| {stage['batch']} | {stage['output_len']} | {_kind(topkp)}, {seeded} "
            f"| {cost['pristine']} | {cost['series']} | {cost['patched']} | {vs_text} | {label} |"
        )
    return rows


HEADER = (
    "| comparison | tok/s ratio [95% CI] | penalty cost (1 - ratio) [95% CI] | n | MDE |\n"
    "|---|---|---|---|---|"
)


def penalty_cost(version: str) -> dict | None:
    """The record of issue 22's penalty-cost runs measured with the newest run's series."""
    runs = load_runs(version)
    if not runs:
        return None
    src = runs[-1]
    same = [r for r in runs if r.get("series_hash") == src.get("series_hash")]
    threshold = _threshold(version)
    parts, numbers, tables, not_run, key = [], {"runs": []}, [], [], [KEY_HEADER]
    for run in runs:
        earlier = run.get("series_hash") != src.get("series_hash")
        if earlier and not any(c.startswith("pristine/") for c in run["cells"]):
            continue
        done = ab_rounds.from_records(run["rounds"])
        entry = {"date": run["date"], "command": run.get("command"), "shapes": {}}
        for stage in run["stages"]:
            shape = f"B={stage['batch']} L={stage['output_len']}"
            rounds = [r for r in done if r.index in set(stage["rounds"])]
            measured = any(not r.warmup for r in rounds)
            if measured:
                key += key_rows(run, stage, rounds, pristine_only=earlier)
            if earlier:
                continue
            if not measured:
                not_run.append(f"{shape} ({stage['status']})")
                entry["shapes"][shape] = {"status": stage["status"]}
                continue
            got, nums, rows = judge_stage(run, stage, rounds, threshold)
            parts += got
            entry["shapes"][shape] = {"status": stage["status"], **nums}
            title = f"{shape}, input {stage['input_len']} (run {run['date']}, {stage['status']})"
            tables.append(f"{title}\n\n" + "\n".join([HEADER, *rows]))
        if earlier:
            continue
        if run.get("stopped"):
            not_run.append(f"run {run['date']} stopped: {run['stopped'][:300]}")
        numbers["runs"].append(entry)
    numbers["metric"] = "output tok/s of one LLM.generate per cell and round; ratio B/A"
    numbers["not_run"] = not_run
    numbers["runs_of_other_series_left_out"] = len(runs) - len(same)
    nothing = "; ".join(not_run) or "no run measured a patched cell beside a plain or baseline one"
    verdict = combine(parts) if parts else Verdict(NOT_RUN, nothing)
    if parts and not_run:
        verdict = Verdict(verdict.outcome, f"{verdict.reason}; not measured: {'; '.join(not_run)}")
    key_table = "\n".join(key) if len(key) > 1 else None
    return _record(src, STEP, "003", verdict, numbers, tables=tables, key_table=key_table)


def _threshold(version: str) -> float:
    """The registry step's noise threshold for STEP (2% unless the entry says otherwise)."""
    for entry in registry.load().values():
        for step in entry.steps_on(version):
            if STEP in step.records:
                return step.threshold
    return 0.02


def records(version: str) -> list[dict]:
    made = [penalty_cost(version)]
    return [r for r in made if r]
