"""The project speaks of the project: no diary in what it tracks as prose.

Docs (docs/*.md, README.md), the registry (patches/registry/*.toml) and the comments and
docstrings of the code (verify/, scripts/, noxfile.py) hold no session numbers, issue numbers,
dates or narratives of a machine: history lives in git, measurements in results/. Records
(results/**) and generated reports are evidence and are not scanned; string literals in code
are data and are not scanned either.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from verify.registry import PROSE_FORBIDDEN

REPO = Path(__file__).resolve().parent.parent

#: What a diary entry looks like (the registry prose rule's patterns, plus narratives).
DIARY = {
    "a session or issue number": PROSE_FORBIDDEN["a session or issue number"],
    "a date": PROSE_FORBIDDEN["a date"],
    "a machine narrative": re.compile(
        r"\bthe lent\b|\blent (?:GPU |H100 |H200 )?machines?\b"
        r"|\b(?:this|last|next) (?:week|session)\b",
        re.I,
    ),
}
#: Dates that are data, not history: removed before the scan. A registry `related` entry's
#: `checked` is the day its upstream state was last read (checked data, compared by a test).
DATA_DATES = re.compile(r"\bchecked\s*=\s*\"?20\d\d-\d\d-\d\d\"?")
#: (file, matched text) -> why it may stay. Every entry must still match (no stale entries).
ALLOWED: dict[tuple[str, str], str] = {}


def _python_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


_SHELL_COMMENT = re.compile(r"(?:^|\s)(#.*)$")


def _shell_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment of a shell script (the shebang left out)."""
    lines = enumerate(text.splitlines(), 1)
    return [(n, m.group(1)) for n, line in lines if n > 1 and (m := _SHELL_COMMENT.search(line))]


def _whole(text: str) -> list[tuple[int, str]]:
    return [(1, DATA_DATES.sub("<date>", text))]


def scanned() -> dict[str, list[tuple[int, str]]]:
    """Relative path -> the (first line, text) pieces of it that are prose."""
    files: dict[str, list[tuple[int, str]]] = {}
    prose = [*sorted(REPO.glob("docs/*.md")), REPO / "README.md"]
    for path in [*prose, *sorted(REPO.glob("patches/registry/*.toml"))]:
        files[path.relative_to(REPO).as_posix()] = _whole(path.read_text())
    code = [*sorted(REPO.glob("verify/**/*.py")), *sorted(REPO.glob("scripts/*.py"))]
    for path in [*code, REPO / "noxfile.py"]:
        files[path.relative_to(REPO).as_posix()] = _python_prose(path.read_text())
    for path in sorted(REPO.glob("scripts/*.sh")):
        files[path.relative_to(REPO).as_posix()] = _shell_prose(path.read_text())
    return files


def diary_entries(files: dict[str, list[tuple[int, str]]]) -> list[tuple[str, int, str, str]]:
    """(file, line, what, matched text) of every diary entry in `files`' prose."""
    hits = []
    for rel, pieces in files.items():
        for first, text in pieces:
            for what, pattern in DIARY.items():
                for m in pattern.finditer(text):
                    line = first + text.count("\n", 0, m.start())
                    hits.append((rel, line, what, m.group(0)))
    return hits


def test_no_diary_in_docs_registry_or_code_comments():
    hits = [h for h in diary_entries(scanned()) if (h[0], h[3]) not in ALLOWED]
    listed = "\n".join(f"{rel}:{line}: {what}: {text!r}" for rel, line, what, text in hits)
    assert not hits, f"{len(hits)} diary entries (history lives in git):\n{listed}"


def test_every_allowed_entry_still_matches():
    used = {(rel, text) for rel, _, _, text in diary_entries(scanned())}
    assert set(ALLOWED) <= used, f"stale allowlist entries: {sorted(set(ALLOWED) - used)}"


@pytest.mark.parametrize(
    ("prose", "what"),
    [
        ("Session 20 (4x H200): the record fails", "a session or issue number"),
        ("as sessions 25-27 showed", "a session or issue number"),
        ("issue 22: penalty-cost runs", "a session or issue number"),
        ("measured on 2026-11-23", "a date"),
        ("the lent machine has one H100", "a machine narrative"),
        ("on a lent GPU machine", "a machine narrative"),
        ("this week's runs", "a machine narrative"),
        ("Next session: B=32 again", "a machine narrative"),
    ],
)
def test_each_kind_of_diary_entry_is_found(prose, what):
    md = [(rel, what) for rel, _, what, _ in diary_entries({"docs/x.md": _whole(prose)})]
    assert ("docs/x.md", what) in md


def test_comments_and_docstrings_are_scanned_but_strings_are_not():
    source = (
        '"""Module doc: session 3."""\n'
        "X = 'session 4 is data'  # a comment: issue 5\n"
        "def f():\n"
        '    """Function doc: 2026-01-02."""\n'
    )
    found = {(line, text) for _, line, _, text in diary_entries({"m.py": _python_prose(source)})}
    assert found == {(1, "session 3"), (2, "issue 5"), (4, "2026-01-02")}


def test_shell_comments_are_scanned_but_commands_are_not():
    script = "#!/bin/bash session 1\necho 'session 2'  # issue 3\n# the lent H100\nn=${#a[@]}\n"
    found = {(line, text) for _, line, _, text in diary_entries({"s.sh": _shell_prose(script)})}
    assert found == {(2, "issue 3"), (3, "the lent")}


def test_a_checked_date_is_data_but_other_dates_are_not():
    toml = 'related = [{pr = 1, checked = 2026-11-30}]\nfuture_plan = "rerun after 2026-12-01"\n'
    found = [text for _, _, _, text in diary_entries({"r.toml": _whole(toml)})]
    assert found == ["2026-12-01"]
