"""The PR body of one patch: the pin's own `.github/PULL_REQUEST_TEMPLATE.md` filled in.

The template is read from the pin's build tree (`build/<v>/`) or, without one, from the cached
sdist; none is hard-coded. Each `## ` section of the template gets a role by its name
(`ROLES`); the block after the sections (upstream's checklist) is kept as shipped. The body
leads with a one-line statement and the headline figure, keeps tables before prose, fits
`MAX_LINES`, and speaks plain words (`PLAIN`): v<pin> for the release, "this PR" for the
change, "base" for the release with this PR's preceding patches.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verify import paths, sdist, verdicts
from verify.errors import PatchbenchError

if TYPE_CHECKING:
    from verify.report import PatchEvidence

TEMPLATE = ".github/PULL_REQUEST_TEMPLATE.md"
MAX_LINES = 60
HEAD_LINES = 10
#: Template section name (lower case) -> what this project writes there.
ROLES = {
    "purpose": "purpose",
    "overview": "overview",
    "claims": "claims",
    "test plan": "plan",
    "validation": "validation",
    "test result": "result",
    "details": "details",
}
#: Project words a reviewer does not know, and what a body says instead ({v}: the pin).
PLAIN = (
    (r"\bthe series through this patch vs through the one before\b", "this PR vs base"),
    (r"\bthe series\b", "base"),
    (r"\bseries\b", "base"),
    (r"\bpristine2\b", "v{v} (second copy)"),
    (r"\bpristine\b", "v{v}"),
    (r"\bpatched\b", "this PR"),
    (r"\bthrough the A/B core\b", ""),
    (r"\bA/B core\b", "A/B harness"),
    (r"\bplanted[- ]effect\b", "known-slowdown"),
    (r"\bplanted\b", "known slowdown"),
    (r"\bpooled\b", "combined"),
    (r"\bpools?\b", "combined runs"),
    (r"\bin turns\b", "alternating"),
    (r"\bturns\b", "alternations"),
    (r"\blent\b", ""),
    (r"\bsessions?\b", "run"),
)
#: Measure names whose ratio (this PR over v<pin>) above 1 is worse, and those below 1.
_HIGHER_WORSE = re.compile(r"(_ms|itl|ttft|tpot|latency|memory|bytes|failed|time)", re.I)
_LOWER_WORSE = re.compile(r"(throughput|tok_per_s|tok/s|token_rate|rate)", re.I)
_CONTROLS = re.compile(r"(\baa\b|planted|control|pristine2|pristine.*pristine)", re.I)


def plain(text: str, version: str) -> str:
    """`text` in a reviewer's words (`PLAIN`)."""
    for pattern, words in PLAIN:
        text = re.sub(pattern, words.format(v=version), text)
    return re.sub(r"  +", " ", text).replace(" ,", ",").replace("( ", "(")


@dataclass(frozen=True)
class Template:
    """A PR template: text before the sections, the section names, and the block after."""

    preamble: list[str]
    sections: list[str]
    trailer: list[str]


def parse_template(text: str) -> Template:
    """Split a template into preamble (HTML comments only), `## ` section names and the
    trailing block (from the first `---` after the sections, kept as shipped)."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
    if not heads:
        raise PatchbenchError(f"{TEMPLATE} has no '## ' section; the body cannot be filled")
    tail = next((i for i in range(heads[-1], len(lines)) if lines[i].strip() == "---"), None)
    preamble = [line for line in lines[: heads[0]] if line.startswith("<!--")]
    trailer = lines[tail:] if tail is not None else []
    return Template(preamble, [lines[i][3:].strip() for i in heads], trailer)


def read_template(version: str, build_root: Path | None = None) -> Template:
    """The pin's PR template, from `build/<v>/` or else the cached sdist; a named error where
    neither holds it."""
    tree = (build_root or paths.build_root()) / version / TEMPLATE
    if tree.is_file():
        return parse_template(tree.read_text())
    tarball = sdist.cached_path(version)
    if tarball.is_file():
        with tarfile.open(tarball) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("/" + TEMPLATE)), None)
            if member is not None:
                return parse_template(tar.extractfile(member).read().decode())
    raise PatchbenchError(
        f"vLLM {version}: no {TEMPLATE} in build/{version}/ or in the cached sdist "
        f"{tarball.name}; run `python -m verify apply {version}` (the body is filled from "
        "the pin's own template)"
    )


def _context(record: dict[str, Any]) -> list[str]:
    """Device, runner, model shape, batch and sampling a record names."""
    machine = record.get("machine") or {}
    command = record.get("command", "")
    found = [str(machine.get("gpu") or machine.get("cpu") or "")]
    if machine.get("gpu"):
        found[0] = found[0].removeprefix("NVIDIA ")
    else:
        found[0] = f"CPU ({found[0]})" if found[0] else "CPU"
    shape = re.search(r"PB_MODEL_SHAPE=(\S+)", command)
    found.append(f"{shape.group(1)} shape" if shape else "")
    runner = re.search(r"PB_RUNNER=(\S+)", command)
    env = machine.get("env") or {}
    v2 = env.get("VLLM_USE_V2_MODEL_RUNNER") if isinstance(env, dict) else None
    name = runner.group(1) if runner else {"0": "V1", "1": "MRV2"}.get(str(v2), "")
    found.append(f"{name} runner" if name else "")
    return [f for f in found if f]


def headline(ev: PatchEvidence) -> str:
    """The headline claim: the headline step's record's own `headline`, else its first reason
    clause with its context, or, for a stale or missing record, that the current form is not
    measured and the command."""
    rows = [row for row in ev.rows if row[0].headline] or [
        row for row in ev.rows if row[0].rule not in ("tests",) and row[3]
    ]
    if not rows:
        return "Correctness change: no performance claim (results below)."
    step, state, _, records = rows[0]
    if not records or "(stale)" in state:
        command = step.command.split("   (")[0].strip().replace("{pin}", ev.version)
        return (
            "Performance of this PR's current form is not yet measured "
            f"({plain(step.title, ev.version)}); to measure it: `{command}`."
        )
    if records[0].get("headline"):  # the record's own headline: figure, interval, context
        return plain(records[0]["headline"], ev.version)
    clause = next((p for p in records[0].get("reason", "").split("; ") if p), state)
    named = re.search(r"\b(H100|H200|A100|CPU)\b", clause)
    where = "" if named else ", ".join(_context(records[0]))
    versus = "" if re.search(r"/| vs ", clause) else f" vs v{ev.version}"  # a ratio names its own
    return plain(f"{clause}{versus}" + (f" ({where})" if where else ""), ev.version) + (
        f" - {state}" if state != verdicts.PASS else ""
    )


def _ratios(numbers: Any, name: str = "") -> list[tuple[str, dict]]:
    """Every (name, ratio dict) under `numbers` with a ratio and an interval."""
    if not isinstance(numbers, dict):
        return []
    if "ratio" in numbers and ("ci95" in numbers or "low" in numbers):
        return [(name, numbers)]
    return [pair for k, v in numbers.items() for pair in _ratios(v, f"{name}/{k}" if name else k)]


def adverse(ev: PatchEvidence) -> list[str]:
    """Resolved adverse effects in any of the patch's records: this PR slower, larger or
    failing more than v<pin>, with the interval excluding 1."""
    found = []
    for _step, _state, _, records in ev.rows:
        for record in records:
            for name, r in _ratios(record.get("numbers", {})):
                low, high = r.get("ci95") or (r.get("low"), r.get("high"))
                if _CONTROLS.search(name) or low is None or high is None or r["ratio"] is None:
                    continue
                leaf = name.split("/")[-1].removesuffix("_patched_over_pristine")
                worse = (_HIGHER_WORSE.search(leaf) and low > 1) or (
                    _LOWER_WORSE.search(leaf) and not _HIGHER_WORSE.search(leaf) and high < 1
                )
                if worse:
                    where = ", ".join(_context(record))
                    figure = f"{r['ratio']:.3f} [{low:.3f}, {high:.3f}], n={r.get('n', '-')}"
                    source = record["step"] + (f", {where}" if where else "")
                    found.append(f"{leaf} {figure} this PR / v{ev.version} ({source})")
    return list(dict.fromkeys(found))


def statement(ev: PatchEvidence) -> str:
    """The one-line statement of the change, with what it backports where it does."""
    line = ev.entry.title.rstrip(".") + "."
    backport = getattr(ev.entry, "backport", "")
    return f"{line} Backport of {backport}; not a new proposal." if backport else line


def _bullets(items: list[str], limit: int, what: str) -> list[str]:
    shown = [f"- {item}" for item in items[:limit]]
    if len(items) > limit:
        shown.append(f"- ({len(items) - limit} more {what} in the appendix)")
    return shown


def _claims(ev: PatchEvidence) -> list[str]:
    """Headline, resolved adverse effects and the runner, one bullet each."""
    lines = [f"- **Headline:** {headline(ev)}"]
    bad = adverse(ev)
    if bad:
        lines.append(f"- **Slower or larger than v{ev.version} (resolved):**")
        lines += ["  " + b for b in _bullets(bad, 3, "adverse results")]
    runner = getattr(ev.entry, "runner", "")
    if runner:
        lines.append(f"- **Runner:** {runner}")
    return lines


def _result_table(ev: PatchEvidence, limit: int) -> list[str]:
    out = ["| check | on | result | detail |", "|---|---|---|---|"]
    for step, state, detail, _ in ev.rows[:limit]:
        text = plain(detail, ev.version)
        text = text if len(text) <= 100 else text[:97] + "..."
        device = "GPU" if step.device == "cuda" else "CPU"
        title = plain(step.title, ev.version).split(":")[0]
        out.append(f"| {title} | {device} | {plain(state, ev.version)} | {text or '-'} |")
    if len(ev.rows) > limit:
        out.append(f"| ({len(ev.rows) - limit} more checks in the appendix) | | | |")
    return out


def _plan(ev: PatchEvidence, upstream: list[str], ours: list[str]) -> list[str]:
    upstream = [plain(c, ev.version) if c.startswith("#") else c for c in upstream]
    ours = [plain(c, ev.version) if c.startswith("#") else c for c in ours]
    lines = []
    if upstream:
        lines += [f"On v{ev.version} with this PR applied:", "", "```bash", *upstream, "```", ""]
    if ours:
        lines += [
            f"<details><summary>Checks against v{ev.version} (vllm-patchbench)</summary>",
            "",
            "```bash",
            *ours,
            "```",
            "</details>",
        ]
    return lines[:-1] if lines and not lines[-1] else lines


def _sections(ev: PatchEvidence, tmpl: Template, parts: dict[str, list[str]]) -> list[str]:
    lines = [*tmpl.preamble, ""] if tmpl.preamble else []
    for name in tmpl.sections:
        role = ROLES.get(name.lower())
        if role is None:
            raise PatchbenchError(
                f"vLLM {ev.version}: {TEMPLATE} has a section {name!r} this project does not "
                f"fill; add it to verify/body.py:ROLES"
            )
        lines += [f"## {name}", "", *parts[role], ""]
    return lines + tmpl.trailer


def render_body(
    ev: PatchEvidence, tmpl: Template, upstream: list[str], ours: list[str], appendix: str
) -> str:
    """The PR body of `ev` in the pin's template, at most `MAX_LINES` lines."""
    related = f"Related: {ev.entry.related_pr}" if ev.entry.related_pr != "none" else ""
    rows = len(ev.rows)
    tries = [(True, True, rows), *((True, False, n) for n in range(rows, 0, -1))]
    tries += [(False, False, n) for n in range(rows, 0, -1)]
    for notes, with_how, limit in tries:
        keep = [c for c in upstream + ours if notes or not c.startswith("#")]
        plan = _plan(ev, [c for c in upstream if c in keep], [c for c in ours if c in keep])
        why = [plain(ev.entry.why, ev.version)]
        why += ["", plain(ev.entry.how, ev.version)] if with_how else []
        text = _fill(ev, tmpl, why, related, plan, _result_table(ev, limit), appendix)
        if text.count("\n") <= MAX_LINES:
            return text
    return text


def _fill(
    ev: PatchEvidence,
    tmpl: Template,
    why: list[str],
    related: str,
    plan: list[str],
    table: list[str],
    appendix: str,
) -> str:
    """The template filled with these parts (the purpose's prose goes last: tables first)."""
    base = f"Base: v{ev.version} with this PR's preceding patches applied."
    more = f"Every recorded number: `{appendix}` (vllm-patchbench `reports/{ev.version}/`)."
    rel = ["", related] if related else []
    parts = {
        "purpose": [statement(ev), "", *_claims(ev), "", *why, *rel],
        "overview": [statement(ev), *rel[1:]],
        "claims": _claims(ev),
        "plan": plan,
        "validation": [*table, "", base, more, "", *plan],
        "result": [*table, "", base, more],
        "details": why,
    }
    return "\n".join(_sections(ev, tmpl, parts)).rstrip() + "\n"
