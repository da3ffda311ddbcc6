"""GPU tier, engine A/B runs (`python -m verify.ab engine`, scripts/gpu_penalties_ab.sh) ->
records. 0011's penalty cost: results/gpu/<version>/penalties-ab*.json (one file per
device call) -> the record `e2e-gpu-penalty-cost`.

Per run and batch shape, every variant's penalty cost is the paired ratio of its penalized
over its plain tok/s (same engine, same rounds; below 1 is a cost), and patched is compared
with the series and pristine cell by cell. The rule (verify.verdicts.performance, claim "not
slower", the registry step's threshold, 2%):

- patched's penalty cost: pass when the interval's lower bound of penalized/plain tok/s
  excludes a cost beyond the threshold; fail when a cost beyond it is resolved; else no
  difference resolved (the interval is too wide to tell);
- patched against the series, every sampling: not slower, same three outcomes. Plain requests
  do the same work in both builds (0011's state holds no row when no request has a penalty:
  record_sampled returns after one host check per step), so patched/series on plain is the
  two engines' A/A. Two engines of one build differ by a few percent for a whole run (engine
  starts are not alike: series2/series 1.017 in one run, patched/series on plain 0.973 to
  1.020 over single runs), so a run's rounds cannot tell a plain-path regression from the
  engine pair it drew: the plain A/A is judged once, over every run of the current code, each
  run's ratio one unit (`judge_plain_aa`; the plain path's extra work is a few host checks per
  step, whatever the shape); each pool shows its rounds' ratio and its runs' ratio, not
  judged. A regression that the engine pairs share still fails.
  Where a run has a second engine of a build (`series2`), that build's own plain A/A is shown
  beside it, not judged (how far two engines of one build differ). A run whose engines ran
  apart, for shapes whose engines do not fit one GPU together (a GPU each, PB_GPU_PER_VARIANT=1,
  or in turn on one GPU, PB_ENGINES_IN_TURN=1), is left out of every plain A/A and
  patched/baseline tok/s (the cards or the hours would differ too); its costs and penalized
  over plain, each within an engine, count;
  The penalized comparison is judged with that difference taken out:
  patched's penalized/plain over the series' penalized/plain, paired by round
  (`penalty_path_ratio`); the raw penalized ratio is reported beside it;
- tokens: patched identical to the series (and pristine) per config, judged only where the run
  has a second engine of the baseline's build (`series2`, `pristine2`) as the control
  (verify.verdicts.identity): GPU engines of one build need not agree across starts. Otherwise,
  and for sampled configs without per-request seeds, the comparison is reported, not judged.
Shapes that a run did not reach are listed as not run with its reason. Pools are per GPU model;
the goal is stated on one (the step's `goal_gpu`), so the reason names the goal cells that GPU
did not measure, and those where patched did not meet the series there.

The record's key table (the PR report's) puts, per run, shape and sampling, pristine's, the
series' and patched's penalty cost side by side, with patched/series on plain (the A/A) and on
penalized over plain. Pristine's cost is also taken from runs made with an earlier form of the
series: pristine runs the pin's sdist, whatever the series; the other variants of such runs are
left out.
"""

from __future__ import annotations

import math
import statistics

from verify import registry, results, stats
from verify.importer import gpu, penalty_profile
from verify.importer.cost_rows import cost_cell, cost_row, cost_text, interval_cell, sampler_row
from verify.importer.engine_runs import (  # noqa: F401  (re-exported for the readers' tests)
    DEFAULT_MODEL,
    GPU_KEYS,
    PENALTY_KEYS,
    Pool,
    _diagnostics,
    _tokens,
    _tokens_across_starts,
    comparable,
    engines_apart,
    entropy_of,
    gpu_diagnostics,
    gpu_model,
    gpu_note,
    median_of,
    model_of,
    pool_key,
    pool_runs,
    ratio,
    run_name,
    run_note,
    runner_of,
    same_code,
    sampler_host,
    sampling_of,
    shape_of,
    stage_cells,
    step_ratio,
    stop_cause,
)
from verify.importer.gpu import _record
from verify.verdicts import INCONCLUSIVE, NOT_RUN, PASS, Verdict, combine, performance

STEP = "e2e-gpu-penalty-cost"
Cell = tuple[int, int, bool, bool]  # a goal cell: (B, L at least, top-k/top-p, seeded)


def goal_params(version: str) -> tuple[tuple[Cell, ...], str]:
    """(goal cells, goal GPU model) of the registry step's `params`: where patched's cost must
    be measured (on the goal GPU) before a pass speaks for the range (else inconclusive)."""
    params = gpu.params(version, STEP)
    return tuple(tuple(c) for c in params.get("goal_cells", ())), params.get("goal_gpu", "")


FILES = "penalties-ab*.json"
BASELINES = ("series", "pristine")


def load_runs(version: str, files: str = FILES) -> list[dict]:
    """Every engine A/B run (`python -m verify.ab engine`) of `version` in the step files
    matching `files` (default: the penalty-cost runs'), oldest first."""
    runs = [results.read_json(p) for p in sorted((gpu.gpu_root() / version).glob(files))]
    return sorted((r for r in runs if r.get("kind") == "engine-ab"), key=lambda r: r["date"])


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


def judge_stage(
    run: dict,
    stage: dict,
    rounds: list,
    found: dict,
    threshold: float,
    label: str = "",
    by_run: dict[str, list] | None = None,
) -> tuple[list, dict, list]:
    """(verdict parts, numbers, table rows) of one measured stage; `found`: its `costs`;
    `label` names the stage in the verdicts' reasons (default: its shape); `by_run`: {run
    name: its rounds} of the runs that are units of the plain A/A (their engines shared a
    GPU): patched / a baseline on tok/s is shown over their rounds (default `rounds`)."""
    cells, parts, numbers, rows = stage_cells(run, stage), [], {}, []
    aa_rounds = (
        rounds if by_run is None else [r for run_rounds in by_run.values() for r in run_rounds]
    )
    shape = label or shape_of(stage)
    for (variant, topkp), r in found.items():
        _cost_shown(variant, topkp, r, rounds, cells, numbers, rows)
        if variant == "patched":
            what = f"{shape} {_kind(topkp)} tok/s"
            parts.append(not_slower(r, threshold, what, "penalized/plain"))
    for topkp in (False, True):  # patched against the series, the engines' A/A taken out
        path = penalty_path_ratio(rounds, cells, "series", topkp)
        if path is not None:
            label = f"penalized over plain, {_kind(topkp)}"
            numbers[f"patched/series ({label})"] = path.as_dict()
            rows.append(cost_row(f"patched / series, {label}", path, cost=False))
            parts.append(not_slower(path, threshold, f"{shape} {label}", "patched/series"))
    _same_build_shown(rounds, cells, numbers, rows)
    for base in BASELINES:
        for (variant, pen, topkp), cell in cells.items():
            other = cells.get((base, pen, topkp))
            if variant != "patched" or not other:
                continue
            what = f"{'penalized' if pen else 'plain'}, {_kind(topkp)}"
            r = ratio(aa_rounds, other, cell)
            if r is not None:
                numbers[f"patched/{base} ({what})"] = r.as_dict()
                rows.append(cost_row(f"patched / {base} tok/s, {what}", r, cost=False))
                if base == "series" and not pen and by_run:  # the A/A, judged over all runs
                    pairs = engine_pairs_ratio(by_run, other, cell)
                    unit = f"{what}, over engine pairs (n = runs), not judged here"
                    numbers[f"patched/series ({unit})"] = pairs.as_dict()
                    rows.append(cost_row(f"patched / series tok/s, {unit}", pairs, cost=False))
            if comparable(run["configs"][cell.split("/", 1)[1]]):
                control = cells.get((f"{base}2", pen, topkp))
                what_tokens = f"{shape} {what} tokens vs {base}"
                kept = (run["vllm_version"], entropy_of(run))
                verdict = _tokens(rounds, other, cell, control, what_tokens, kept)
                numbers[f"tokens patched vs {base} ({what})"] = verdict.reason
                if control:  # judged only against a second engine of the baseline's build
                    parts.append(verdict)
    return parts, numbers, rows


def _cost_shown(
    variant: str, topkp: bool, r: stats.Ratio, rounds: list, cells: dict, numbers: dict, rows: list
) -> None:
    """One variant's penalty cost in the numbers and rows, with what is shown beside it and
    never judged: the cost per engine step and the sampler's host time per step."""
    numbers[f"{variant} penalized/plain ({_kind(topkp)})"] = r.as_dict()
    rows.append(cost_row(f"{variant} penalty cost, {_kind(topkp)}", r))
    plain, pen = cells[(variant, False, topkp)], cells[(variant, True, topkp)]
    per_step = step_ratio(rounds, plain, pen)
    if per_step is not None:  # shown, not judged: tok/s is what a user gets
        label = f"{variant} penalty cost per engine step (median step), {_kind(topkp)}"
        numbers[f"{variant} penalized/plain median step ({_kind(topkp)}, not judged)"] = {
            **per_step.as_dict(),
            "slow_share_plain": median_of(rounds, plain, "steps", "slow_share"),
            "slow_share_penalized": median_of(rounds, pen, "steps", "slow_share"),
            "cpu_steal_plain": median_of(rounds, plain, "cpus", "steal"),
            "cpu_steal_penalized": median_of(rounds, pen, "cpus", "steal"),
            **gpu_diagnostics(rounds, plain, pen),
        }
        rows.append(cost_row(f"{label}, not judged", per_step))
    host = sampler_host(rounds, plain, pen)
    if host is not None:  # shown, not judged: where the penalized step's time goes
        numbers[f"{variant} sampler host per step ({_kind(topkp)}, not judged)"] = host
        label = f"{variant} sampler host time per step (median), {_kind(topkp)}, not judged"
        rows.append(sampler_row(label, host))


def _same_build_shown(rounds: list, cells: dict, numbers: dict, rows: list) -> None:
    """Two engines of one build on plain requests (`<build>2` beside `<build>`): shown beside
    patched/series, not judged."""
    for (variant, pen, topkp), cell in cells.items():
        first = cells.get((variant[:-1], pen, topkp)) if variant.endswith("2") else None
        same_build = ratio(rounds, first, cell) if first and not pen else None
        if same_build is not None:
            what = f"{variant}/{variant[:-1]} (plain, {_kind(topkp)}, one build, not judged)"
            numbers[what] = same_build.as_dict()
            label = f"{variant} / {variant[:-1]} tok/s, plain, {_kind(topkp)}"
            rows.append(
                cost_row(f"{label} (two engines of one build), not judged", same_build, cost=False)
            )


def per_run_ratios(by_run: dict[str, list], base: str, var: str) -> dict[str, float]:
    """{run name: var/base tok/s over that run's rounds} of the runs that measured both."""
    found = {name: ratio(rounds, base, var) for name, rounds in by_run.items()}
    return {name: r.ratio for name, r in found.items() if r is not None}


def engine_pairs_ratio(by_run: dict[str, list], base: str, var: str) -> stats.Ratio:
    """var/base tok/s with each run (one engine per build) as one unit: the geometric mean of
    the runs' own ratios, its interval from how far the runs differ (none from one run)."""
    return stats.ratio_of_ratios(list(per_run_ratios(by_run, base, var).values()))


def plain_aa_logs(pool: Pool) -> dict[str, list[float]]:
    """{`run_name`: log patched/series tok/s on plain requests, one per plain sampling} of the
    pool's runs."""
    cells = stage_cells(pool.run, pool.stage)
    pairs = [
        (cells[("series", False, topkp)], cells[("patched", False, topkp)])
        for topkp in (False, True)
        if ("series", False, topkp) in cells and ("patched", False, topkp) in cells
    ]
    out: dict[str, list[float]] = {}
    for pair in pairs:
        for name, r in per_run_ratios(pool.one_gpu_runs, *pair).items():
            out.setdefault(name, []).append(math.log(r))
    return out


def judge_plain_aa(pools: list[Pool], threshold: float) -> tuple[Verdict, dict] | None:
    """Patched/series on plain requests over every run of the current code, each run's engine
    pair one unit (the geometric mean of its plain ratios, over its shapes and samplings): a
    plain-path regression that the runs share fails it, the engine pair a run drew does not."""
    logs: dict[str, list[float]] = {}
    for pool in pools:
        if not pool.pristine_only:
            for name, found in plain_aa_logs(pool).items():
                logs.setdefault(name, []).extend(found)
    per_run = {name: math.exp(statistics.fmean(x)) for name, x in sorted(logs.items()) if x}
    if not per_run:
        return None
    r = stats.ratio_of_ratios(list(per_run.values()))
    what = "plain requests, every shape, tok/s over engine pairs (n = runs)"
    return not_slower(r, threshold, what, "patched/series"), {**r.as_dict(), "per_run": per_run}


def penalty_path_ratio(rounds: list, cells: dict, base: str, topkp: bool) -> stats.Ratio | None:
    """Patched's penalized/plain over `base`'s, paired by round: the penalized comparison with
    the engines' difference on plain requests (the same work in both builds) taken out. None
    unless some counted round measured all four cells."""
    names = [cells.get((v, pen, topkp)) for v in ("patched", base) for pen in (True, False)]
    if not all(names):
        return None
    both = [r for r in rounds if not r.warmup and all(n in r.values for n in names)]
    if not both:
        return None
    pen_v, plain_v, pen_b, plain_b = ([r.values[n]["tok_per_s"] for r in both] for n in names)
    per_round = [
        (pv / lv) / (pb / lb) for pv, lv, pb, lb in zip(pen_v, plain_v, pen_b, plain_b, strict=True)
    ]
    return stats.ratio_of_ratios(per_round)


KEY_HEADER = (
    "Penalty cost: 1 - penalized/plain output tok/s of one engine over the same rounds [95% CI],"
    " n rounds. patched / series, plain: tok/s of plain requests, the same work in both builds"
    " (the engines' A/A, shown per pool; judged over all runs, each run one unit, below the"
    " table). patched / series, penalized over plain: patched's penalized/plain over"
    " the series', paired by round (the engines' difference taken out). '-': not in the run"
    " (or, in a run of an earlier patch form, left out).\n\n"
    "| B | L | sampling | pristine cost | series cost | patched cost | pristine on MRV2 cost "
    "| patched / series, plain (A/A) | patched / series, penalized over plain "
    "| GPU, model: run(s) |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


#: The builds the key table gives a cost column: `mrv2` is v<pin> on Model Runner V2.
BUILDS = ("pristine", "series", "patched", "mrv2")


def key_rows(pool: Pool, found: dict) -> list[str]:
    """The key table's rows of one pool (`found`: its `costs`): each build's penalty cost side
    by side, patched/series on plain tok/s (the engines' A/A) and on penalized over plain."""
    cells = stage_cells(pool.run, pool.stage)
    gpu_name = (pool.run.get("machine") or {}).get("gpu") or "GPU not recorded"
    dates = ", ".join(r.split(": ", 1)[0] for r in pool.runs)
    label = f"{gpu_name.removeprefix('NVIDIA ')}, {pool.model}: {dates}"
    label += " (earlier patch form: pristine only)" if pool.pristine_only else ""
    builds = ("pristine", "mrv2") if pool.pristine_only else BUILDS
    rows = []
    for topkp in (False, True):
        if not any((b, topkp) in found for b in builds):
            continue
        ran = {v for v, _, t in cells if t == topkp}
        cost = dict.fromkeys(BUILDS, "-")
        cost |= {b: cost_cell(found.get((b, topkp))) for b in builds if b in ran}
        plain_s, plain_p = (cells.get((b, False, topkp)) for b in ("series", "patched"))
        later = not pool.pristine_only
        aa = ratio(pool.one_gpu_rounds, plain_s, plain_p) if later and plain_s and plain_p else None
        path = penalty_path_ratio(pool.rounds, cells, "series", topkp) if later else None
        also = ", in a top-k/top-p run" if not topkp and pool.has_topkp else ""
        rows.append(
            f"| {pool.stage['batch']} | {pool.stage['output_len']} "
            f"| {_kind(topkp)}, {pool.seeded}{also} "
            f"| {cost['pristine']} | {cost['series']} | {cost['patched']} | {cost['mrv2']} "
            f"| {interval_cell(aa)} | {interval_cell(path)} | {label} |"
        )
    return rows


HEADER = (
    "| comparison | tok/s ratio [95% CI] | penalty cost (1 - ratio) [95% CI] | n | MDE |\n"
    "|---|---|---|---|---|"
)


def sampling_text(config: dict) -> str:
    """`top-k 20, top-p 0.95, presence 1.5`: a config's sampling, as a reader names it."""
    names = {"top_k": "top-k", "top_p": "top-p", "presence_penalty": "presence",
             "frequency_penalty": "frequency", "repetition_penalty": "repetition"}  # fmt: skip
    parts = [f"{label} {config[k]:g}" for k, label in names.items() if k in config]
    return ", ".join(parts) or f"temperature {config.get('temperature', 1.0):g}"


def production_headline(pools: list[Pool], version: str) -> str | None:
    """The headline of a production-shape pool (not the small random model): this PR's
    penalized tok/s over v<pin>'s with each build's penalty cost beside it, the pool of the
    most rounds; None where no such pool compares the two on penalized requests."""
    best = None
    for pool in pools:
        if pool.model.startswith(DEFAULT_MODEL) or pool.pristine_only:
            continue
        cells = stage_cells(pool.run, pool.stage)
        for topkp in (True, False):
            base, var = cells.get(("pristine", True, topkp)), cells.get(("patched", True, topkp))
            r = ratio(pool.rounds, base, var) if base and var else None
            if r is not None and r.low is not None and (best is None or r.n > best[1].n):
                best = (pool, r, cells, topkp)
    if best is None:
        return None
    pool, r, cells, topkp = best
    found = costs(pool.run, pool.stage, pool.rounds)
    cost = {b: cost_text(found[(b, topkp)]) for b in BUILDS if (b, topkp) in found}
    names = {"patched": "this PR", "pristine": f"v{version}", "mrv2": f"v{version} on MRV2"}
    beside = "; ".join(f"{names[b]} {cost[b]}" for b in names if b in cost)
    config = pool.run["configs"][cells[("patched", True, topkp)].split("/", 1)[1]]
    weights = ", ".join(filter(None, ["dummy weights", entropy_of(pool.run)]))
    return (
        f"penalized decode {r.ratio:.2f}x [{r.low:.2f}, {r.high:.2f}] vs v{version} "
        f"(penalty cost: {beside}), {gpu_model(pool.gpu)}, {pool.run['model']} shape "
        f"({weights}), "
        f"{shape_of(pool.stage)}, {sampling_text(config)}, V1 runner, {pool.seeded}, n={r.n}"
    )


def penalty_cost(version: str) -> dict | None:
    """The record of the penalty-cost runs measured with the newest run's series, the
    rounds of runs at one shape and set of configs pooled."""
    runs = load_runs(version)
    if not runs:
        return None
    src = runs[-1]
    pools, entries, not_run = pool_runs(runs, version)
    threshold = _threshold(version)
    parts, tables, key, covered, compared = [], [], [KEY_HEADER], {}, {}
    numbers: dict = {"runs": entries, "pooled": {}}
    for pool in pools:
        found = costs(pool.run, pool.stage, pool.rounds)
        key += key_rows(pool, found)
        if pool.pristine_only:
            continue
        got, nums, rows = judge_stage(
            pool.run,
            pool.stage,
            pool.rounds,
            found,
            threshold,
            pool.label,
            pool.one_gpu_runs,
        )
        parts += got
        numbers["pooled"][pool.title] = nums
        tables.append(f"{pool.title}\n\n" + "\n".join([HEADER, *rows]))
        shape = (pool.stage["batch"], pool.stage["output_len"])
        seeded = pool.seeded == "seeded"
        for variant, topkp in found:
            if variant != "patched":
                continue
            cell, model = (*shape, topkp, seeded), gpu_model(pool.gpu)
            covered.setdefault(cell, set()).add(model)
            if ("series", topkp) in found:
                compared.setdefault(cell, set()).add(model)
    plain = judge_plain_aa(pools, threshold)
    apart = sorted({name for pool in pools for name in pool.apart})
    if apart:  # their plain A/A would hold the cards' or the hours' difference
        numbers["runs whose engines ran apart, left out of the plain A/A"] = apart
    if plain is not None:
        parts.append(plain[0])
        numbers["patched/series plain, engine pairs as units"] = plain[1]
        left_out = f" ({len(apart)} run(s) with engines apart left out)" if apart else ""
        key += [
            "",
            f"Plain requests, patched / series tok/s over every run{left_out} (judged): "
            f"{plain[0].reason}",
        ]
    goal, goal_gpu = goal_params(version)
    missing = goal_missing(set(covered), goal)
    on_goal_gpu = goal_missing({c for c, models in covered.items() if goal_gpu in models}, goal)
    unseries = goal_missing({c for c, models in compared.items() if goal_gpu in models}, goal)
    numbers["metric"] = "output tok/s of one LLM.generate per cell and round; ratio B/A"
    numbers["not_run"] = not_run
    numbers["goal_not_measured"] = missing
    numbers[f"goal_not_measured_on_{goal_gpu}"] = on_goal_gpu
    numbers[f"goal_not_compared_with_series_on_{goal_gpu}"] = unseries
    numbers["runs_of_other_series_left_out"] = len(runs) - len(entries)  # pool_runs: current
    stopped = [f"run {e['date']}: {e['stopped']}" for e in entries if "stopped" in e]
    verdict = _verdict(parts, not_run, missing, stopped)
    if not missing:
        verdict = _on_goal_gpu(verdict, covered, (goal, goal_gpu), on_goal_gpu, unseries)
    key_table = "\n".join(key) if len(key) > 1 else None
    record = _record(src, STEP, "003", verdict, numbers, tables=tables, key_table=key_table)
    record = penalty_profile.attach(record, version, "V1")
    headline = production_headline(pools, version)
    return record | ({"headline": headline} if headline else {})


def _on_goal_gpu(
    verdict: Verdict, covered: dict, goal: tuple, unmeasured: list[str], uncompared: list[str]
) -> Verdict:
    """A verdict over the whole goal range (`goal`: its cells and GPU model), saying where it
    was measured when that was not all on the goal's GPU, and at which goal cells patched was
    not compared with the series there (the goal's "never slower than the series" holds on
    that GPU only where it was compared)."""
    (cells, gpu), reason = goal, verdict.reason
    if unmeasured:
        models = sorted({m for c, ms in covered.items() for m in ms if goal_cell(c, cells)})
        reason += f"; goal range measured on {', '.join(models)}, not all of it on the {gpu}"
        reason += " (the issue's GPU)"
    if uncompared:
        where = "any goal cell" if len(uncompared) == len(cells) else "; ".join(uncompared)
        reason += f"; on the {gpu} not compared with the series at {where}"
    return Verdict(verdict.outcome, reason)


def covers(cell: Cell, goal: Cell) -> bool:
    """Whether a measured (B, L, top-k/top-p, seeded) cell covers a goal cell."""
    return cell[0] == goal[0] and cell[1] >= goal[1] and cell[2:] == goal[2:]


def goal_cell(cell: Cell, cells: tuple[Cell, ...]) -> bool:
    return any(covers(cell, goal) for goal in cells)


def goal_missing(covered: set[Cell], cells: tuple[Cell, ...]) -> list[str]:
    """Goal `cells` that no cell of `covered` covers."""
    return [
        f"B={b} L{'>=' if length > 2048 else '='}{length} {_kind(topkp)}, "
        f"{'seeded' if seeded else 'unseeded'}"
        for b, length, topkp, seeded in cells
        if not any(covers(c, (b, length, topkp, seeded)) for c in covered)
    ]


def _verdict(
    parts: list[Verdict], not_run: list[str], missing: list[str], stopped: list[str]
) -> Verdict:
    """The measured parts combined; shapes not reached and runs that stopped named; a pass
    that does not cover the goal range is inconclusive."""
    if not parts:
        nothing = "; ".join([*not_run, *stopped])
        return Verdict(NOT_RUN, nothing or "no run measured a patched cell beside a baseline")
    verdict = combine(parts)
    if missing:
        passed = verdict.outcome == PASS
        head = "pass where measured" if passed else verdict.reason
        outcome = INCONCLUSIVE if passed else verdict.outcome
        verdict = Verdict(outcome, f"{head}; goal cells not measured: {'; '.join(missing)}")
    if not_run:
        verdict = Verdict(verdict.outcome, f"{verdict.reason}; not measured: {'; '.join(not_run)}")
    if stopped:
        reason = f"{verdict.reason}; runs that stopped: {'; '.join(stopped)}"
        verdict = Verdict(verdict.outcome, reason)
    return verdict


def _threshold(version: str) -> float:
    """The registry step's noise threshold for STEP (2% unless the entry says otherwise)."""
    return registry.threshold(version, STEP)


def records(version: str) -> list[dict]:
    made = [penalty_cost(version)]
    return [r for r in made if r]
