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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verify import sdist, verdicts
from verify.errors import PatchbenchError
from verify.gpu import shapes
from verify.runners import RunnerChoice

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
    (r"\bthe series touches\b", "the patches touch"),
    (r"\bedited by the series\b", "edited by the patches"),
    (r"\bthe series'", "the patches'"),
    (r"\bthe patched one\b", "this PR's"),
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
    text = sdist.pin_file(version, TEMPLATE, build_root)
    if text is not None:
        return parse_template(text)
    raise PatchbenchError(
        f"vLLM {version}: no {TEMPLATE} in build/{version}/ or in the cached sdist "
        f"{sdist.cached_path(version).name}; run `python -m verify apply {version}` (the body "
        "is filled from the pin's own template)"
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


def recorded_runner(record: dict[str, Any]) -> str:
    """The model runner a record names (its headline, PB_RUNNER or VLLM_USE_V2_MODEL_RUNNER):
    "V1", "MRV2", or "" where the record does not say."""
    named = re.search(r"\b(V1|MRV2) runner\b", record.get("headline") or "")
    if named:
        return named.group(1)
    found = next((c for c in _context(record) if c.endswith(" runner")), "")
    name = found.removesuffix(" runner").upper()
    return {"V1": "V1", "V2": "MRV2", "MRV2": "MRV2"}.get(name, "")


#: Step kinds whose records time a kernel or function alone (no engine, so no model runner),
#: and those that run a generate model end to end.
KERNEL_KINDS = ("kernel", "microbench")
ENGINE_KINDS = ("e2e", "serve-bench", "gsm8k", "attribution")
#: The architecture of the locally built random-weight models (verify/tinymodel.py).
LOCAL_MODEL_ARCHITECTURE = "Qwen3ForCausalLM"


def _runner_clause(step: Any, record: dict[str, Any], text: str) -> str:
    """What a GPU headline says of its runner: nothing where `text` names it, "kernel alone"
    for a kernel timing, else that the record does not name it (never a guess)."""
    if record.get("machine", {}).get("gpu") is None or re.search(r"\brunner\b", text):
        return ""
    if step.kind in KERNEL_KINDS:
        return "kernel alone, no model runner"
    return "runner not recorded"


def gpu_engine_records(ev: PatchEvidence) -> list[dict[str, Any]]:
    """The patch's records of generate-model engine runs on a GPU."""
    return [
        r
        for step, _, _, records in ev.rows
        if step.kind in ENGINE_KINDS
        for r in records
        if (r.get("machine") or {}).get("gpu")
    ]


def benchmark_architectures(ev: PatchEvidence) -> list[str]:
    """Architectures of the generate models the patch's GPU engine records ran (the production
    shape a command names, else the locally built model)."""
    found = []
    for record in gpu_engine_records(ev):
        shape = re.search(r"PB_MODEL_SHAPE=(\S+)", record.get("command", ""))
        name = shape.group(1).strip("'\"") if shape else ""
        arch = shapes.SHAPES.get(name, {}).get("architectures", [LOCAL_MODEL_ARCHITECTURE])
        found.append(arch[0])
    return list(dict.fromkeys(found))


def runner_line(ev: PatchEvidence, choice: RunnerChoice) -> str:
    """The runner(s) whose code this PR changes, what reaches it, and, for a V1-only change,
    where the pin defaults to MRV2 and which configurations still run V1 (the pin's source)."""
    runners, v = ev.entry.runners, ev.version
    which = " and ".join(runners) if len(runners) > 1 else f"{runners[0]} only"
    line = f"{which} ({ev.entry.reaches})."
    if runners == ("MRV2",):
        return f"{line} v{v} runs MRV2 by default for {choice.mrv2_default()}."
    if runners != ("V1",):
        return line
    if choice.opt_in:
        return f"{line} V1 is v{v}'s default runner for {choice.v1_configurations()}."
    line += f" v{v} defaults to Model Runner V2 for {choice.mrv2_default()}"
    mrv2 = [a for a in benchmark_architectures(ev) if choice.default_is_mrv2(a)]
    if mrv2:
        engine = gpu_engine_records(ev)
        forced = sum(recorded_runner(r) == "V1" for r in engine)
        told = f"{forced} of its {len(engine)} GPU engine records name the V1 runner" + (
            ", the others do not record it" if forced < len(engine) else ""
        )
        line += f", the benchmark model's architecture ({', '.join(mrv2)}): {told}"
    return f"{line}; V1 still runs for {choice.v1_configurations()}."


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
        command = command.replace("{number}", ev.patch.name[:4])
        how = f"`{command}`" if "\n" not in command else "the commands of this check below"
        return (
            "Performance of this PR's current form is not yet measured "
            f"({plain(step.title, ev.version)}); to measure it: {how}."
        )
    record = records[0]
    if record.get("headline"):  # the record's own headline: figure, interval, context
        text = plain(record["headline"], ev.version)
        clause = _runner_clause(step, record, text)
        return text + (f", {clause}" if clause else "")
    clause = next((p for p in record.get("reason", "").split("; ") if p), state)
    named = re.search(r"\b(H100|H200|A100|CPU)\b", clause)
    where = [] if named else _context(record)
    where += [c for c in [_runner_clause(step, record, " ".join(where))] if c]
    versus = "" if re.search(r"/| vs ", clause) else f" vs v{ev.version}"  # a ratio names its own
    tail = f" ({', '.join(where)})" if where else ""
    return plain(f"{clause}{versus}{tail}", ev.version) + (
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
    """The one-line statement of the change, with the upstream PR it is where it is one (a
    backport of a merged PR is not offered as a new proposal)."""
    line = ev.entry.title.rstrip(".") + "."
    up = ev.entry.upstream
    if up is not None and up.relation == "backport":
        merged = f" (merged in {ev.patch.merged_in})" if ev.patch.merged_in else " (merged)"
        return f"{line} Backport of {up.short}{merged}; not a new proposal."
    if up is not None:
        return f"{line} This is upstream {up.short} ({up.state}), as it applies to v{ev.version}."
    return line


def related_lines(ev: PatchEvidence) -> list[str]:
    """Related upstream work, one line each, with the date its state was checked."""
    items = [r for r in ev.entry.related if r.relation == "related"]
    if not items:
        return []
    dates = sorted({r.checked for r in items})
    when = f" (state as of {dates[0]})" if len(dates) == 1 else ""
    shown = [
        f"- {r.short} ({r.state}{'' if when else f' on {r.checked}'}): "
        + plain(r.differs, ev.version)
        for r in items
    ]
    return [f"**Related upstream work**{when}:", *shown]


def _bullets(items: list[str], limit: int, what: str) -> list[str]:
    shown = [f"- {item}" for item in items[:limit]]
    if len(items) > limit:
        shown.append(f"- ({len(items) - limit} more {what} in the appendix)")
    return shown


def _claims(ev: PatchEvidence, choice: RunnerChoice) -> list[str]:
    """Headline, resolved adverse effects and the runner, one bullet each."""
    lines = [f"- **Headline:** {headline(ev)}"]
    bad = adverse(ev)
    if bad:
        lines.append(f"- **Slower or larger than v{ev.version} (resolved):**")
        lines += ["  " + b for b in _bullets(bad, 3, "adverse results")]
    return [*lines, f"- **Runner:** {runner_line(ev, choice)}"]


def failing(ev: PatchEvidence) -> list[tuple]:
    """The rows of the patch's current records that fail (never left to the appendix)."""
    return [row for row in ev.rows if row[1] == "fail"]


def shown_rows(ev: PatchEvidence, limit: int) -> list[tuple]:
    """The rows the body's table shows: every failing row, then the others in order up to
    `limit` rows in all, steps that do not apply to this patch last."""
    bad = failing(ev)
    rest = [row for row in ev.rows if row not in bad]
    rest.sort(key=lambda row: row[1] == "not applicable")
    return bad + rest[: max(limit - len(bad), 0)]


def _result_table(ev: PatchEvidence, limit: int) -> list[str]:
    out = ["| check | on | result | detail |", "|---|---|---|---|"]
    rows = shown_rows(ev, limit)
    for step, state, detail, _ in rows:
        text = plain(detail, ev.version)
        text = text if len(text) <= 100 else text[:97] + "..."
        device = "GPU" if step.device == "cuda" else "CPU"
        title = plain(step.title, ev.version).split(":")[0]
        out.append(f"| {title} | {device} | {plain(state, ev.version)} | {text or '-'} |")
    costs = cost_table(ev)
    if len(ev.rows) > len(rows) and not costs:
        out.append(f"| ({len(ev.rows) - len(rows)} more checks in the appendix) | | | |")
    return out + costs


#: Columns of the V1 penalty-cost record's key table (verify/importer/gpu_engine_ab.py, 10
#: columns) the body keeps (index, heading); a narrower key table is shown as it is.
V1_COST_WIDTH = 10
COST_COLUMNS = ((0, "B"), (1, "L"), (2, "sampling"), (3, "penalty cost v{pin}"),
                (5, "this PR"), (6, "v{pin} on MRV2"), (9, "GPU, model: run(s)"))  # fmt: skip


def cost_table(ev: PatchEvidence) -> list[str]:
    """The penalty cost (1 - penalized/plain tok/s of one engine, 95% CI) per build at
    production shapes (the rows of a record's key table whose model is not the small random
    one), v<pin>'s and this PR's side by side; [] without such a record of the current form
    (a stale record's numbers stay in the appendix)."""
    for _step, state, _, records in ev.rows:
        if "stale" in state:
            continue
        for record in records:
            key = record.get("key_table") or ""
            rows = [r for r in key.splitlines() if r.startswith("| ") and r[2:3].isdigit()]
            rows = [r for r in rows if "random" not in r.rsplit("|", 2)[-2]]
            if not rows:
                continue
            width = len(rows[0].strip().strip("|").split("|"))
            keep = COST_COLUMNS if width == V1_COST_WIDTH else None  # else the table as it is
            head = next(r for r in key.splitlines() if r.startswith("| "))
            heads = ([h.format(pin=ev.version) for _, h in keep] if keep else
                     [c.strip() for c in head.strip().strip("|").split("|")])  # fmt: skip
            out = ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
            for row in rows:
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                shown = [cells[i] for i, _ in keep] if keep else cells
                out.append("| " + " | ".join(shown) + " |")
            profile = ((record.get("numbers") or {}).get("profile") or {}).get("summary")
            return out + (["", profile] if profile else [])
    return []


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
    ev: PatchEvidence,
    tmpl: Template,
    upstream: list[str],
    ours: list[str],
    appendix: str,
    choice: RunnerChoice,
) -> str:
    """The PR body of `ev` in the pin's template, at most `MAX_LINES` lines: what does not fit
    goes, in this order, the commands' notes and the `how` prose, then result rows, the
    commands' line continuations, the `why` prose, and last this project's own check commands
    (all of it stays in the appendix)."""
    related = related_lines(ev)
    rows = range(len(ev.rows), 0, -1)
    tries = [(True, True, True, True, len(ev.rows), True)]
    tries += [(notes, False, True, True, n, True) for notes in (True, False) for n in rows]
    tries += [(False, False, False, why, n, True) for why in (True, False) for n in rows]
    tries += [(False, False, False, False, n, False) for n in rows]
    for notes, with_how, wrapped, with_why, limit, with_ours in tries:
        keep = [c for c in upstream + ours if notes or not c.startswith("#")]
        mine = [c for c in upstream if c in keep], [c for c in ours if c in keep and with_ours]
        plan = _plan(ev, *(m if wrapped else _unwrap(m) for m in mine))
        why = [plain(ev.entry.why, ev.version)] if with_why else []
        why += ["", plain(ev.entry.how, ev.version)] if with_how else []
        text = _fill(ev, tmpl, why, related, plan, _result_table(ev, limit), appendix, choice)
        if text.count("\n") <= MAX_LINES:
            return text
    return text


def _unwrap(lines: list[str]) -> list[str]:
    """Shell lines with their backslash continuations joined into one line each."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith(" \\"):
            out[-1] = out[-1][:-2] + " " + line.strip()
        else:
            out.append(line)
    return out


def _fill(
    ev: PatchEvidence,
    tmpl: Template,
    why: list[str],
    related: list[str],
    plan: list[str],
    table: list[str],
    appendix: str,
    choice: RunnerChoice,
) -> str:
    """The template filled with these parts (the purpose's prose goes last: tables first)."""
    base = f"Base: v{ev.version} with this PR's preceding patches applied. Every recorded number"
    base += f" (and every check): `{appendix}` (vllm-patchbench `reports/{ev.version}/`)."
    rel = ["", *related] if related else []
    parts = {
        "purpose": [statement(ev), "", *_claims(ev, choice), *([""] + why if why else []), *rel],
        "overview": [statement(ev)],
        "claims": _claims(ev, choice),
        "plan": plan,
        "validation": [*table, "", base, "", *plan],
        "result": [*table, "", base],
        "details": [*why, *rel] if why else related,
    }
    return "\n".join(_sections(ev, tmpl, parts)).rstrip() + "\n"
