"""PR-ready reports: `reports/<version>/<patch>.md` in vLLM's PR template order (Purpose /
Test Plan / Test Result), built only from recorded result files, plus an index matrix.

A patch is linked to results by its seed id: the ``test_<seed>_...`` files its ``Verify:``
trailer names, and results whose ``seed`` is that id (or ``series`` for whole-series steps).
Every step without a result is printed as "not run", never left out; results recorded for
another series hash than the current one are shown but counted as "stale", not as passes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from verify import paths
from verify import results as results_mod
from verify.series import Patch, read_series, series_hash

#: (step key, title) in report order. A result belongs to the first key its step name
#: contains, checked most specific first (see `_category`).
STEPS: list[tuple[str, str]] = [
    ("equivalence", "Equivalence (pristine vs patched, randomized)"),
    ("upstream-tests", "Upstream vLLM tests of the touched area"),
    ("microbench", "Microbenchmark (A/B, interleaved)"),
    ("kernel", "Kernel benchmark vs roofline (GPU)"),
    ("e2e", "End-to-end generation A/B (CPU)"),
    ("e2e-gpu", "End-to-end generation A/B (GPU)"),
    ("embeddings", "Embeddings A/B"),
    ("gsm8k", "gsm8k accuracy through lm_eval"),
    ("serve-bench", "Serving benchmark (vllm bench serve)"),
    ("attribution", "Per-step attribution"),
]
_MATCH_ORDER = [key for key, _ in STEPS if key != "e2e"] + ["e2e"]
CPU_E2E_STEPS = ("e2e", "embeddings", "gsm8k", "serve-bench")


def seed_of(patch: Patch) -> str | None:
    match = re.search(r"test_(\d{3})_", patch.trailers.get("Verify", ""))
    return match.group(1) if match else None


def _category(step: str) -> str | None:
    for key in _MATCH_ORDER:
        if key in step:
            return key
    return None


def results_for(patch: Patch, found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Results per step category; a patch's own results replace series-wide ones of a step
    (e.g. "this patch's code path is not run on CPU" outranks a series-wide pass)."""
    seed = seed_of(patch)
    own: dict[str, list[dict[str, Any]]] = {prefix: [] for prefix, _ in STEPS}
    series: dict[str, list[dict[str, Any]]] = {prefix: [] for prefix, _ in STEPS}
    for result in found:
        category = _category(result.get("step", ""))
        if category and result.get("seed") == seed:
            own[category].append(result)
        elif category and result.get("seed") == "series":
            series[category].append(result)
    # The CPU tier's "this patch's code path does not run on CPU" marker covers every CPU
    # end-to-end column, so a series-wide CPU pass is not shown as this patch's pass.
    not_on_cpu = [r for r in own["e2e"] if r.get("step", "").startswith("e2e-not-run")]
    if not_on_cpu:
        for key in CPU_E2E_STEPS:
            own[key] = own[key] or not_on_cpu
    return {prefix: own[prefix] or series[prefix] for prefix, _ in STEPS}


def verdict(entries: list[dict[str, Any]], current: str | None = None) -> str:
    """pass / fail / n/a / not run for one step (fail wins over pass); "stale" when every
    result was recorded for another series than `current` (the patches changed since)."""
    if current is not None:
        fresh = [e for e in entries if e.get("series_hash") == current]
        if entries and not fresh:
            return "stale"
        entries = fresh
    outcomes = {e.get("outcome") for e in entries}
    for value in ("fail", "pass", "n/a", "not run"):
        if value in outcomes:
            return value
    return "not run"


def _numbers_table(numbers: dict[str, Any]) -> str:
    rows = []
    for key, value in numbers.items():
        if isinstance(value, dict | list):
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        rows.append(f"| {key} | {value} |")
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) if rows else ""


#: Paragraph labels of a patch message (vllm-ascend style); a section runs to the next label,
#: so a wrapped line that happens to start with "words:" does not end it.
SECTION_LABELS = ("Why", "How", "Future plan", "Related PR")


def _section(body: str, name: str) -> str:
    labels = "|".join(re.escape(label) for label in SECTION_LABELS)
    match = re.search(rf"^{name}:\s*(.*?)(?=^(?:{labels}):\s|\Z)", body, re.S | re.M)
    return match.group(1).strip() if match else ""


def _machine_name(machine: dict[str, Any]) -> str:
    return machine.get("gpu") or machine.get("cpu") or machine.get("cpu_model") or "?"


def render_patch(patch: Patch, version: str, found: list[dict[str, Any]], out: Path) -> str:
    grouped = results_for(patch, found)
    patches_root = patch.path.parent.parent
    body_wo_trailers = patch.body.rsplit("\n\n", 1)[0]
    why = _section(body_wo_trailers, "Why") or body_wo_trailers
    how = _section(body_wo_trailers, "How")
    why, how = (text[:1].upper() + text[1:] for text in (why, how))
    lines = [
        f"# {patch.subject}",
        "",
        f"vLLM {version} · series `{series_hash(version, patches_root)}` · `{patch.name}` · "
        f"Status: {patch.status} · Upstream: {patch.upstream}",
        "",
        "## Purpose",
        "",
        why,
        "",
    ]
    if how:
        lines += [how, ""]
    lines += ["## Test Plan", "", f"Verify (from the patch): {patch.trailers['Verify']}", ""]
    for prefix, title in STEPS:
        commands = [e["command"] for e in grouped[prefix] if e.get("command")]
        if commands:
            lines.append(f"- {title}:")
            lines += [f"  ```\n  {c}\n  ```" for c in dict.fromkeys(commands)]
    lines += ["", "## Test Result", ""]
    lines += ["| step | result | machine | date |", "|---|---|---|---|"]
    for prefix, title in STEPS:
        entries = grouped[prefix]
        state = verdict(entries, series_hash(version, patches_root))
        machine = ", ".join(sorted({_machine_name(e["machine"]) for e in entries}))
        dates = ", ".join(sorted({e.get("date", "")[:10] for e in entries}))
        lines.append(f"| {title} | {state} | {machine or '-'} | {dates or '-'} |")
    lines.append("")
    for prefix, title in STEPS:
        entries = grouped[prefix]
        lines += [f"### {title}", ""]
        if not entries:
            lines += ["not run: no result file was recorded for this step.", ""]
            continue
        for entry in entries:
            lines.append(
                f"**{entry['step']}**: {entry['outcome']}"
                + (f" ({entry['reason']})" if entry.get("reason") else "")
                + f" · series `{entry.get('series_hash')}`"
                + (
                    ""
                    if entry.get("series_hash") == series_hash(version, patches_root)
                    else " (**stale**: recorded for another series)"
                )
                + f" · `{Path(entry['_path']).name}`"
            )
            lines.append("")
            table = _numbers_table(entry.get("numbers", {}))
            if table:
                lines += [table, ""]
            for extra in entry.get("tables", []):
                lines += [extra, ""]
            for plot in _plots(entry, out):
                lines += [f"![{entry['step']}]({plot.name})", ""]
    return "\n".join(lines)


def _plots(entry: dict[str, Any], out: Path) -> list[Path]:
    """PNG plots for results that carry ``numbers.plot = {x, series{name: ys}, xlabel, ylabel}``."""
    spec = entry.get("numbers", {}).get("plot")
    if not spec:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, ys in spec["series"].items():
        ax.plot(spec["x"], ys, marker="o", label=name)
    ax.set_xlabel(spec.get("xlabel", ""))
    ax.set_ylabel(spec.get("ylabel", ""))
    if spec.get("logx"):
        ax.set_xscale("log")
    ax.set_title(spec.get("title", entry["step"]))
    ax.legend()
    fig.tight_layout()
    path = out / f"{Path(entry['_path']).stem}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def build(
    version: str,
    out_root: Path | None = None,
    patches_root: Path | None = None,
    results_root: Path | None = None,
) -> Path:
    """Write every patch's report and the index; returns the index path."""
    out = (out_root or paths.reports_root()) / version
    out.mkdir(parents=True, exist_ok=True)
    patches = read_series(version, patches_root)
    found = results_mod.load_all(version, results_root)
    index = [
        f"# vLLM {version}: patch reports (series `{series_hash(version, patches_root)}`)",
        "",
        "Built by `nox -s report-" + version + "` from the result files under `results/`.",
        "",
        "| patch | " + " | ".join(prefix for prefix, _ in STEPS) + " |",
        "|---|" + "---|" * len(STEPS),
    ]
    for patch in patches:
        name = patch.name.removesuffix(".patch") + ".md"
        (out / name).write_text(render_patch(patch, version, found, out) + "\n")
        grouped = results_for(patch, found)
        current = series_hash(version, patches_root)
        cells = " | ".join(verdict(grouped[prefix], current) for prefix, _ in STEPS)
        index.append(f"| [{patch.subject}]({name}) | {cells} |")
    if not patches:
        index.append("| (no patches) |" + " |" * len(STEPS))
    path = out / "README.md"
    path.write_text("\n".join(index) + "\n")
    return path
