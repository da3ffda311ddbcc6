"""GPU tier, the engine-level resolution proof (scripts/gpu_engine_aa.sh: `python -m
verify.ab engine` with engines pristine, pristine2 and planted of the official bundle, one
config) -> the record `gpu-engine-resolution`: results/gpu/<version>/engine-aa*.json, one
file per device call.

The rule (verify.verdicts.resolution, target +-1% for output tok/s): pass when the A/A
interval (pristine2/pristine) holds 1 and lies within +-1%, and the planted variant is
resolved slower with the slowdown predicted from the seconds it slept (every delay on the
critical path) inside its interval; no difference resolved when both controls behave but the
A/A interval is wider than 1%; fail when the A/A excludes 1, or the planted slowdown is not
resolved, has the wrong sign or misses its predicted size. A run whose rounds carry no
seconds-slept count cannot show the size: inconclusive. Each run is its own proof (one
device call): the newest is judged, earlier ones are listed beside it.
"""

from __future__ import annotations

from verify import registry, stats
from verify.ab import rounds as ab_rounds
from verify.gpu import shapes
from verify.importer import gpu_engine_ab
from verify.importer.gpu import _record
from verify.verdicts import FAIL, INCONCLUSIVE, NOT_RUN, Verdict, resolution

STEP = "gpu-engine-resolution"
FILES = "engine-aa*.json"
METRIC = "tok_per_s"


def control_cells(run: dict) -> tuple[str, str, str] | None:
    """(pristine, pristine2, planted) cells of the first config all three measured."""
    for config in run["configs"]:
        cells = tuple(f"{v}/{config}" for v in ("pristine", "pristine2", "planted"))
        if set(cells) <= set(run["cells"]):
            return cells
    return None


def predicted_of(run: dict, base: str, planted: str) -> float | None:
    """The front-end's planted prediction for base:planted (None when the run has none)."""
    for cmp in run["comparisons"]:
        if (cmp.get("baseline"), cmp.get("variant")) == (base, planted):
            return cmp.get("predicted_if_all_on_critical_path")
    return None


def judge_run(run: dict) -> tuple[Verdict, dict, list[str]]:
    """(verdict, numbers, table rows) of one run."""
    cells = control_cells(run)
    if cells is None:
        return Verdict(NOT_RUN, "the run has no pristine, pristine2 and planted cells"), {}, []
    base, twin, planted = cells
    config = base.split("/", 1)[1]
    done = [r for r in ab_rounds.from_records(run["rounds"]) if set(cells) <= set(r.values)]
    if not any(not r.warmup for r in done):
        why = run.get("stopped") or "; ".join(s["status"] for s in run["stages"])
        return Verdict(NOT_RUN, f"no counted round: {why[:300]}"), {}, []
    aa = ab_rounds.paired(done, base, twin, METRIC)
    slow = ab_rounds.paired(done, base, planted, METRIC)
    predicted = predicted_of(run, base, planted)
    proof = registry.harness_proofs()[STEP]  # the A/A half-width the proof must reach
    target = proof["production_target" if run.get("model") in shapes.SHAPES else "target"]
    verdict = judged = resolution.judge(aa, slow, predicted, target)
    if predicted is None and verdict.outcome != FAIL:
        verdict = Verdict(
            INCONCLUSIVE,
            f"the planted size cannot be checked (no seconds-slept count in the rounds); "
            f"{verdict.reason}",
        )
    counted = [r for r in done if not r.warmup]
    slept = sum(r.values[planted].get("planted_slept_s", 0.0) for r in counted)
    steps = sum(r.values[planted].get("planted_steps", 0) for r in counted)
    numbers = {
        **judged.numbers,
        "metric": f"{METRIC}: output tokens / wall s of one LLM.generate per cell and round",
        "config": run["configs"][config],
        "planted_delay_ms": run.get("planted_delay_ms"),
        "planted_slept_ms_per_step": 1000 * slept / steps if steps else None,
        "startup_s": run.get("startup_s"),
        "engine_restarts": _restarts(run, counted),
        "workers": {
            name: {k: w.get(k) for k in ("model_runner", "async_scheduling", "kv_cache_tokens")}
            for name, w in run.get("workers", {}).items()
        },
        "tokens_identical_across_engines": run.get("tokens", {}).get(config, {}).get("identical"),
        "stopped": run.get("stopped"),
        "wall_s": run.get("wall_s"),
    }
    width = "-" if aa.low is None else f"+-{resolution.half_width(aa):.2%}"
    rows = [
        f"| comparison | tok/s ratio [95% CI] | A/A half-width (target +-{target * 100:g}%) | "
        "predicted | MDE |",
        "|---|---|---|---|---|",
        _row("pristine2 / pristine (A/A)", aa, width, None),
        _row("planted / pristine", slow, "-", predicted),
    ]
    return verdict, numbers, rows


def _restarts(run: dict, counted: list) -> dict | None:
    """Blocks of rounds between engine restarts (--restart-every), or None: the intervals are
    then over the blocks (an engine instance's own offset inside them)."""
    if not run.get("restart_every"):
        return None
    blocks = {r.block for r in counted}
    return {"every": run["restart_every"], "blocks": len(blocks), "rounds": len(counted)}


def _row(label: str, r: stats.Ratio, width: str, predicted: float | None) -> str:
    """One table row (the interval's text names n)."""
    cells = [label, r.text(), width, "-" if predicted is None else f"{predicted:.4f}"]
    return "| " + " | ".join([*cells, "-" if r.mde is None else f"{r.mde:.2%}"]) + " |"


def engine_resolution(version: str) -> dict | None:
    """The record of the newest resolution run of `version` (earlier runs listed)."""
    runs = gpu_engine_ab.load_runs(version, FILES)
    if not runs:
        return None
    *earlier, src = runs
    verdict, numbers, rows = judge_run(src)
    numbers["earlier_runs"] = [
        {"date": r["date"], "command": r.get("command"), **_summary(judge_run(r)[0])}
        for r in earlier
    ]
    runner = {w.get("model_runner") for w in src.get("workers", {}).values()}
    title = (
        f"{src.get('command', '')} ({src['date']}; runner {', '.join(map(str, runner))}; "
        f"{src['stages'][0]['status'] if src.get('stages') else 'no stage'})"
    )
    tables = [f"{title}\n\n" + "\n".join(rows)] if rows else []
    return _record(src, STEP, "series", verdict, numbers, tables=tables)


def _summary(verdict: Verdict) -> dict:
    return {"outcome": verdict.outcome, "reason": verdict.reason}


def records(version: str) -> list[dict]:
    made = [engine_resolution(version)]
    return [r for r in made if r]
