"""The port report: `<reports>/<to>/port/from-<from>.md`, every source patch's outcome, the
hunks that moved, the evidence of what was absorbed, and each patch's range-diff against its
source (`git range-diff`, commit ids replaced by the patch names so the report is stable)."""

from __future__ import annotations

import re
from pathlib import Path

from verify import gitverbs, paths
from verify.buildtree import BuildTree

_SHA = r"([0-9a-f]{7,40}|-+)"
_RANGE_LINE = re.compile(rf"^(\s*\d+):\s+{_SHA}(\s+[=!<>]\s+)(\d+):\s+{_SHA}")

LEGEND = (
    "clean: applies as is; 3-way: applies only with a 3-way merge; absorbed: the release already "
    "has the change (dropped); replayed: a recorded resolution (git rerere) resolved its "
    "conflict; resolved: resolved by hand at `port --continue`; dropped: dropped by hand"
)


def report_path(target: BuildTree, source: str) -> Path:
    return paths.reports_root() / target.version / "port" / f"from-{source}.md"


def _new_names(target: BuildTree, outcomes: list) -> dict[str, str]:
    """Source patch name -> its name in the exported series (in order of the carried ones)."""
    exported = [line.strip() for line in (target.series_path / "series").read_text().splitlines()
                if line.strip()]  # fmt: skip
    carried = [o.patch for o in outcomes if o.commit]
    return dict(zip(carried, exported, strict=False))


def range_diff_text(target: BuildTree, old: str, new: str, labels: tuple[str, str]) -> str:
    """`git range-diff` of two commits with their ids replaced by `labels`."""
    text = gitverbs.range_diff(target, old, new)
    lines = []
    for line in text.splitlines():
        match = _RANGE_LINE.match(line)
        if match:
            line = f"{match[1]}: {labels[0]}{match[3]}{match[4]}: {labels[1]}" + line[match.end() :]
        lines.append(line)
    return "\n".join(lines)


def render(target: BuildTree, state, outcomes: list, problems: list[str], resolutions: int,
           deps: list | None = None) -> str:  # fmt: skip
    names = _new_names(target, outcomes)
    lines = [
        f"# Port of patches/{state.source}/ to vLLM {state.target}",
        "",
        f"Made by `python -m verify port {state.source} {state.target}`: each patch of "
        f"patches/{state.source}/ carried onto the pristine {state.target} sdist in order, then "
        f"patches/{state.target}/ exported from the build tree and checked.",
        "",
        "| source patch | outcome | new patch | detail |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        moved = [f"{len(o.hunks)} hunk(s) moved"] if o.hunks else []
        detail = "; ".join([o.detail] * bool(o.detail) + moved)
        lines.append(f"| {o.patch[:4]} {o.subject} | {o.outcome} | "
                     f"{names.get(o.patch, '-')[:4]} | {detail.replace('|', '/')} |")  # fmt: skip
    counts = {}
    for o in outcomes:
        counts[o.outcome] = counts.get(o.outcome, 0) + 1
    lines += ["", "Outcomes: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + ".",
              "", f"Legend: {LEGEND}.", ""]  # fmt: skip
    lines.append(f"Check of the exported series: {'; '.join(problems) if problems else 'ok'}."
                 + (f" Recorded resolutions kept in patches/{state.target}/rr-cache/: "
                    f"{resolutions}." if resolutions else ""))  # fmt: skip
    if deps:
        lines += ["", f"Dependencies in patches/{state.target}/ (derived by applying on the "
                  f"pristine {state.target}): " + "; ".join(f"{d.patch[:4]} {d.text()}"
                                                           for d in deps) + "."]  # fmt: skip
    for o in outcomes:
        lines += ["", f"## {o.patch}", "", f"Outcome: **{o.outcome}**" +
                  (f" as `{names[o.patch]}`" if o.patch in names else "") + "."]  # fmt: skip
        if o.detail:
            lines += ["", o.detail[0].upper() + o.detail[1:] + "."]
        if o.hunks:
            lines += ["", "Hunks:", "", *(f"- {h}" for h in o.hunks)]
        if o.outcome == "absorbed":
            lines += ["", f"Trailer for patches/{state.source}/{o.patch}: `{o.trailer}`."]
        if o.commit and o.source_commit:
            labels = (f"{state.source}/{o.patch[:4]}", f"{state.target}/{names[o.patch][:4]}")
            diff = range_diff_text(target, o.source_commit, o.commit, labels)
            lines += ["", f"Range-diff against the source patch ({labels[0]} -> {labels[1]}):",
                      "", "```", diff, "```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def write(target: BuildTree, state, outcomes: list, problems: list[str], resolutions: int,
          deps: list | None = None) -> Path:  # fmt: skip
    path = report_path(target, state.source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(target, state, outcomes, problems, resolutions, deps))
    return path


def summary(state, outcomes: list) -> str:
    """The terminal's table: one line per source patch."""
    width = max((len(o.patch) for o in outcomes), default=10)
    rows = [f"port {state.source} -> {state.target}:"]
    for o in outcomes:
        extra = o.absorbed_in and f" (in {o.absorbed_in})"
        moved = f", {len(o.hunks)} hunk(s) moved" if o.hunks else ""
        rows.append(f"  {o.patch.ljust(width)}  {o.outcome}{extra}{moved}")
    return "\n".join(rows)
