"""Which model runner a vLLM pin picks, read from the pin's own `vllm/config/vllm.py`.

Where the config has no runner choice (0.16.0, 0.18.1) MRV2 runs only with
VLLM_USE_V2_MODEL_RUNNER=1 (`vllm/envs.py` defaults it to 0). Later Model Runner V2 (MRV2) is the
default only for the architectures in `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` (0.22.0: dense,
unquantized `Qwen3ForCausalLM` with the generate runner); from 0.29.0 it is the default for
every model. Either way the V1 runner still runs where
`_get_v2_model_runner_unsupported_features` names a feature MRV2 lacks. A body of a
V1-only change names those configurations from this source, never from a list of our own.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from verify import sdist
from verify.errors import PatchbenchError

SOURCE = "vllm/config/vllm.py"
ENVS = "vllm/envs.py"
#: The opt-in default of envs.py: MRV2 only when the variable is set to 1.
_OPT_IN = re.compile(r"os\.getenv\(\s*\"VLLM_USE_V2_MODEL_RUNNER\"\s*,\s*\"0\"\s*\)")
ARCHITECTURES = "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"
UNSUPPORTED = "_get_v2_model_runner_unsupported_features"
DEFAULT_MODEL = "_is_default_v2_model_runner_model"
#: Attributes `_is_default_v2_model_runner_model` tests, and the models they keep on V1.
_DEFAULT_CONDITIONS = {"runner_type": "pooling", "is_moe": "MoE", "is_quantized": "quantized"}


class RunnerSourceError(PatchbenchError):
    """The pin's source lacks what decides its default runner; nothing is guessed."""


@dataclass(frozen=True)
class RunnerChoice:
    """How one pin picks its runner."""

    version: str
    architectures: tuple[str, ...] | None  # MRV2 by default only for these; None: every model
    excluded: tuple[str, ...]  # kinds of model ("MoE", ...) that still run V1 on any of those
    unsupported: tuple[str, ...]  # features MRV2 lacks: V1 runs instead
    opt_in: bool = False  # MRV2 only with VLLM_USE_V2_MODEL_RUNNER=1: V1 is every default

    def default_is_mrv2(self, architecture: str) -> bool:
        """Whether a dense, unquantized generate model of `architecture` runs MRV2 by default."""
        if self.opt_in:
            return False
        return self.architectures is None or architecture in self.architectures

    def mrv2_default(self) -> str:
        """Where MRV2 is the default, in words."""
        if self.opt_in:
            return "no model (only with VLLM_USE_V2_MODEL_RUNNER=1)"
        if self.architectures is None:
            return "every model"
        kept = f" (except {_models(self.excluded)})" if self.excluded else ""
        return ", ".join(self.architectures) + kept

    def v1_configurations(self) -> str:
        """Who still runs V1 on this pin, in words, with the source it was read from."""
        if self.opt_in:
            return f"every model unless VLLM_USE_V2_MODEL_RUNNER=1 (`{ENVS}` of v{self.version})"
        who = [] if self.architectures is None else ["every other architecture"]
        who += [_models(self.excluded)] if self.excluded else []
        if self.unsupported:
            who.append("configurations MRV2 does not support (" + "; ".join(self.unsupported) + ")")
        who.append("VLLM_USE_V2_MODEL_RUNNER=0")
        return "; ".join(who) + f" (`{SOURCE}` of v{self.version})"


def _models(kinds: tuple[str, ...]) -> str:
    """'pooling, MoE and quantized models'."""
    head = ", ".join(kinds[:-1])
    return (f"{head} and {kinds[-1]}" if head else kinds[-1]) + " models"


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _architectures(tree: ast.Module) -> tuple[str, ...] | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == ARCHITECTURES for t in node.targets
        ):
            return tuple(
                sorted(
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                )
            )
    return None


def _choices(test: ast.expr | None) -> str:
    """'a / b' of an `x in ("a", "b")` test ('other than a / b' of `not in`), else '...'."""
    for node in ast.walk(test) if test is not None else []:
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            values = [
                e.value
                for e in getattr(node.comparators[0], "elts", [])
                if isinstance(e, ast.Constant)
            ]
            if values:
                other = "other than " if isinstance(node.ops[0], ast.NotIn) else ""
                return other + " / ".join(map(str, values))
    return "..."


def _text(expr: ast.expr, test: ast.expr | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else _choices(test) for v in expr.values]
        return re.sub(r"'([^']*(?: / |other than )[^']*)'", r"\1", "".join(parts))
    return None


def _returned_lists(func: ast.FunctionDef) -> list[str]:
    return [
        e.value
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and isinstance(n.value, ast.List)
        for e in n.value.elts
        if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]


def _unsupported(func: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> list[str]:
    """The features `func` appends (f-strings filled from their `in (...)` test) and those of
    the methods it extends with (their returned list literals)."""
    found: list[str] = []

    def visit(node: ast.AST, test: ast.expr | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.test if isinstance(child, ast.If) else test
            call = child.value if isinstance(child, ast.Expr) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
                arg = call.args[0] if call.args else None
                if call.func.attr == "append" and arg is not None:
                    text = _text(arg, test)
                    found.extend([text] if text else [])
                elif call.func.attr == "extend" and isinstance(arg, ast.Call):
                    name = getattr(arg.func, "attr", "")
                    found.extend(_returned_lists(functions[name]) if name in functions else [])
            visit(child, inner)

    visit(func, None)
    return list(dict.fromkeys(found))


def parse(text: str, version: str, envs: str | None = None) -> RunnerChoice:
    """The runner choice that `vllm/config/vllm.py` source `text` (and, where that makes none,
    `vllm/envs.py` source `envs`) of `version` makes."""
    tree = ast.parse(text)
    functions = _functions(tree)
    if "use_v2_model_runner" not in functions and envs is not None and _OPT_IN.search(envs):
        return RunnerChoice(version, None, (), (), opt_in=True)
    if UNSUPPORTED not in functions:
        raise RunnerSourceError(
            f"vLLM {version}: {SOURCE} defines no {UNSUPPORTED}; the configurations that "
            "still run the V1 runner cannot be read from the pin's source"
        )
    architectures = _architectures(tree)
    default = functions.get(DEFAULT_MODEL)
    if default is not None and architectures is None:
        raise RunnerSourceError(
            f"vLLM {version}: {SOURCE} has {DEFAULT_MODEL} but no {ARCHITECTURES}; the "
            "architectures that default to Model Runner V2 cannot be read from the pin's source"
        )
    nodes = ast.walk(default) if default is not None else []
    tested = {n.attr for n in nodes if isinstance(n, ast.Attribute)}
    excluded = tuple(words for attr, words in _DEFAULT_CONDITIONS.items() if attr in tested)
    unsupported = tuple(_unsupported(functions[UNSUPPORTED], functions))
    return RunnerChoice(version, architectures, excluded, unsupported)


def read(version: str, build_root: Path | None = None) -> RunnerChoice:
    """The runner choice of `version`, from its build tree or cached sdist (a named error where
    neither holds the source, or the source lacks what decides it)."""
    text = sdist.pin_file(version, SOURCE, build_root)
    if text is None:
        raise RunnerSourceError(
            f"vLLM {version}: no {SOURCE} in build/{version}/ or in the cached sdist; run "
            f"`python -m verify apply {version}` (the runner is read from the pin's source)"
        )
    return parse(text, version, sdist.pin_file(version, ENVS, build_root))
