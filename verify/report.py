"""PR-ready reports: `reports/<version>/<patch>.md` in vLLM's PR template order (Purpose /
Test Plan / Test Result), a long-table appendix beside each, and a per-patch matrix README.

What proves a patch comes from its registry entry (patches/registry/<id>.toml): each step's
records, device, rule and command. Every number comes from a record; the Purpose's measured
effect is the verdict of the patch's first performance step. A step the registry marks
`not_applicable` says so and why; a step without a record says `not run`; a record made for
another version of the patch or harness is shown with its staleness reason, never as a pass.
Machine-local paths never reach a report.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from verify import body, paths, readiness, registry, runners, verdicts, versions
from verify import results as results_mod
from verify.series import Patch, read_series, series_hash

Record = dict[str, Any]
#: Matrix columns (registry step kinds) in report order.
KINDS = registry.KINDS
PERF_RULES = registry.PERF_RULES
MAX_ROWS = 4
MAX_LINES = 80
_LOCAL = re.compile(
    r"(?<![\w.])(?:/root|/tmp|/home|/work|/Users|~)/[^\s`'\",)\]]*|\.gpu/\S+"
    r"|(?<![/.])(?:\.\./)+(?:root|tmp|home|work|Users)/[^\s`'\",)\]]*"  # pytest's relative form
)


def scrub(text: str) -> str:
    """Replace machine-local paths with a placeholder."""
    return _LOCAL.sub("<local path>", text)


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(
        text, 100, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _ratio_rows(numbers: dict[str, Any], prefix: str = "") -> list[tuple[str, dict]]:
    """(name, ratio dict) of every verify.stats ratio ({ratio, low, high, n, mde}) found in
    `numbers`, nested dicts included (named `parent / key`); older ratio formats are left to
    the appendix."""
    return [(group + name, r) for group, name, r in _grouped_ratio_rows(numbers, prefix)]


def _grouped_ratio_rows(numbers: dict[str, Any], group: str = "") -> list[tuple[str, str, dict]]:
    """(group, name, ratio dict) of `_ratio_rows`: the group is the path of the nested dict
    that holds the ratio (`a / b / `), "" at the top."""
    found = []
    for key, value in numbers.items():
        if isinstance(value, dict) and {"ratio", "low", "high", "n"} <= set(value):
            found.append((group, key, value))
        elif isinstance(value, dict):
            found += _grouped_ratio_rows(value, f"{group}{key} / ")
    return found


def _ratio_text(r: dict) -> str:
    low = r.get("low", r.get("ci95_low"))
    high = r.get("high", r.get("ci95_high"))
    if r.get("ratio") is None:
        return "-"
    ci = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"{r['ratio']:.3f}{ci}"


def ratio_table(numbers: dict[str, Any], limit: int = MAX_ROWS, prefix: str = "") -> list[str]:
    """The ratios of `numbers` as a table; ratios of one nested dict come under one bold row
    naming it, so a long parent name (e.g. a pool of runs) is written once."""
    rows = _grouped_ratio_rows(numbers)
    if not rows:
        return []
    out = ["| measure | patched / pristine (95% CI) | rounds | MDE |", "|---|---|---|---|"]
    current = None
    for group, name, r in rows[:limit]:
        if group and group != current:
            out.append(f"| **{prefix}{group.removesuffix(' / ')}** | | | |")
        current = group
        mde = r.get("mde")
        out.append(
            f"| {name if group else prefix + name} | {_ratio_text(r)} | {r.get('n', '-')} "
            f"| {f'{mde:.1%}' if isinstance(mde, float) else '-'} |"
        )
    if len(rows) > limit:
        out.append(f"| ({len(rows) - limit} more in the appendix) | | | |")
    return out


def _scalar_table(numbers: dict[str, Any]) -> list[str]:
    """Counts and flags a reviewer reads at a glance (dicts and lists go to the appendix)."""
    keep = {
        k: v
        for k, v in numbers.items()
        if isinstance(v, int | float | bool) and not isinstance(v, dict)
    }
    if not keep:
        return []
    return [", ".join(f"{k} {_fmt(v)}" for k, v in list(keep.items())[:8])]


COUNTS = ("passed", "failed", "skipped", "patched_passed", "patched_failures", "pristine_passed")


def counts(records: list[Record], harness: tuple[str, ...] = ()) -> str:
    """Test counts of test-run records ("569 passed, 2 skipped"; only the step's own test files
    where the record counts per file), else their pass reasons."""
    parts = []
    for r in records:
        n = r.get("numbers", {})
        files = n.get("files") if isinstance(n.get("files"), dict) else {}
        own = [files[f] for f in harness if f in files]
        if own:
            n = {k: sum(c[k] for c in own) for k in ("passed", "failed", "skipped")}
        found = [f"{n[k]} {k.replace('_', ' ')}" for k in COUNTS if isinstance(n.get(k), int)]
        found = found or ["; ".join(_explained(n) + _run_counts(n.get("runs")))]
        found = [f for f in found if f] or _identity_counts(n)
        if found and harness and not own and r["step"].startswith("equivalence-"):
            found.append("counted over every test file of the record, not per patch")
        parts.append(", ".join(found) if found else r.get("reason", ""))
    return "; ".join(dict.fromkeys(filter(None, parts)))


def _explained(n: dict[str, Any]) -> list[str]:
    """`2 fail only once 0003 applies, each explained by that patch` of an upstream-tests
    record (said first: the counts after it differ by these)."""
    only = n.get("patched_only_failures")
    if not isinstance(only, list) or not only or n.get("unexplained"):
        return []
    numbers = sorted({str(f.get("patch", ""))[:4] for f in only if isinstance(f, dict)})
    return [f"{len(only)} fail only once {' or '.join(numbers)} applies, each explained "
            "by that patch"]  # fmt: skip


def _identity_counts(n: dict[str, Any]) -> list[str]:
    """`12 of 12 requests identical (pristine with itself: 12 of 12)` of an identity record."""
    total, same = n.get("requests"), n.get("identical_requests")
    if not (isinstance(total, int) and isinstance(same, int)):
        return []
    control = n.get("control_identical_requests")
    tail = f" (pristine with itself: {control} of {total})" if isinstance(control, int) else ""
    return [f"{same} of {total} requests identical{tail}"]


def _run_counts(runs: Any) -> list[str]:
    """Counts of records that keep several pytest runs ({run: {passed, failed, ...}}), e.g.
    the upstream tests as shipped and as edited: one `run: N passed, M failed` per run."""
    if not isinstance(runs, dict):
        return []
    out = []
    for name, run in runs.items():
        if isinstance(run, dict) and isinstance(run.get("passed"), int):
            shown = [f"{run[k]} {k}" for k in ("passed", "failed", "skipped") if run.get(k)]
            out.append(f"{name}: {', '.join(shown) or '0 passed'}")
    return ["; ".join(out)] if out else []


def _structured(numbers: dict[str, Any], width: int = 400) -> list[str]:
    """Every dict/list value of a record that is not a verify.stats ratio, as compact JSON."""
    ratios = {name.split(" / ")[0] for name, _ in _ratio_rows(numbers)}
    out = []
    for key, value in numbers.items():
        if isinstance(value, dict | list) and key not in ratios and key != "plot":
            text = json.dumps(value, default=str)
            out.append(f"- {key}: `{text[:width]}{' ...' if len(text) > width else ''}`")
    return out


def why_not_run(step: registry.Step, version: str) -> str:
    """A step without a record: why it is not run (the pin's reason where the GPU machine cannot
    run it, else that no record exists), then the step's note."""
    why = versions.GPU_NOT_RUNNABLE.get(version) if step.device == "cuda" else None
    return "; ".join(filter(None, (why or "no record of this step on this pin", step.note)))


class PatchEvidence:
    """One patch's steps on one pin with their records and states."""

    def __init__(
        self,
        patch: Patch,
        entry: registry.Entry,
        version: str,
        found: list[Record],
        patches_root: Path | None,
        registry_root: Path | None,
    ) -> None:
        self.patch, self.entry, self.version = patch, entry, version
        self.rows: list[tuple[registry.Step, str, str, list[Record]]] = []
        for step in entry.steps_on(version):
            records = [r for r in found if r.get("step") in step.records]
            state, detail = self._state(step, records, patches_root, registry_root)
            self.rows.append((step, state, detail, records))

    def _state(self, step, records, patches_root, registry_root) -> tuple[str, str]:
        if step.not_applicable:
            return verdicts.NOT_APPLICABLE, step.not_applicable
        if not records:
            return verdicts.NOT_RUN, why_not_run(step, self.version)
        slug = self.entry.slug
        stale = [
            results_mod.staleness(r, slug, self.version, patches_root, registry_root)
            for r in records
        ]
        outcome = verdicts.combine(
            [
                verdicts.Verdict(
                    "not applicable" if r["outcome"] == "n/a" else r["outcome"],
                    r.get("reason") or "-",
                )
                for r in records
            ]
        )
        reasons = "; ".join(dict.fromkeys(filter(None, stale)))
        detail = (
            outcome.reason if outcome.outcome != verdicts.PASS else counts(records, step.harness)
        )
        detail = detail if detail != "-" else ""
        if reasons:
            return f"{outcome.outcome} (stale)", f"stale: {reasons}" + (
                f"; {detail}" if detail else ""
            )
        return outcome.outcome, detail

    def by_kind(self, kind: str) -> str:
        states = [s.split(" (")[0] for st, s, _, _ in self.rows if st.kind == kind]
        if not states:
            return "-"
        stale = any("(stale)" in s for st, s, _, _ in self.rows if st.kind == kind)
        worst = verdicts.combine([verdicts.Verdict(s, "x") for s in states]).outcome
        return worst + (" (stale)" if stale else "")

    def headline(self) -> str:
        """The measured effect: the registry's headline step where it has a record, else the
        first performance step with a record, else the first step with a record, as the rule
        stated it."""
        ranked = sorted(
            (row for row in self.rows if row[3]),
            key=lambda row: (
                not row[0].headline,
                row[0].rule not in PERF_RULES,
                not any(_ratio_rows(r.get("numbers", {})) for r in row[3]),
            ),
        )
        if not ranked:
            return "No step of this patch has a record on this pin yet."
        step, state, _, records = ranked[0]
        parts = [p for r in records for p in r.get("reason", "").split("; ") if p]
        parts = list(dict.fromkeys(p for p in parts if not p.startswith("the run could")))
        reason = "; ".join(parts[:3]) + (
            f"; ... ({len(parts) - 3} more below)" if len(parts) > 3 else ""
        )
        note = f" ({step.note})" if step.note else ""
        return f"{step.title}{note}: **{state}**" + (f" - {reason}" if reason else "")


def shell(command: str) -> list[str]:
    """A registry command as shell lines: each of its lines kept, a trailing "(note)" made a
    comment above it, and a line over 100 characters continued with a backslash."""
    out = []
    for line in command.split("\n"):
        note = re.search(r"\s{2,}\((.*)\)\s*$", line) or re.search(r"\s+\(([^()]*)\)\s*$", line)
        if note:
            out.append(f"# {note.group(1)}")
            line = line[: note.start()]
        current = ""
        for piece in re.split(r" (?=--)", line):
            if current and len(current) + len(piece) + 3 > 100:
                out.append(current + " \\")
                current = "  " + piece
            else:
                current = f"{current} {piece}" if current else piece
        out.append(current)
    return out


def _commands(rows, upstream: bool) -> list[str]:
    commands = dict.fromkeys(
        st.command
        for st, state, _, _ in rows
        if st.upstream == upstream
        and st.command != "-"
        and state != verdicts.NOT_APPLICABLE
        and not st.frozen  # its harness is retired: the command no longer runs
    )
    return [line for c in commands for line in shell(c)]


def render_patch(
    evidence: PatchEvidence,
    appendix_name: str,
    tmpl: body.Template,
    choice: runners.RunnerChoice,
) -> str:
    """The PR body of one patch in the pin's own template (verify.body)."""
    version = evidence.version
    number = evidence.patch.name[:4]
    fill = lambda c: c.replace("{pin}", version).replace("{number}", number)  # noqa: E731
    upstream = [fill(c) for c in _commands(evidence.rows, True)]
    ours = [fill(c) for c in _commands(evidence.rows, False)]
    return scrub(body.render_body(evidence, tmpl, upstream, ours, appendix_name, choice))


def render_appendix(evidence: PatchEvidence) -> str:
    entry = evidence.entry
    lines = [f"# Appendix: {evidence.patch.subject} (vLLM {evidence.version})", ""]
    lines += [_wrap(entry.why), "", _wrap(entry.how), "", _wrap(f"Next: {entry.future_plan}"), ""]
    for step, state, _, records in evidence.rows:
        for r in records:
            lines += [
                f"## {step.title}: record `{r['step']}` ({state})",
                "",
                f"Date {r.get('date', '-')[:10]} · series `{r.get('series_hash')}` · "
                f"command: `{r.get('command', '-')}`",
                "",
            ]
            if r.get("legacy"):
                lines += [f"Frozen record of a retired raw format: {r['legacy']}", ""]
            if r.get("reason"):
                lines += [r["reason"], ""]
            lines += [*ratio_table(r.get("numbers", {}), limit=1000), ""]
            lines += [*_scalar_table(r.get("numbers", {})), ""]
            lines += [*_structured(r.get("numbers", {})), ""]
            for table in [r.get("key_table"), *r.get("tables", [])]:
                lines += [table, ""] if table else []
    return scrub("\n".join(lines)) + "\n"


def evidence_for(
    version: str,
    patches_root: Path | None = None,
    results_root: Path | None = None,
    registry_root: Path | None = None,
) -> list[PatchEvidence]:
    entries = registry.load(registry_root or (patches_root / "registry" if patches_root else None))
    found = results_mod.load_all(version, results_root)
    out = []
    for patch in read_series(version, patches_root):
        entry = registry.entry_for(patch, version, entries)
        if entry is None:
            raise registry.PatchbenchError(
                f"{version}/{patch.name} has no registry entry: add patches/registry/<id>.toml "
                f"naming {patch.subject!r} under [pins]"
            )
        reg_root = registry_root or (patches_root / "registry" if patches_root else None)
        out.append(PatchEvidence(patch, entry, version, found, patches_root, reg_root))
    return out


def harness_proofs(version: str, results_root: Path | None = None) -> list[str]:
    """The pin's harness proofs (registry.harness_proofs: records that prove the harness, not
    a patch), one line each with its outcome and reason; nothing when the pin has none."""
    proofs = registry.harness_proofs()
    found = {
        r["step"]: r for r in results_mod.load_all(version, results_root) if r["step"] in proofs
    }
    if not found:
        return []
    lines = ["", "Harness proofs (they prove the measurement, not a patch):", ""]
    for step in sorted(found):
        record = found[step]
        reason = f": {record['reason']}" if record.get("reason") else ""
        lines.append(_wrap(f"- `{step}` ({proofs[step]['proves']}): "
                           f"{record['outcome']}{reason}", "  "))  # fmt: skip
    return lines


def build(
    version: str,
    out_root: Path | None = None,
    patches_root: Path | None = None,
    results_root: Path | None = None,
    build_root: Path | None = None,
) -> Path:
    """Write every patch's report, its appendix and the per-patch matrix; returns the index."""
    out = (out_root or paths.reports_root()) / version
    evidence = evidence_for(version, patches_root, results_root)  # raises before any write
    tmpl = body.read_template(version, build_root)
    choice = runners.read(version, build_root)
    pages: dict[str, str] = {}  # every page rendered before the old ones are removed
    index = [
        f"# vLLM {version}: patch reports (series `{series_hash(version, patches_root)}`)",
        "",
        f"Built by `nox -s report-{version}` from the records under `results/`; one row per "
        "patch, one column per kind of step (the worst outcome of that kind's steps).",
        "",
        "| patch | id | " + " | ".join(KINDS) + " | ready to propose |",
        "|---|---|" + "---|" * (len(KINDS) + 1),
    ]
    for ev in evidence:
        stem = ev.patch.name.removesuffix(".patch")
        appendix = f"{stem}-appendix.md"
        pages[f"{stem}.md"] = render_patch(ev, appendix, tmpl, choice)
        pages[appendix] = render_appendix(ev)
        cells = " | ".join(ev.by_kind(kind) for kind in KINDS)
        cells += " | " + readiness.summary(readiness.checks(ev, choice))
        index.append(
            f"| [{ev.patch.name[:4]}]({stem}.md) {ev.patch.subject} | {ev.entry.slug} | {cells} |"
        )
    if not evidence:
        index.append("| (no patches) | |" + " |" * (len(KINDS) + 1))
    index += [
        "",
        "Legend: pass / fail / no difference resolved (the run could not tell; never a pass) / "
        "inconclusive (the control disagreed, or data the rule needs is missing) / "
        "not applicable (the step does not run this patch's code on that device) / "
        "not run (no record) / `-` (no step of that kind for this patch); "
        "(stale): recorded for an older version of the patch or harness. Ready to propose: "
        "what `python -m verify propose <v> <patch>` checks (equivalence, upstream tests, "
        "headline, identity, related work, runner), or the checks that do not hold.",
    ]
    index[-1] = _wrap(index[-1])
    index += harness_proofs(version, results_root)
    pages["README.md"] = scrub("\n".join(index)) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.md"), *out.glob("*.png")]:
        if stale.name not in pages:
            stale.unlink()
    for name, text in pages.items():
        (out / name).write_text(text)
    return out / "README.md"
