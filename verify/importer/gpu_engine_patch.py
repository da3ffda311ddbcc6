"""GPU tier, a patch measured beside the engine-level controls (scripts/gpu_engine_aa.sh with
PB_PATCHES: `python -m verify.ab engine`, engines pristine, pristine2, planted and the patch's
overlay roots in the same rotating rounds) -> one record per registry step with reader
`engine-patch-ab`, judged only where the same rounds' A/A and planted controls behaved.

The controls are judged as the resolution proof judges them (verify.importer.
gpu_engine_resolution.judge_run); the patch's ratio (output tok/s of one LLM.generate per
cell and round, over engine restart blocks where the run restarted its engines) is judged
against the registry step's claim and threshold.
"""

from __future__ import annotations

from pathlib import Path

from verify import registry, results
from verify.ab import rounds as ab_rounds
from verify.importer import engine_runs, gpu_engine_resolution, gpu_serve_ab
from verify.importer.gpu import _patch_numbers, _record
from verify.verdicts import FAIL, INCONCLUSIVE, PASS, Verdict, performance

METRIC = gpu_engine_resolution.METRIC


def read(version: str, step: registry.Step, entry: registry.Entry, runs: list[Path]) -> dict | None:
    """The importer loop's reader `engine-patch-ab`: the newest of `runs` judged into the
    record the registry step names, for the step's patch; None when it did not measure it."""
    where, run = results.newest_run(runs)
    number = _patch_numbers(version, step.records[0]).get(entry.slug)
    pair = gpu_serve_ab.patch_comparison(run, number) if number else None
    if pair is None:
        return None
    return judged_record(version, step, entry.slug, run, pair)


def judged_record(
    version: str, step: registry.Step, slug: str, run: dict, pair: tuple[str, str]
) -> dict:
    """The record of engine run `run` for the patch compared as `pair` (baseline and variant
    cells): the patch's ratio judged by the step's claim and threshold, inconclusive where the
    same rounds' controls failed."""
    calibration, numbers, rows = gpu_engine_resolution.judge_run(run)
    done = [r for r in ab_rounds.from_records(run["rounds"]) if set(pair) <= set(r.values)]
    ratio = ab_rounds.paired(done, *pair, METRIC)
    name = f"{pair[1].split('/')[0]}/{pair[0].split('/')[0]}"
    threshold = registry.threshold(version, step.records[0])
    perf = performance.judge(
        ratio, threshold, claim=step.claim, lower_is_better=False, what="output tok/s", pair=name
    )
    if calibration.outcome == FAIL:
        verdict = Verdict(INCONCLUSIVE, f"the run's controls failed: {calibration.reason}")
    elif calibration.outcome != PASS:
        verdict = Verdict(perf.outcome, f"{perf.reason}; controls: {calibration.reason}")
    else:
        verdict = Verdict(perf.outcome, f"{perf.reason}; this run {calibration.reason}")
    config_name = pair[0].split("/", 1)[1]
    config = run["configs"][config_name]
    numbers = {
        **numbers,
        "baseline": pair[0],
        "variant": pair[1],
        "ratio": ratio.as_dict(),
        "controls": calibration.outcome,
        "model": engine_runs.model_of(run),
        "runner": engine_runs.runner_of(run),
        "sampling": {k: v for k, v in config.items() if k not in ("batch", "output_len")},
        "tokens": token_identity(run.get("tokens", {}).get(config_name, {}), pair),
    }
    mde = "-" if ratio.mde is None else f"{ratio.mde:.2%}"
    rows.append(f"| {name} | {ratio.text()} | - | - | {mde} |")
    title = (
        f"{numbers['model']} on vLLM's dummy weights, runner "
        f"{numbers['runner']}, B={config['batch']} x {config.get('input_len', 32)} "
        f"prompt tokens x {config['output_len']} output tokens, {_sampling(config)}, "
        f"{engine_runs.gpu_model((run.get('machine') or {}).get('gpu') or 'GPU')}"
    )
    said = {True: "identical", False: "differ", None: "not kept"}
    title += "; tokens: " + ", ".join(f"{k} {said[v]}" for k, v in numbers["tokens"].items())
    tables = [f"{title}\n\n" + "\n".join(rows)]
    return _record(run, step.records[0], slug, verdict, numbers, tables=tables)


def token_identity(hashes: dict, pair: tuple[str, str]) -> dict[str, bool | None]:
    """Whether the batch outputs (hashes of every round's token ids) of pristine2 equal
    pristine's (the control) and the patch's its baseline's; None where a variant kept none."""

    def same(a: str, b: str) -> bool | None:
        return set(hashes[a]) == set(hashes[b]) if a in hashes and b in hashes else None

    base, variant = (cell.split("/", 1)[0] for cell in pair)
    return {"control (pristine2 = pristine)": same("pristine", "pristine2"),
            f"{variant} = {base}": same(base, variant)}  # fmt: skip


def _sampling(config: dict) -> str:
    """`temperature 1.0, seeded`: the config's sampling in words."""
    keys = [k for k in config if k not in ("batch", "output_len", "input_len", "seed")]
    text = ", ".join(f"{k.replace('_', ' ')} {config[k]}" for k in keys) or "vLLM defaults"
    return text + ("" if config.get("seed", 0) is None else ", seeded per request")
