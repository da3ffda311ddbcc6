"""GPU tier, a penalized-sampling A/B on Model Runner V2 (scripts/gpu_penalties_ab.sh with
PB_RUNNER=MRV2 and variants pristine, pristine2, patched) -> the records its registry steps
name (reader "mrv2-penalties"), one per step rule:

- identity: per seeded sampling, patched's tokens against pristine's, with pristine's second
  engine as the control (verify.verdicts.identity); the worst sampling decides.
- performance: per sampling, patched/pristine tok/s must exclude a loss beyond the step's
  threshold (claim "not slower"); the A/A (pristine2/pristine) is shown beside it and a
  resolved A/A beyond the threshold makes the record inconclusive.

Both tables also give each build's penalty cost (penalized/plain tok/s of one engine). A run
measures one or more shapes (B x L); the throughput record judges, per shape, the newest run of
the newest run's patch form, so runs of different shapes add cells to one cost table. Identity
is judged on the newest run with the control (pristine2).
"""

from __future__ import annotations

from pathlib import Path

from verify import registry, results, stats
from verify.ab import rounds as ab_rounds
from verify.gpu import penalty_plan
from verify.importer import penalty_profile
from verify.importer.cost_rows import interval_text
from verify.importer.gpu import _record
from verify.verdicts import INCONCLUSIVE, Verdict, combine, identity, performance

METRIC = "tok_per_s"


def _cell(variant: str, config: str) -> str:
    return f"{variant}/{config}"


def _sampling(config: str) -> str:
    """`presence-k20p95` of `presence-k20p95-b128-l512`."""
    return config.rsplit("-b", 1)[0]


def identity_verdict(run: dict) -> tuple[Verdict, list[str]]:
    """The worst sampling's identity verdict, and a table row per sampling."""
    parts, rows = [], ["| sampling | pristine vs pristine2 (control) | patched vs pristine |"]
    rows.append("|---|---|---|")
    for config, seen in sorted(run.get("tokens", {}).items()):
        if not all(seen.get(v) for v in ("pristine", "pristine2", "patched")):
            continue
        control = set(seen["pristine2"]) == set(seen["pristine"]) and len(seen["pristine"]) == 1
        same = set(seen["patched"]) == set(seen["pristine"])
        verdict = identity.judge(same, control)
        parts.append(
            Verdict(verdict.outcome, f"{_sampling(config)}: {verdict.reason or 'identical'}")
        )
        rows.append(f"| {_sampling(config)} | {_same(control)} | {_same(same)} |")
    if not parts:
        return Verdict(INCONCLUSIVE, "no sampling kept tokens of all three engines"), rows
    return combine(parts), rows


def _same(flag: bool) -> str:
    return "identical" if flag else "differ"


def penalty_costs(run: dict, done: list):
    """(plain config, plain, pen, {variant: penalized/plain tok/s}) per shape and sampling
    pair of `penalty_plan.COST_PAIRS` that the run measured, for pristine and patched."""
    configs = run["configs"]
    for plain, pen in penalty_plan.COST_PAIRS:
        for a in [c for c in configs if _sampling(c) == plain]:
            b = a.replace(plain, pen, 1)
            if b not in configs:
                continue
            ratios = {
                v: ab_rounds.paired(done, _cell(v, a), _cell(v, b), METRIC)
                for v in ("pristine", "patched")
                if _cell(v, b) in run["cells"]
            }
            yield a, plain, pen, ratios


def cost_rows(run: dict, done: list) -> list[str]:
    """Each build's penalty cost (penalized/plain tok/s of one engine), per sampling pair."""
    rows = ["| build | plain -> penalized | penalized/plain tok/s [95% CI] |", "|---|---|---|"]
    for _, plain, pen, ratios in penalty_costs(run, done):
        rows += [f"| {v} | {plain} -> {pen} | {r.text()} |" for v, r in ratios.items()]
    return rows


def key_rows(run: dict, done: list) -> list[str]:
    """The body's cost table: per shape and sampling pair, 1 - penalized/plain tok/s of
    v<pin>'s engine and of patched's, side by side [95% CI]."""
    gpu = (run.get("machine") or {}).get("gpu", "GPU")
    rows = []
    for a, plain, pen, ratios in penalty_costs(run, done):
        cost = [_cost(ratios[v]) for v in ("pristine", "patched")]
        speed = [_speed(done, a), _speed(done, a.replace(plain, pen, 1))]
        config = run["configs"][a]
        rows.append(f"| {config['batch']} | {config['output_len']} | "
                    f"{penalty_plan.describe(plain, pen)}, {_seeding(run)} | "
                    f"{cost[0]} | {cost[1]} | {speed[0]} | {speed[1]} | "
                    f"{gpu}, {run.get('model')} shape, dummy weights |")  # fmt: skip
    return rows


def key_head(version: str) -> list[str]:
    """The heading of the body's cost table (key_rows' columns)."""
    return [f"| B | L | sampling | penalty cost v{version} (MRV2) | penalty cost this PR (MRV2) "
            f"| this PR / v{version} tok/s, unpenalized | this PR / v{version} tok/s, penalized "
            "| GPU, model |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip


def _speed(done: list, config: str) -> str:
    """patched/pristine tok/s of `config` with its interval, e.g. `1.012 [1.008, 1.015]`."""
    r = ab_rounds.paired(done, _cell("pristine", config), _cell("patched", config), METRIC)
    return interval_text(r)


def _cost(r: stats.Ratio) -> str:
    """`1.2% [0.8%, 1.6%], n=5`: 1 - the penalized/plain ratio."""
    if r.low is None or r.high is None:
        return f"{1 - r.ratio:.1%}, n={r.n}"
    return f"{1 - r.ratio:.1%} [{1 - r.high:.1%}, {1 - r.low:.1%}], n={r.n}"


def performance_verdict(run: dict, done: list, threshold: float) -> tuple[Verdict, list[str]]:
    """Patched against pristine per sampling (not slower beyond `threshold`), the A/A beside."""
    rows = ["| sampling | pristine2/pristine (A/A) | patched/pristine |", "|---|---|---|"]
    ratios, controls = {}, []
    for config in run["configs"]:
        base, name = _cell("pristine", config), _label(run, config)
        ratios[name] = ab_rounds.paired(done, base, _cell("patched", config), METRIC)
        aa_text = "not in the run"
        if _cell("pristine2", config) in run["cells"]:
            aa = ab_rounds.paired(done, base, _cell("pristine2", config), METRIC)
            aa_text = aa.text()
            if stats.classify(aa, threshold, lower_is_better=False) != stats.UNRESOLVED:
                controls.append(f"{name} A/A {aa.text()}")
        rows.append(f"| {name} | {aa_text} | {ratios[name].text()} |")
    verdict = performance.judge_shapes(ratios, threshold, claim="not slower", lower_is_better=False)
    verdict = Verdict(verdict.outcome, verdict.reason.replace("shape", "sampling"))
    if controls:
        verdict = Verdict(INCONCLUSIVE, f"A/A beyond the threshold ({'; '.join(controls)}); "
                          f"{verdict.reason}")  # fmt: skip
    return verdict, rows


def _label(run: dict, config: str) -> str:
    """`presence-k20p95 B=64 L=2048` of a config (the shape named: runs differ in it)."""
    shape = run["configs"][config]
    return f"{_sampling(config)} B={shape.get('batch')} L={shape.get('output_len')}"


def _shape(run: dict) -> tuple:
    return tuple(sorted({(c.get("batch"), c.get("output_len")) for c in run["configs"].values()}))


def _seeding(run: dict) -> str:
    """`seeded` where the run's requests carry seeds (per-request generators), else `unseeded`."""
    seeded = any(config.get("seed", 0) is not None for config in run["configs"].values())
    return "seeded" if seeded else "unseeded"


def _samplings(run: dict) -> tuple[str, ...]:
    """The run's samplings (`pen`, `plain`, ...), sorted."""
    return tuple(sorted({_sampling(config) for config in run["configs"]}))


def grid(runs: list[dict]) -> list[dict]:
    """Per shape set, seeding and sampling set, the newest run of the newest run's patch form
    (oldest first): a run of other samplings at one shape adds cells, it does not replace."""
    form = runs[-1].get("patch_hashes")
    newest = {
        (_shape(r), _seeding(r), _samplings(r)): r for r in runs if r.get("patch_hashes") == form
    }
    return sorted(newest.values(), key=lambda r: r.get("date", ""))


def _has_control(run: dict) -> bool:
    return any(seen.get("pristine2") for seen in run.get("tokens", {}).values())


def _numbers(run: dict, done: list) -> dict:
    entropy = {w.get("output_entropy", {}).get("measured_nats") for w in run["workers"].values()}
    return {
        "runner": run.get("runner"),
        "model": run.get("model"),
        "measured_entropy_nats": sorted(e for e in entropy if e is not None),
        "engine_args": run.get("engine_args"),
        "rounds": sum(not r.warmup for r in done),
    }


def _title(run: dict, numbers: dict) -> str:
    return (f"{run.get('command')} ({run.get('date')}): {run.get('model')} on vLLM's dummy "
            f"weights, runner {run.get('runner')}, mean next-token entropy "
            f"{numbers['measured_entropy_nats']} nats")  # fmt: skip


def read(version: str, step: registry.Step, entry: registry.Entry, runs: list[Path]) -> dict:
    """The importer loop's reader: identity on the newest run with its control; throughput
    over `grid` (one verdict per run, the worst decides; one cost table over all)."""
    loaded = sorted((results.read_json(p) for p in runs), key=lambda r: r.get("date", ""))
    if step.rule == "identity":
        run = ([r for r in loaded if _has_control(r)] or loaded)[-1]
        done = ab_rounds.from_records(run["rounds"])
        verdict, rows = identity_verdict(run)
        numbers = _numbers(run, done)
        tables = [f"{_title(run, numbers)}\n\n" + "\n".join(rows), "\n".join(cost_rows(run, done))]
        return _record(run, step.records[0], entry.slug, verdict, numbers, tables=tables)
    threshold = registry.threshold(version, step.records[0])
    parts, tables, keys, shown = [], [], key_head(version), []
    for run in grid(loaded):
        done = ab_rounds.from_records(run["rounds"])
        verdict, rows = performance_verdict(run, done, threshold)
        numbers = _numbers(run, done)
        shape = ", ".join(f"B={b} L={n}" for b, n in _shape(run))
        shape += f" {_seeding(run)} ({', '.join(_samplings(run))})"
        parts.append(Verdict(verdict.outcome, f"{shape}: {verdict.reason}"))
        shown.append({"date": run.get("date"), "command": run.get("command"), **numbers})
        tables += [f"{_title(run, numbers)}\n\n" + "\n".join(rows), "\n".join(cost_rows(run, done))]
        keys += key_rows(run, done)
    numbers = {**shown[-1], "runs": shown}
    record = _record(loaded[-1], step.records[0], entry.slug, combine(parts), numbers,
                     tables=tables, key_table="\n".join(keys))  # fmt: skip
    return penalty_profile.attach(record, version, "MRV2")
