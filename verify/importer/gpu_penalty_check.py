"""0011's device penalty state checked on the GPU against an independent shadow
(scripts/gpu_penalties_ab.sh with PB_PENALTY_CHECK=1, verify/ab/penalty_check) -> the record
its registry step names (reader "penalty-state-check"): the newest engine run of the step's
source with raw/<stem>-findings.json (the shim's findings file of the patched engine).

fail: a step whose penalized logits differ (int32 views) from upstream's arithmetic on the
shadow's history, or a state check whose counts, prompt bits or lists differ from it; not run:
no findings file, or no step compared or no state check in it; pass otherwise. The tokens of the
run (patched against the series without the state, VLLM_V1_PENALTY_STATE=0, where both ran a
seeded config) are shown, not judged: no second engine of the series ran. The run's tok/s are no
penalty cost (the check copies the logits and recomputes the penalties at every step), so this
record gives none.
"""

from __future__ import annotations

import json
from pathlib import Path

from verify import results
from verify.importer.gpu import _record, gpu_root
from verify.verdicts import FAIL, NOT_RUN, PASS, Verdict


def judge_findings(findings: dict | None) -> Verdict:
    """The verdict of one shim findings file (None: the run wrote none)."""
    if findings is None:
        return Verdict(NOT_RUN, "no findings file beside the run (raw/<stem>-findings.json)")
    steps, rows = findings.get("steps", 0), findings.get("rows_compared", 0)
    checks = findings.get("state_checks", 0)
    logits, state = findings.get("logit_findings", []), findings.get("state_findings", [])
    if logits or state:
        first = (logits or state)[0]
        return Verdict(
            FAIL,
            f"{len(logits)} step-row(s) with penalized logits unlike upstream's on the shadow's "
            f"history, {len(state)} state check(s) unlike the shadow; first: {first}",
        )
    if not steps or not checks:
        return Verdict(NOT_RUN, f"nothing compared ({steps} steps, {checks} state checks)")
    return Verdict(
        PASS,
        f"penalized logits bit for bit upstream's on the shadow's history in {steps} steps "
        f"({rows} rows); counts, prompt bits and id lists equal the shadow's in {checks} "
        "state checks",
    )


def tokens_beside(run: dict) -> dict[str, str]:
    """{config: patched's tokens against the series'} of the run's seeded configs."""
    seen = {}
    for config, found in (run.get("tokens") or {}).items():
        patched, series = set(found.get("patched", [])), set(found.get("series", []))
        if patched and series:
            same = patched == series and len(patched) == 1
            seen[config] = (
                f"identical ({next(iter(patched))[:8]}), not judged: no second series engine"
                if same
                else f"differ (patched {sorted(patched)}, series {sorted(series)}), not judged"
            )
    return seen


def newest_with_findings(runs: list[Path]) -> tuple[Path, dict, Path, dict | None]:
    """(path, run, findings path, findings or None) of the newest of `runs` by its date; the
    findings are the shim's file beside it, raw/<stem>-findings.json."""
    path, run = results.newest_run(runs)
    findings_path = path.parent / "raw" / f"{path.stem}-findings.json"
    findings = json.loads(findings_path.read_text()) if findings_path.exists() else None
    return path, run, findings_path, findings


def read(version: str, step, entry, runs: list) -> dict:
    """The importer loop's reader: the record of the newest run of `runs` (by its date)."""
    path, run, findings_path, findings = newest_with_findings(runs)
    verdict = judge_findings(findings)
    numbers = {
        "run": path.name,
        "findings": findings_path.name if findings is not None else None,
        "model": run.get("model"),
        "runner": run.get("runner"),
        "configs": run.get("configs"),
        "output_entropy": {
            name: w.get("output_entropy") or "dummy weights' own logits (not calibrated)"
            for name, w in (run.get("workers") or {}).items()
        },
        "tokens patched vs series (no device state)": tokens_beside(run),
        "tok_per_s": "not a penalty cost: the check recomputes the penalties at every step",
    }
    if findings is not None:
        numbers.update({k: findings.get(k) for k in ("steps", "rows_compared", "state_checks")})
    return _record(run, step.records[0], entry.slug, verdict, numbers)


#: A harness proof (registry.harness_proofs): no patch's step, so its name is written here.
HISTORY_PROOF = "gpu-penalty-history"


def judge_history(findings: dict | None) -> Verdict:
    """The verdict of one penalty_history findings file (None: the run wrote none)."""
    if findings is None:
        return Verdict(NOT_RUN, "no findings file beside the run (raw/<stem>-findings.json)")
    rows, found = findings.get("rows_compared", 0), findings.get("findings", [])
    if found:
        return Verdict(
            FAIL, f"{len(found)} penalized row(s) whose host list differs from the sampled "
            f"ids; first: {found[0]}"
        )  # fmt: skip
    if not rows:
        return Verdict(NOT_RUN, "no penalized row was compared")
    return Verdict(
        PASS,
        f"every penalized row's host list equals its sampled ids after the async repair "
        f"({rows} rows over {findings.get('steps', 0)} sampler steps)",
    )


def history_records(version: str) -> list[dict]:
    """The harness proof of the newest history run of `version` (results/gpu/<v>/
    penalty-history*.json with raw/<stem>-findings.json); none without a run."""
    runs = sorted((gpu_root() / version).glob("penalty-history*.json"))
    if not runs:
        return []
    path, run, _, findings = newest_with_findings(runs)
    numbers = {"run": path.name, "model": run.get("model"), "runner": run.get("runner"),
               "configs": run.get("configs"), "tokens": run.get("tokens")}  # fmt: skip
    if findings is not None:
        numbers.update({k: findings.get(k) for k in ("steps", "rows_compared")})
    return [_record(run, HISTORY_PROOF, "series", judge_history(findings), numbers)]
