"""Size ratchets over verify/ and scripts/ (the registry issue's targets: no function over 80
lines, no module over 600): what is over today may not grow, nothing new may cross, and an
entry that shrank must lower its allowance here, so the counts only fall."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_LINES, MODULE_LINES = 80, 600
#: Functions over FUNCTION_LINES today: "file:function" -> its lines.
LONG_FUNCTIONS = {
    # none: every function is within FUNCTION_LINES
}
#: Modules over MODULE_LINES today -> their lines.
LONG_MODULES = {
    # none: every module is within MODULE_LINES
}


def sizes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """({file:function: lines} over FUNCTION_LINES, {file: lines} over MODULE_LINES)."""
    functions, modules = {}, {}
    for folder in ("verify", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            rel, text = path.relative_to(root).as_posix(), path.read_text()
            if len(text.splitlines()) > MODULE_LINES:
                modules[rel] = len(text.splitlines())
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > FUNCTION_LINES:
                        functions[f"{rel}:{node.name}"] = lines
    return functions, modules


def _ratchet(found: dict[str, int], allowed: dict[str, int], what: str) -> None:
    grown = {k: v for k, v in found.items() if v > allowed.get(k, 0)}
    assert not grown, f"{what} over the limit, or grown past their allowance: {grown}"
    fallen = {k: (v, found.get(k, 0)) for k, v in allowed.items() if found.get(k, 0) < v}
    assert not fallen, f"lower these allowances ({what}) to the new sizes: {fallen}"


def test_no_function_or_module_grows_past_its_allowance():
    functions, modules = sizes(ROOT)
    _ratchet(functions, LONG_FUNCTIONS, f"functions over {FUNCTION_LINES} lines")
    _ratchet(modules, LONG_MODULES, f"modules over {MODULE_LINES} lines")


def test_the_scan_sees_a_long_function(tmp_path):
    (tmp_path / "verify").mkdir()
    (tmp_path / "scripts").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    (tmp_path / "verify" / "x.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    functions, modules = sizes(tmp_path)
    assert functions == {"verify/x.py:long": FUNCTION_LINES + 1} and modules == {}
