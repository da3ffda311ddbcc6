"""Whether a patch's PR body is ready to propose upstream, and `python -m verify propose`.

    python -m verify propose 0.22.0 0011 | gh pr create --body-file -

prints the body on stdout and a readiness checklist on stderr; exit 0 only when every check
holds (`CHECKS`), 1 naming each that does not, 2 on bad input (an unknown pin or patch). A
check holds on the patch's current form only: a stale record counts as missing.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from verify import registry, verdicts
from verify.errors import PatchbenchError
from verify.versions import require_pinned

if TYPE_CHECKING:
    from verify.report import PatchEvidence
    from verify.runners import RunnerChoice

#: Check name -> what it requires.
CHECKS = {
    "equivalence": "equivalence tests pass on the current form",
    "upstream tests": "upstream tests pass on the current form",
    "headline": "the headline is current and resolved (or the claim is correctness only)",
    "identity": "gsm8k or token identity holds with its control (base against itself)",
    "related work": "related upstream work is listed",
    "runner": "the runner(s) and what reaches the changed code are stated, and every GPU "
    "engine record names the runner that ran",
}
_NO_CONTROL = re.compile(r"\bno [\w.]+-vs-[\w.]+ control\b")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def _rows_pass(ev: PatchEvidence, kind: str) -> tuple[bool, str]:
    """Whether the patch's `kind` steps that run pass on its current form (at least one)."""
    rows = [r for r in ev.rows if r[0].kind == kind and r[1] != verdicts.NOT_APPLICABLE]
    if not rows:
        return False, f"no {kind} step on v{ev.version}"
    bad = [
        f"{st.title.split(':')[0]}: {state}" for st, state, _, _ in rows if state != verdicts.PASS
    ]
    return not bad, "; ".join(bad) or f"{len(rows)} step(s) pass"


def _headline(ev: PatchEvidence) -> tuple[bool, str]:
    perf = [
        r for r in ev.rows if r[0].rule in registry.PERF_RULES and r[1] != verdicts.NOT_APPLICABLE
    ]
    if not perf:
        return True, "correctness only (no performance claim)"
    named = [r for r in perf if r[0].headline] or [r for r in perf if r[3]] or perf
    step, state, _, _ = named[0]
    if state == verdicts.PASS:
        return True, f"{step.title.split(':')[0]}: pass"
    why = "not resolved" if state.startswith(verdicts.UNRESOLVED) else "not a current pass"
    return False, f"{step.title.split(':')[0]}: {state} ({why})"


def _identity(ev: PatchEvidence) -> tuple[bool, str]:
    rows = [r for r in ev.rows if (r[0].rule == "identity" or r[0].kind == "gsm8k") and r[3]]
    held = [
        st.title.split(":")[0]
        for st, state, _, records in rows
        if state == verdicts.PASS
        and not any(_NO_CONTROL.search(r.get("reason") or "") for r in records)
    ]
    if held:
        return True, f"{held[0]}: pass with its control"
    shown = "; ".join(f"{st.title.split(':')[0]}: {state}" for st, state, _, _ in rows)
    return False, shown or "no gsm8k or token-identity record on this pin"


def _runner(ev: PatchEvidence, choice: RunnerChoice) -> tuple[bool, str]:
    from verify import body

    engine = body.gpu_engine_records(ev)
    unnamed = [r["step"] for r in engine if not body.recorded_runner(r)]
    stated = bool(ev.entry.runners and ev.entry.reaches)
    detail = " and ".join(ev.entry.runners) + f" (MRV2 default on v{ev.version}: "
    detail += choice.mrv2_default() + ")"
    if unnamed:
        detail += f"; {len(unnamed)} of {len(engine)} GPU engine records do not name their "
        detail += f"runner ({', '.join(dict.fromkeys(unnamed))})"
    return stated and not unnamed, detail


def checks(ev: PatchEvidence, choice: RunnerChoice) -> list[Check]:
    """The readiness checks of one patch (`choice`: the pin's runner choice)."""
    entry = ev.entry
    found = {
        "equivalence": _rows_pass(ev, "equivalence"),
        "upstream tests": _rows_pass(ev, "upstream-tests"),
        "headline": _headline(ev),
        "identity": _identity(ev),
        "related work": (bool(entry.related), f"{len(entry.related)} item(s)"),
        "runner": _runner(ev, choice),
    }
    return [Check(name, ok, detail) for name, (ok, detail) in found.items()]


def summary(found: list[Check]) -> str:
    """`ready`, or `not ready: <the checks that do not hold>`."""
    missing = [c.name for c in found if not c.ok]
    return "ready" if not missing else "not ready: " + ", ".join(missing)


def find_patch(evidence: list[PatchEvidence], version: str, wanted: str) -> PatchEvidence:
    """The patch `wanted` names: its series number (``11``, ``0011``) or registry id."""
    for ev in evidence:
        number = ev.patch.name[:4]
        if wanted in (ev.entry.slug, number) or (wanted.isdigit() and int(wanted) == int(number)):
            return ev
    known = ", ".join(f"{ev.patch.name[:4]} ({ev.entry.slug})" for ev in evidence)
    raise PatchbenchError(
        f"vLLM {version} has no patch {wanted!r}; give its number or registry id: {known}"
    )


def propose(version: str, wanted: str, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print the body of patch `wanted` of `version` to `out` and its checklist to `err`."""
    from verify import body, report, runners

    require_pinned(version)
    ev = find_patch(report.evidence_for(version), version, wanted)
    choice = runners.read(version)
    appendix = ev.patch.name.removesuffix(".patch") + "-appendix.md"
    out.write(report.render_patch(ev, appendix, body.read_template(version), choice))
    found = checks(ev, choice)
    print(f"readiness of {version}/{ev.patch.name[:4]} ({ev.entry.slug}):", file=err)
    for check in found:
        mark = "x" if check.ok else " "
        print(f"  [{mark}] {CHECKS[check.name]}: {check.detail}", file=err)
    print(summary(found), file=err)
    return 0 if all(c.ok for c in found) else 1
