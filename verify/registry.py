"""The registry of what proves each patch: one TOML file per patch in `patches/registry/`.

A patch is known by a stable id, its file name (``<slug>.toml``): a slug that survives
renumbering and porting (not a seed, an issue or a patch number). The same change carried on
several pins is one entry. Adding a patch = adding one file; nothing else lists patches.

Entry format (every key but ``steps`` is required; step keys marked * are optional)::

    title = "Skip the FP32 logits copy in the MRV2 sampler"
    devices = ["cuda"]            # where the patch's code path runs in vLLM: cpu, cuda
    upstream_figure = "..."       # the upstream PR's own figure, with its source ("" if none)
    why = "..."                   # vllm-ascend style registry text: the problem, no numbers
    how = "..."                   # what the patch changes
    future_plan = "..."
    runners = ["V1"]              # the model runner(s) whose code the patch changes: V1, MRV2
    reaches = "..."               # which requests and features reach the changed code (prose)

    [[related]]                   # upstream work on the same code, one table each (* optional)
    url = "#47540"                # "#N" (vllm-project/vllm) or a GitHub pull/issue URL
    state = "open"                # open | merged | closed, as of `checked`
    checked = "YYYY-MM-DD"        # the date the state was looked up
    differs = "..."               # one line: how this patch differs from it (prose)
    relation* = "related"         # related | backport (this patch is that merged PR, carried to
                                  #   an older pin) | same (this patch is that open PR)

    [pins]                        # pin -> the patch's subject line on that pin (matched exactly,
    "0.22.0" = "[Perf][MRV2] ..." #   so renumbering a series never breaks the link)

    [[steps]]
    kind = "equivalence"          # equivalence | upstream-tests | microbench | kernel | e2e
                                  # | serve-bench | gsm8k | embeddings | attribution
    title = "..."
    device = "cpu"                # where the step runs: cpu | cuda
    rule = "tests"                # tests | identity | performance | kernel | serve-bench | growth
    records = ["equivalence-x"]   # record step names (results/<tier>/<pin>/) holding its evidence
    command = "pytest ..."        # what a contributor runs, on a vLLM checkout where upstream=true
    upstream* = true              # the command runs on a vLLM checkout of the pin (default false)
    harness* = ["tests/equivalence/test_x.py"]  # files whose content produced it
    pins* = ["0.22.0"]            # only on these pins (default: every pin of the entry)
    claim* = "faster"             # performance/kernel/serve-bench: "faster" | "not slower"
    threshold* = 0.05             # noise threshold (fraction)
    variant* = "{pin}+{number}"   # kernel: the variant judged, "{pin}" = the pin, "{number}" =
                                  #   the patch's series number there (0006); its baseline is
                                  #   the pin's own kernel where the run measured it
    not_applicable* = "why"       # the step does not run this patch's code on that device
    note* = "..."                 # shown beside the step in the report
    headline_shape* = "vocab 151936, 1x1"  # kernel: the shape whose eager time the record's
                                  #   headline states (this PR vs the pin's kernel)
    headline* = true              # the step whose result the report's Purpose states as the
                                  #   measured effect (at most one per entry; default: the
                                  #   first performance step with a record)
    reader* = "penalty-state-check"  # the importer loop's reader that judges the step's raw
                                  #   runs (verify/importer/loop.py READERS) into its one record
    source* = "penalty-state-check*.json"  # with reader: the runs, a glob in results/<tier>/<pin>/
    params* = { goal_cells = [] } # what its reader judges against besides the threshold
    frozen* = "why"               # raw format retired: records kept as committed, marked legacy
                                  #   (still stale per patch); a step with a reader replaces them

`validate` checks every series against the registry: each patch has exactly one entry, each
entry's pins name a patch that exists, each step is well formed (tests/test_registry.py).
"""

from __future__ import annotations

import functools
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verify.errors import PatchbenchError
from verify.paths import patches_root, repo_root
from verify.series import Patch, read_series

KINDS = ("equivalence", "upstream-tests", "microbench", "kernel", "e2e", "serve-bench", "gsm8k",
         "embeddings", "attribution")  # fmt: skip
RULES = ("tests", "identity", "performance", "kernel", "serve-bench", "growth", "memory")
#: The rules that judge a measured performance claim (the rest judge correctness).
PERF_RULES = ("kernel", "performance", "growth", "serve-bench", "memory")
DEVICES = ("cpu", "cuda")
CLAIMS = ("faster", "not slower")


def harness_proofs(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """patches/harness-proofs.toml: records that prove a harness, not a patch -> {proves, ...}."""
    path = (root or patches_root()) / "harness-proofs.toml"
    return tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


_REQUIRED = ("title", "devices", "why", "how", "future_plan", "runners", "reaches", "pins")
RUNNERS = ("V1", "MRV2")
RELATED_STATES = ("open", "merged", "closed")
RELATIONS = ("related", "backport", "same")
_RELATED_URL = re.compile(r"#\d+|https://github\.com/[\w.-]+/[\w.-]+/(?:pull|issues)/\d+")
_RELATED_KEYS = ("url", "state", "checked", "differs")
_STEP_REQUIRED = ("kind", "title", "device", "rule", "records", "command")
_STEP_EXAMPLE = (
    '[[steps]] kind = "equivalence", title = "Equivalence: pristine vs patched", '
    'device = "cpu", rule = "tests", records = ["equivalence-NNN"], '
    'command = "pytest tests/equivalence/test_NNN_name.py"'
)


@dataclass(frozen=True)
class Step:
    kind: str
    title: str
    device: str
    rule: str
    records: tuple[str, ...]
    command: str
    upstream: bool = False
    harness: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    claim: str = "faster"
    threshold: float | None = None  # required where a step is judged on speed (`threshold`)
    variant: str = ""
    not_applicable: str = ""
    note: str = ""
    headline: bool = False
    headline_shape: str = ""
    reader: str = ""
    source: str = ""
    frozen: str = ""
    params: dict = field(default_factory=dict, hash=False)

    def on(self, version: str) -> bool:
        return not self.pins or version in self.pins


@dataclass(frozen=True)
class Related:
    """One piece of upstream work on the same code."""

    url: str
    state: str
    checked: str
    differs: str
    relation: str = "related"

    @property
    def short(self) -> str:
        """`#N` for a vllm-project/vllm link, else the URL."""
        found = re.fullmatch(r"https://github\.com/vllm-project/vllm/\w+/(\d+)", self.url)
        return f"#{found.group(1)}" if found else self.url


@dataclass(frozen=True)
class Entry:
    slug: str
    title: str
    devices: tuple[str, ...]
    why: str
    how: str
    future_plan: str
    pins: dict[str, str]
    upstream_figure: str = ""
    steps: tuple[Step, ...] = field(default=())
    runners: tuple[str, ...] = ("V1",)
    reaches: str = ""
    related: tuple[Related, ...] = ()

    @property
    def upstream(self) -> Related | None:
        """The upstream pull request this patch is (relation backport or same), if any."""
        return next((r for r in self.related if r.relation != "related"), None)

    def steps_on(self, version: str) -> list[Step]:
        return [s for s in self.steps if s.on(version)]


def registry_dir() -> Path:
    """`patches/registry/` of the checkout (or of `PATCHBENCH_PATCHES_DIR`)."""
    return patches_root() / "registry"


def _step(slug: str, raw: dict[str, Any]) -> Step:
    missing = [k for k in _STEP_REQUIRED if k not in raw]
    if missing:
        raise PatchbenchError(
            f"registry {slug}: a step lacks {', '.join(missing)}; a step needs "
            f"{', '.join(_STEP_REQUIRED)}, e.g. {_STEP_EXAMPLE}"
        )
    unknown = set(raw) - set(Step.__dataclass_fields__)
    if unknown:
        raise PatchbenchError(f"registry {slug}: unknown step key(s) {', '.join(sorted(unknown))}")
    step = Step(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    problems = [
        f"kind {step.kind!r}" * (step.kind not in KINDS),
        f"rule {step.rule!r}" * (step.rule not in RULES),
        f"device {step.device!r}" * (step.device not in DEVICES),
        f"claim {step.claim!r}" * (step.claim not in CLAIMS),
    ]
    if step.reader and (not step.source or len(step.records) != 1):
        raise PatchbenchError(
            f"registry {slug}: step {step.title!r} names reader {step.reader!r}: it needs "
            '`source = "<glob of its runs>"` and exactly one record'
        )
    if step.frozen and (step.reader or not step.records):
        raise PatchbenchError(
            f"registry {slug}: step {step.title!r} is frozen: its records are kept as "
            "committed, so it names records and no reader"
        )
    if any(problems):
        raise PatchbenchError(
            f"registry {slug}: step {step.title!r} has an unknown "
            + ", ".join(filter(None, problems))
        )
    return step


def _related(slug: str, raw: Any) -> tuple[Related, ...]:
    items = raw if isinstance(raw, list) else [raw]
    found = []
    for item in items:
        missing = [k for k in _RELATED_KEYS if not isinstance(item, dict) or not item.get(k)]
        unknown = set(item) - set(Related.__dataclass_fields__) if isinstance(item, dict) else ()
        if missing or unknown:
            raise PatchbenchError(
                f"registry {slug}: a [[related]] item lacks {', '.join(missing) or '-'} or has "
                f"unknown keys {', '.join(sorted(unknown)) or '-'}; each needs "
                f'{", ".join(_RELATED_KEYS)}, e.g. [[related]] url = "#47540", state = '
                '"open", checked = "2026-12-01", differs = "..."'
            )
        item = Related(**{k: str(v).strip() for k, v in item.items()})
        unmerged = item.relation == "backport" and item.state != "merged"
        problems = [
            f"url {item.url!r}" * (not _RELATED_URL.fullmatch(item.url)),
            f"state {item.state!r}" * (item.state not in RELATED_STATES),
            f"checked {item.checked!r}" * (not re.fullmatch(r"20\d\d-\d\d-\d\d", item.checked)),
            f"relation {item.relation!r}" * (item.relation not in RELATIONS),
            "a backport of an unmerged PR" * unmerged,
        ]
        if any(problems):
            raise PatchbenchError(
                f"registry {slug}: related {item.url}: bad "
                + ", ".join(filter(None, problems))
                + f" (url: #N or a GitHub pull/issue URL; state: {', '.join(RELATED_STATES)}; "
                f"checked: YYYY-MM-DD; relation: {', '.join(RELATIONS)}; a backport is merged)"
            )
        found.append(item)
    if sum(r.relation != "related" for r in found) > 1:
        raise PatchbenchError(f"registry {slug}: more than one related item is this patch")
    return tuple(found)


def parse_entry(path: Path) -> Entry:
    slug = path.stem
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", slug):
        raise PatchbenchError(f"registry file {path.name}: the id must be a lower-case slug")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PatchbenchError(
            f"registry file {path.name}: not valid TOML ({' '.join(str(exc).split())})"
        ) from exc
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise PatchbenchError(
            f"registry {slug}: missing {', '.join(missing)}; an entry needs "
            f"{', '.join(_REQUIRED)} and at least one step that can fail "
            "(the format is in verify/registry.py)"
        )
    bad = [d for d in raw["devices"] if d not in DEVICES]
    if bad:
        raise PatchbenchError(f"registry {slug}: unknown device(s) {bad}")
    runners = raw["runners"]
    if not runners or not isinstance(runners, list) or set(runners) - set(RUNNERS):
        raise PatchbenchError(
            f"registry {slug}: runners = {runners!r}; name the model runner(s) whose code the "
            f'patch changes, one or more of {", ".join(RUNNERS)} (e.g. runners = ["V1"])'
        )
    if not isinstance(raw["reaches"], str) or not raw["reaches"].strip():
        raise PatchbenchError(
            f"registry {slug}: reaches is empty; say which requests and features reach the "
            'changed code (e.g. reaches = "requests with a presence or frequency penalty")'
        )
    steps = tuple(_step(slug, s) for s in raw.get("steps", []))
    headlines = [s.title for s in steps if s.headline]
    if len(headlines) > 1:
        raise PatchbenchError(f"registry {slug}: more than one headline step: {headlines}")
    return Entry(
        slug=slug,
        title=raw["title"],
        devices=tuple(raw["devices"]),
        why=raw["why"].strip(),
        how=raw["how"].strip(),
        future_plan=raw["future_plan"].strip(),
        pins=dict(raw["pins"]),
        upstream_figure=raw.get("upstream_figure", "").strip(),
        steps=steps,
        runners=tuple(runners),
        reaches=raw["reaches"].strip(),
        related=_related(slug, raw.get("related", [])),
    )


def load(root: Path | None = None) -> dict[str, Entry]:
    """Every entry of the registry, by id; the project's own registry (no `root`) follows ports
    (`follow_ports`)."""
    directory = root or registry_dir()
    entries = {p.stem: parse_entry(p) for p in sorted(directory.glob("*.toml"))}
    if root is None:
        follow_ports(entries)
    return entries


def follow_ports(entries: dict[str, Entry], patches: Path | None = None) -> None:
    """A pin whose pins.toml table says `ported_from = "<pin>"` takes, in each entry naming a
    subject on that pin, the same subject where its own series carries it (a port keeps the
    subject), so adding a ported pin needs no registry edit."""
    from verify import pins

    for pin, source in pins.with_key("ported_from").items():
        carried = {p.subject for p in read_series(pin, patches)}
        for entry in entries.values():
            subject = entry.pins.get(source)
            if pin not in entry.pins and subject in carried:
                entry.pins[pin] = subject


def entry_for(patch: Patch, version: str, entries: dict[str, Entry] | None = None) -> Entry | None:
    """The entry whose pin `version` names `patch`'s subject line."""
    entries = load() if entries is None else entries
    found = [e for e in entries.values() if e.pins.get(version) == patch.subject]
    return found[0] if found else None


class ThresholdError(PatchbenchError):
    """A record judged on speed whose registry steps state no threshold, or disagree."""


def naming(
    version: str, record: str, entries: dict[str, Entry] | None = None
) -> list[tuple[Entry, Step]]:
    """(entry, step) of every registry step on `version` that names record step `record`."""
    entries = load() if entries is None else entries
    return [(e, st) for e in entries.values() for st in e.steps_on(version) if record in st.records]


def threshold(version: str, record: str) -> float:
    """The noise threshold the registry states for record step `record` on `version`: every
    step that names the record must state the same one (a speed rule's threshold lives only
    in the registry); ThresholdError otherwise."""
    found = {(entry.slug, step.threshold) for entry, step in naming(version, record)}
    values = {t for _, t in found}
    if not found or None in values or len(values) > 1:
        said = ", ".join(f"{slug}: {t}" for slug, t in sorted(found, key=str)) or "no step"
        raise ThresholdError(
            f"record {record} on {version} is judged on speed: every registry step naming it "
            f"needs the same `threshold = <fraction>` ({said})"
        )
    return values.pop()


def patches_for_record(
    version: str, step: str, entries: dict[str, Entry] | None = None
) -> list[str]:
    """Ids of the patches whose registry steps on `version` name record step `step`."""
    found = naming(version, step, entries)
    return list(dict.fromkeys(e.slug for e, _ in found if version in e.pins))


def validate(
    versions: list[str], root: Path | None = None, patches_root: Path | None = None
) -> list[str]:
    """Problems between the registry and the series of `versions` (empty: consistent)."""
    entries, problems, proof_names = load(root), [], set(harness_proofs())
    for version in versions:
        series = read_series(version, patches_root)
        problems += _backport_problems(version, series, entries)
        subjects = {p.subject: p.name for p in series}
        for subject, name in subjects.items():
            owners = [e.slug for e in entries.values() if e.pins.get(version) == subject]
            if len(owners) != 1:
                problems.append(
                    f"{version}/{name}: {len(owners)} registry entries ({', '.join(owners)}); "
                    "add patches/registry/<id>.toml naming its subject under [pins]"
                )
        for entry in entries.values():
            subject = entry.pins.get(version)
            if subject is not None and subject not in subjects:
                problems.append(
                    f"registry {entry.slug}: pin {version} names {subject!r}, "
                    "which is no patch of that series"
                )
    for entry in entries.values():
        for pin in entry.pins:
            if pin not in versions:
                problems.append(f"registry {entry.slug}: unknown pin {pin}")
        proofs = sorted({r for st in entry.steps for r in st.records} & proof_names)
        if proofs:
            problems.append(f"registry {entry.slug}: names harness proof(s) {', '.join(proofs)}")
        problems += _without_failing_step(entry)
        problems += prose_problems(entry)
        problems += threshold_problems(entry)
    return problems


#: Rules that judge speed against a noise threshold: a step of one that makes a record must
#: state its `threshold` (the importer reads it from here, never from code).
SPEED_RULES = ("performance", "kernel", "serve-bench")


def threshold_problems(entry: Entry) -> list[str]:
    """One problem per record-making step of a speed rule without a `threshold`."""
    return [
        f"registry {entry.slug}: step {step.title!r} ({step.rule}) states no threshold; add "
        "`threshold = <fraction>` (0.02 is 2%)"
        for step in entry.steps
        if step.rule in SPEED_RULES and step.records and step.threshold is None
    ]


def _backport_problems(version: str, series: list[Patch], entries: dict[str, Entry]) -> list[str]:
    """A patch whose trailer says merged-in X must be a backport of the PR its Upstream trailer
    names (a related item with relation backport), and a backport must say merged-in."""
    problems = []
    for patch in series:
        entry = entry_for(patch, version, entries)
        if entry is None:
            continue
        up = entry.upstream
        backport = up is not None and up.relation == "backport"
        number = re.search(r"/(\d+)$", patch.upstream)
        if patch.merged_in and not (backport and number and up.short == f"#{number.group(1)}"):
            problems.append(
                f"registry {entry.slug}: {version}/{patch.name} says merged-in "
                f"{patch.merged_in} (Upstream: {patch.upstream}); add that PR under [[related]] "
                'with state = "merged" and relation = "backport"'
            )
        elif backport and not patch.merged_in:
            problems.append(
                f"registry {entry.slug}: related {up.url} is a backport, but {version}/"
                f"{patch.name} has no 'Status: merged-in X' trailer"
            )
    return problems


#: Registry prose is timeless and figure-free (bodies take their numbers from records only):
#: each field's length limit, and what it may not hold.
PROSE_LIMITS = {"why": 500, "how": 900, "future_plan": 300, "reaches": 300}
DIFFERS_LIMIT = 200
_FIGURE = (
    r"\b\d+(?:\.\d+)?\s?(?:%|x\b|ms\b|us\b|µs\b|KiB|MiB|GiB|tok/s)"
    r"|\[\s*-?\d+(?:\.\d+)?%?,\s*-?\d+(?:\.\d+)?%?\]"
)
PROSE_FORBIDDEN = {
    "a measured figure": re.compile(_FIGURE),
    "a session or issue number": re.compile(r"\b(?:session|issue)s?\s+\d+", re.I),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a machine name": re.compile(r"\b(?:H100|H200|A100|lent)\b"),
}


def prose_problems(entry: Entry) -> list[str]:
    """One problem per registry prose field over its length limit or holding what prose may
    not (PROSE_FORBIDDEN): figures belong in records, history in git."""
    problems = []
    fields = [(name, getattr(entry, name), limit) for name, limit in PROSE_LIMITS.items()]
    fields += [(f"related {r.url}: differs", r.differs, DIFFERS_LIMIT) for r in entry.related]
    for name, text, limit in fields:
        if len(text) > limit:
            problems.append(
                f"registry {entry.slug}: {name} is {len(text)} characters (at most {limit})"
            )
        for what, pattern in PROSE_FORBIDDEN.items():
            if found := pattern.search(text):
                problems.append(
                    f"registry {entry.slug}: {name} holds {what} ({found.group(0)!r}); "
                    "bodies take figures from records, and history lives in git"
                )
    return problems


def attributed(version: str, step: str, entries: dict[str, Entry] | None = None) -> bool:
    """Whether record step `step` of `version` has an owner: a patch whose registry steps name
    it, or the harness it proves (`harness_proofs`)."""
    return step in harness_proofs() or bool(patches_for_record(version, step, entries))


def can_fail(step: Step) -> bool:
    """Whether `step` can fail: it runs (no `not_applicable`) and names records to judge."""
    return not step.not_applicable and bool(step.records)


def _without_failing_step(entry: Entry) -> list[str]:
    """One problem per pin of `entry` on which none of its steps can fail."""
    return [
        f"registry {entry.slug}: no step on pin {pin} can fail (every step is not_applicable "
        f"or names no records); add one with {', '.join(_STEP_REQUIRED)}, e.g. {_STEP_EXAMPLE}"
        for pin in entry.pins
        if not any(can_fail(s) for s in entry.steps_on(pin))
    ]


def diff_hash(patch: Patch, length: int = 12) -> str:
    """Content hash of what a patch does: its diff, without the commit message, the
    format-patch header and the trailing git version signature. Rewording a message keeps
    the evidence fresh; any change to the code or tests the patch touches makes it stale
    (a change to its test files only is excused for steps that run none of them:
    `tests_only_change`, `verify.results.staleness`)."""
    return diff_hash_text(patch.path.read_text(encoding="utf-8"), length)


def _diff_of(text: str) -> str:
    """A format-patch text's diff: no message, header or trailing git version signature."""
    start = text.find("\ndiff --git ")
    diff = text[start + 1 :] if start >= 0 else text
    return re.sub(r"\n-- \n[^\n]*\n*\Z", "\n", diff)


def diff_hash_text(text: str, length: int = 12) -> str:
    """`diff_hash` of one format-patch text."""
    return hashlib.sha256(_diff_of(text).encode()).hexdigest()[:length]


def code_hash_text(text: str, length: int = 12) -> str:
    """`diff_hash_text` of the files the diff changes outside ``tests/``: what a step that runs
    none of the patch's own test files measured."""
    files = re.split(r"(?m)^(?=diff --git )", _diff_of(text))
    code = "".join(f for f in files if not f.startswith("diff --git a/tests/"))
    return hashlib.sha256(code.encode()).hexdigest()[:length]


@functools.cache
def committed_forms(path: Path) -> tuple[tuple[str, str], ...]:
    """(diff hash, code hash) of every committed version of the patch file `path`, newest
    first; empty where the repository's history is not at hand. (gitpython is imported
    here: the GPU machine's scripts import this module and have no gitpython.)"""
    import git

    try:
        repo = git.Repo(repo_root())
        rel = path.resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()
        revs = repo.git.rev_list("HEAD", "--", rel).split()
        texts = [repo.git.show(f"{r}:{rel}", strip_newline_in_stdout=False) for r in revs]
    except (git.GitError, ValueError, OSError):
        return ()
    return tuple((diff_hash_text(t), code_hash_text(t)) for t in texts)


def tests_only_change(patch: Patch, recorded: str) -> bool:
    """Whether the committed form of `patch` whose diff hash is `recorded` differs from the
    patch as it is now only in files under ``tests/`` (its code the same)."""
    code = code_hash_text(patch.path.read_text(encoding="utf-8"))
    return any(d == recorded and c == code for d, c in committed_forms(patch.path))


def harness_hash(paths: tuple[str, ...] | list[str], repo: Path | None = None) -> str:
    """Content hash of the harness files (repo-relative) that produced a record; "none" when
    the step names no harness. A missing file hashes as its name, so it still changes it."""
    if not paths:
        return "none"
    base = repo or repo_root()
    digest = hashlib.sha256()
    for rel in sorted(paths):
        path = base / rel
        digest.update(rel.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
    return digest.hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    """``python -m verify.registry [check|list]``: validate the registry against every pinned
    series (exit 1 on a problem), or list each entry with its pins and steps."""
    import argparse
    import sys

    from verify.versions import PINNED

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="check", choices=("check", "list"))
    args = parser.parse_args(argv)
    if args.command == "list":
        for entry in load().values():
            pins = ", ".join(entry.pins)
            print(f"{entry.slug}: {entry.title} [{pins}; {', '.join(entry.devices)}]")
            for step in entry.steps:
                where = "n/a" if step.not_applicable else ", ".join(step.records) or "no record"
                print(f"    {step.kind:<15} {step.device:<5} {step.rule:<12} {where}")
        return 0
    try:
        problems = validate(list(PINNED))
        count = len(load())
    except PatchbenchError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    for problem in problems:
        print(problem)
    print(f"registry: {count} entries, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
