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

import json
import math
import re
import statistics
from dataclasses import dataclass, field

from verify import registry, results, stats
from verify.ab import rounds as ab_rounds
from verify.importer import gpu, kept_tokens
from verify.importer.cost_rows import cost_cell, cost_row, cost_text, interval_cell, sampler_row
from verify.importer.gpu import _record
from verify.series import read_series
from verify.verdicts import INCONCLUSIVE, NOT_RUN, PASS, Verdict, combine, identity, performance

STEP = "e2e-gpu-penalty-cost"
Cell = tuple[int, int, bool, bool]  # a goal cell: (B, L at least, top-k/top-p, seeded)


def goal_params(version: str) -> tuple[tuple[Cell, ...], str]:
    """(goal cells, goal GPU model) of the registry step's `params`: where patched's cost must
    be measured (on the goal GPU) before a pass speaks for the range (else inconclusive)."""
    steps = [st for e in registry.load().values() for st in e.steps_on(version)]
    params = next((st.params for st in steps if STEP in st.records and st.params), {})
    return tuple(tuple(c) for c in params.get("goal_cells", ())), params.get("goal_gpu", "")


FILES = "penalties-ab*.json"
PENALTY_KEYS = ("presence_penalty", "frequency_penalty", "repetition_penalty")
BASELINES = ("series", "pristine")


def load_runs(version: str, files: str = FILES) -> list[dict]:
    """Every engine A/B run (`python -m verify.ab engine`) of `version` in the step files
    matching `files` (default: the penalty-cost runs'), oldest first."""
    runs = [results.read_json(p) for p in sorted((gpu.gpu_root() / version).glob(files))]
    return sorted((r for r in runs if r.get("kind") == "engine-ab"), key=lambda r: r["date"])


def shape_of(stage: dict) -> str:
    """`B=64 L=2048` of a stage."""
    return f"B={stage['batch']} L={stage['output_len']}"


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


def _diagnostics(rnd: ab_rounds.Round, cell: str, group: str) -> dict:
    """`cell`'s `group` of diagnostics in `rnd` ("steps", "cpus"); {} where the run has none
    (runs before they were recorded)."""
    return (rnd.values.get(cell) or {}).get(group) or {}


def step_ratio(rounds: list[ab_rounds.Round], base: str, var: str) -> stats.Ratio | None:
    """var/base of the engine's median-step token rate (verify.ab.engines.step_stats) over the
    counted rounds that recorded it for both; None when fewer than two did. A diagnostic
    beside tok/s: stalls move tok/s, not this."""
    key = "median_tok_per_s"
    counted = [r for r in rounds if not r.warmup]
    pairs = [
        (_diagnostics(r, base, "steps").get(key), _diagnostics(r, var, "steps").get(key))
        for r in counted
    ]
    pairs = [(b, v) for b, v in pairs if b and v]
    if len(pairs) < 2:
        return None
    return stats.paired_ratio([b for b, _ in pairs], [v for _, v in pairs])


def median_of(rounds: list[ab_rounds.Round], cell: str, group: str, key: str) -> float | None:
    """The median over counted rounds of `cell`'s `group`/`key` (e.g. steps/slow_share, the
    share of its decode time in slow steps; cpus/steal, the share of its CPUs' time stolen)."""
    found = [_diagnostics(r, cell, group).get(key) for r in rounds if not r.warmup]
    found = [x for x in found if x is not None]
    return statistics.median(found) if found else None


#: verify.ab.nvml's per-cell keys shown beside the median step: mean power (W), the shares of
#: the cell's time held back by the power cap and by temperature, the SM clock over its maximum.
GPU_KEYS = ("power_w", "power_throttle", "thermal_throttle", "sm_clock")


def gpu_diagnostics(rounds: list[ab_rounds.Round], plain: str, pen: str) -> dict:
    """The median over counted rounds of each GPU_KEYS of the `plain` and `pen` cells, as
    gpu_<key>_plain / _penalized; only those the cells recorded (runs before verify.ab.nvml
    have none)."""
    found = {
        f"gpu_{key}_{side}": median_of(rounds, cell, "gpu", key)
        for key in GPU_KEYS
        for side, cell in (("plain", plain), ("penalized", pen))
    }
    return {k: v for k, v in found.items() if v is not None}


def sampler_host(rounds: list[ab_rounds.Round], plain: str, pen: str) -> dict | None:
    """Where a penalized step's time goes, from the counted rounds whose `plain` and `pen`
    cells both recorded the series' sampler timers (verify.ab.engines.take_sampler_timers):
    the medians of each cell's host time per step in sample_tokens and in the sampler call
    (µs), of their paired differences, and of the paired difference of the engines' median
    steps (µs); None where fewer than two rounds recorded both."""
    pairs = []
    for rnd in (r for r in rounds if not r.warmup):
        a, b = _diagnostics(rnd, plain, "sampler"), _diagnostics(rnd, pen, "sampler")
        if "sample_tokens_us" in a and "sample_tokens_us" in b:
            steps = [_diagnostics(rnd, c, "steps").get("median_step_ms") for c in (plain, pen)]
            pairs.append((a, b, steps))
    if len(pairs) < 2:
        return None
    out: dict = {"n": len(pairs)}
    for key in ("sample_tokens_us", "sample_us"):
        out[f"plain_{key}"] = statistics.median(a[key] for a, _, _ in pairs)
        out[f"penalized_{key}"] = statistics.median(b[key] for _, b, _ in pairs)
        out[f"difference_{key}"] = statistics.median(b[key] - a[key] for a, b, _ in pairs)
    steps = [1000 * (q - p) for _, _, (p, q) in pairs if p and q]
    out["difference_step_us"] = statistics.median(steps) if steps else None
    return out


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
                verdict = _tokens(rounds, other, cell, control, what_tokens, run["vllm_version"])
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


def engines_apart(run: dict) -> str:
    """How the run's engines ran apart, so that their plain A/A holds more than the builds'
    difference: "one GPU per engine" (PB_GPU_PER_VARIANT=1: each variant's
    CUDA_VISIBLE_DEVICES; the cards differ too), "engines in turn on one GPU"
    (PB_ENGINES_IN_TURN=1: at different times); "" when they ran side by side on one GPU."""
    if run.get("in_turn"):
        return "engines in turn on one GPU"
    variants = run.get("variants") or {}
    devices = {(v.get("env") or {}).get("CUDA_VISIBLE_DEVICES") for v in variants.values()}
    return "one GPU per engine" if len(devices) > 1 else ""


def run_name(run: dict) -> str:
    """`<date> <tag>` of a run: jobs of one call beside each other start in the same second,
    each with its own engines and tag (gpu_penalties_ab.sh's argument; else the command)."""
    command = run.get("command") or ""
    tag = re.search(r"gpu_penalties_ab\.sh (\S+)", command)
    return f"{run['date']} {tag.group(1) if tag else command}".strip()


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


def comparable(config: dict) -> bool:
    """Whether two engines' tokens of `config` can be compared: greedy, or a seed per request
    (without one, each engine draws from its own generator in its own order of calls)."""
    return config.get("temperature") == 0 or config.get("seed", 0) is not None


def _tokens(
    rounds: list, base: str, cell: str, control: str | None, what: str, version: str = ""
) -> Verdict:
    """Identity of `cell`'s tokens with `base`'s. The control is a second engine of `base`'s
    build (`control`): GPU engines of one build need not agree across starts, so without it the
    comparison is reported, not judged. Tokens are compared round by round, only in rounds that
    ran every engine compared (a pool's other runs started other engines)."""
    cells = [base, cell] + ([control] if control else [])
    mine = [r for r in rounds if all(c in r.values for c in cells)]

    def agree(a: str, b: str) -> bool:
        return all(r.values[a]["token_ids_hash"] == r.values[b]["token_ids_hash"] for r in mine)

    if not mine:
        return _tokens_across_starts(rounds, base, cell, control, what, version)
    identical = agree(base, cell)
    if control is None:
        seen = "identical" if identical else "differ"
        return Verdict(
            NOT_RUN, f"{what}: {seen}; not judged (no second engine of the baseline's build)"
        )
    build = base.split("/")[0]
    verdict = identity.judge(identical, agree(base, control), what, baseline=build)
    if verdict.outcome == PASS and not verdict.reason:
        same = f"identical in {len(mine)} round(s), {build} agreeing with its second engine"
        return Verdict(PASS, f"{what}: {same}")
    return verdict


def _tokens_across_starts(
    rounds: list, base: str, cell: str, control: str | None, what: str, version: str = ""
) -> Verdict:
    """`cell`'s tokens against `base`'s where no round ran them together (engines that took
    turns, or calls of one engine each): judged only when the baseline and its second engine
    gave one and the same output in every round each ran (so separate starts of that build
    agree, here across calls too), and `cell` ran; else not run. Outputs of the baseline's
    build kept by other runs (kept_tokens: same sampling and batch, any length) are part of
    the control: where their common prefix differs, the control failed."""
    hashes = {
        c: {r.values[c]["token_ids_hash"] for r in rounds if c in r.values}
        for c in (base, cell, control)
        if c
    }
    missing = [c for c, h in hashes.items() if not h]
    if control is None or missing:
        absent = ", ".join(missing) or "a second engine of the baseline's build"
        return Verdict(NOT_RUN, f"{what}: not judged across engine starts (no {absent})")
    build = base.split("/")[0]
    control_agrees = len(hashes[base] | hashes[control]) == 1
    elsewhere = None
    if control_agrees and version:
        elsewhere = kept_tokens.disagreement(version, build, base.split("/", 1)[1])
        control_agrees = elsewhere is None
    identical = hashes[cell] == hashes[base] and len(hashes[base]) == 1
    verdict = identity.judge(identical, control_agrees, what, baseline=build)
    if elsewhere:
        return Verdict(verdict.outcome, f"{verdict.reason}: {elsewhere}")
    if verdict.outcome == PASS and not verdict.reason:
        same = f"identical across separate engine starts, {build} agreeing with its second engine"
        return Verdict(PASS, f"{what}: {same}")
    return verdict


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


def run_note(run: dict, stage: dict, rounds: list[ab_rounds.Round]) -> str:
    """How one run of a pool measured, so that its runs can be told apart: alone on its host
    or beside other jobs (gpu_penalties_ab_parallel.sh's PB_PARALLEL), whether its engine
    threads hopped CPUs (PB_HOP_CPUS_EVERY), and its own patched
    penalized/plain tok/s (no top-k/top-p) with the spread of its rounds (sd of the log
    ratios), where it has two rounds of both."""
    parallel = re.search(r"beside (\d+) other jobs", run.get("command", ""))
    where = f"beside {parallel.group(1)} other jobs" if parallel else "alone"
    hop = re.search(r"PB_HOP_CPUS_EVERY=(\d+)", run.get("command", ""))
    if hop:  # verify.ab.engines.CpuHopper: each cell spread over all CPUs
        where += f", engine threads hopping CPUs every {hop.group(1)} steps"
    apart = engines_apart(run)
    if apart:
        where += f", {apart}"
    cells = stage_cells(run, stage)
    plain, pen = cells.get(("patched", False, False)), cells.get(("patched", True, False))
    both = [r for r in rounds if not r.warmup and plain in r.values and pen in r.values]
    if not (plain and pen) or len(both) < 2:
        return where
    own = ratio(both, plain, pen)
    spread = stats.paired_spread(*([r.values[c]["tok_per_s"] for r in both] for c in (plain, pen)))
    gpu = gpu_note(both, [plain, pen])
    note = f"{where}: patched penalized/plain {own.ratio:.3f}, n={own.n}, sd {spread:.1%}"
    return f"{note}; {gpu}" if gpu else note


def gpu_note(rounds: list[ab_rounds.Round], cells: list[str]) -> str:
    """The GPU's state over `cells` of `rounds`, where they recorded it (verify.ab.nvml): the
    range of the cells' mean power and SM clock (share of its maximum) and the largest share
    of a cell's time held back by the power cap or temperature; "" where none did."""
    found = [_diagnostics(r, c, "gpu") for r in rounds for c in cells]
    found = [g for g in found if "power_w" in g]
    if not found:
        return ""
    power = [g["power_w"] for g in found]
    parts = [f"GPU {min(power):.0f}-{max(power):.0f} W"]
    clocks = [g["sm_clock"] for g in found if "sm_clock" in g]
    if clocks:
        parts.append(f"SM clock {min(clocks):.0%}-{max(clocks):.0%} of max")
    held = max(g.get("power_throttle", 0) + g.get("thermal_throttle", 0) for g in found)
    parts.append(f"throttled up to {held:.0%} of a cell")
    return ", ".join(parts)


@dataclass
class Pool:
    """The measured stages of one shape and set of configs on one GPU, pooled over runs: a
    round pairs cells on one run's engines, so the rounds of several device calls add up."""

    run: dict  # the first run (its configs name the cells)
    stage: dict  # its shape, with the cells of every run
    pristine_only: bool  # runs of an earlier patch form: only pristine's cost is used
    rounds: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    by_run: dict = field(default_factory=dict)  # {`run_name`: that run's rounds}
    apart: set = field(default_factory=set)  # `run_name`s whose engines ran apart

    def add(self, run: dict, stage: dict, rounds: list) -> None:
        self.stage["cells"] += [c for c in stage["cells"] if c not in self.stage["cells"]]
        self.rounds += rounds
        name = run_name(run)
        self.by_run[name] = rounds
        if engines_apart(run):
            self.apart.add(name)
        self.runs.append(f"{run['date'][:16]}: {stage['status']} [{run_note(run, stage, rounds)}]")

    @property
    def one_gpu_runs(self) -> dict[str, list]:
        """`by_run` without the runs whose engines ran apart (`engines_apart`): the units of the
        plain A/A (the same work in both builds, so a difference is the engines', not the
        cards' or the hours')."""
        return {name: rounds for name, rounds in self.by_run.items() if name not in self.apart}

    @property
    def one_gpu_rounds(self) -> list:
        """The pooled rounds of `one_gpu_runs`."""
        return [r for rounds in self.one_gpu_runs.values() for r in rounds]

    @property
    def shape(self) -> str:
        return shape_of(self.stage)

    @property
    def seeded(self) -> str:
        """`seeded` or `unseeded`: whether the pool's configs give each request a seed."""
        config = self.run["configs"][self.stage["cells"][0].split("/", 1)[1]]
        return "seeded" if comparable(config) else "unseeded"

    @property
    def gpu(self) -> str:
        """The GPU model its runs report (pools never mix models: `pool_key`)."""
        return (self.run.get("machine") or {}).get("gpu") or "GPU not recorded"

    @property
    def model(self) -> str:
        """The model shape its runs measured (pools never mix shapes: `pool_key`), with the
        next-token entropy the engines measured where they calibrated it."""
        return model_of(self.run)

    @property
    def has_topkp(self) -> bool:
        """Whether the pool's configs sample with top-k/top-p (its rounds had both)."""
        names = {c.split("/", 1)[1] for c in self.stage["cells"]}
        return any(sampling_of(self.run["configs"][n])[1] for n in names)

    @property
    def label(self) -> str:
        """`B=32 L=2048 (H100, unseeded)`: the pool as the verdict's reason names it."""
        extra = ", top-k/top-p run" if self.has_topkp else ""
        return f"{self.shape} ({gpu_model(self.gpu)}, {self.model}, {self.seeded}{extra})"

    @property
    def title(self) -> str:
        return (
            f"{self.shape}, input {self.stage['input_len']}, {self.seeded}, {self.gpu}, "
            f"{self.model}, runner {runner_of(self.run)} "
            f"({len(self.runs)} run(s): {'; '.join(self.runs)})"
        )


#: What runs before model shapes were recorded measured.
DEFAULT_MODEL = "qwen3-0.6b-random"


def entropy_of(run: dict) -> str | None:
    """`1.00 nats`: the mean next-token entropy the run's engines measured after calibrating
    their logit scale (verify.ab.output_entropy); None where they did not."""
    nats = sorted(
        {
            round(w["output_entropy"]["measured_nats"], 2)
            for w in (run.get("workers") or {}).values()
            if isinstance(w.get("output_entropy"), dict)
        }
    )
    if not nats:
        return None
    return f"{nats[0]:.2f} nats" if len(nats) == 1 else f"{nats[0]:.2f}-{nats[-1]:.2f} nats"


def model_of(run: dict) -> str:
    """`qwen3-8b, 1.00 nats`: the run's model shape, and its entropy where calibrated."""
    name, nats = run.get("model") or DEFAULT_MODEL, entropy_of(run)
    return f"{name}, {nats}" if nats else name


def runner_of(run: dict) -> str:
    """`V1` or `MRV2`: the runner the run's engines used (the front-end records it per
    worker; runs that did not are V1, which the penalty script forced before)."""
    runners = sorted({w.get("model_runner") or "V1" for w in (run.get("workers") or {}).values()})
    return "/".join(runners) or "V1"


def pool_key(run: dict, stage: dict, earlier: bool) -> tuple:
    """Stages pool when they ran the same configs at the same shape on the same GPU model,
    model shape and runners (and, for runs of an earlier patch form, the same series)."""
    names = sorted({c.split("/", 1)[1] for c in stage["cells"]})
    configs = json.dumps({n: run["configs"][n] for n in names}, sort_keys=True)
    gpu_name = (run.get("machine") or {}).get("gpu")
    series = run.get("series_hash") if earlier else ""
    shape = (run.get("model") or DEFAULT_MODEL, runner_of(run))
    return (
        series,
        gpu_name,
        *shape,
        stage["batch"],
        stage["output_len"],
        stage["input_len"],
        configs,
    )


def same_code(run: dict, newest: dict, version: str) -> bool:
    """Whether `run` measured the code of `newest` (taken to be the current code): the same
    series, or each patch's recorded diff the current one or a committed form of it that
    differed only in tests/ (`registry.tests_only_change`)."""
    if run.get("series_hash") == newest.get("series_hash"):
        return True
    recorded = run.get("patch_hashes") or {}
    patches = {p.subject: p for p in read_series(version)}
    return (
        bool(recorded)
        and recorded.keys() == patches.keys()
        and all(
            h == registry.diff_hash(patches[s]) or registry.tests_only_change(patches[s], h)
            for s, h in recorded.items()
        )
    )


def pool_runs(runs: list[dict], version: str) -> tuple[list[Pool], list[dict], list[str]]:
    """(pools, the runs of the newest run's code as listed in the record, each with why it
    stopped where it did, shapes no run measured)."""
    pools: dict[tuple, Pool] = {}
    entries, unmeasured = [], {}
    for run in runs:
        earlier = not same_code(run, runs[-1], version)
        if earlier and not any(c.startswith("pristine/") for c in run["cells"]):
            continue
        done = ab_rounds.from_records(run["rounds"])
        for stage in run["stages"]:
            wanted = set(stage["rounds"])
            rounds = [r for r in done if r.index in wanted]
            if any(not r.warmup for r in rounds):
                key = pool_key(run, stage, earlier)
                pools.setdefault(key, Pool(run, {**stage, "cells": []}, earlier))
                pools[key].add(run, stage, rounds)
            elif not earlier:
                shape = shape_of(stage)
                unmeasured.setdefault(shape, f"{shape} ({stage['status']})")
        if not earlier:
            shapes = {shape_of(s): s["status"] for s in run["stages"]}
            entry = {"date": run["date"], "command": run.get("command"), "shapes": shapes}
            if run.get("stopped"):
                entry["stopped"] = stop_cause(run["stopped"])
            entries.append(entry)
    measured = {p.shape for p in pools.values() if not p.pristine_only}
    not_run = [text for shape, text in unmeasured.items() if shape not in measured]
    return list(pools.values()), entries, not_run


def stop_cause(stopped: str) -> str:
    """Why a run stopped, in a line: the front-end's first line and, where a log tail follows,
    its last exception line (the record keeps the whole tail)."""
    head, _, tail = stopped.partition("\n")
    errors = re.findall(r"^[\w.]*(?:Error|Exception|Exit)\b.*$", tail, re.M)
    head = head.split("; log tail", 1)[0]
    return f"{head}: {errors[-1][:300]}" if errors else head[:300]


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


def gpu_model(gpu_name: str) -> str:
    """`H100` of `NVIDIA H100 80GB HBM3`: the model a GPU name gives (else the name)."""
    model = re.search(r"\b[A-Z]\d{2,4}\b", gpu_name)
    return model.group(0) if model else gpu_name


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
