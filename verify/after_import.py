"""Run a fix-up on a module right after it is first imported, in every process that has the
caller on PYTHONPATH. Standard library only: the harness shims (verify/e2e/shims, verify/ab/plant)
load this file by path from their `sitecustomize.py`, before `verify` is importable."""

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, target: str, fix: Callable[[ModuleType], None]) -> None:
        self.target, self.fix = target, fix

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            self.fix(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(target: str, fix: Callable[[ModuleType], None]) -> None:
    """Call `fix(module)` once module `target` has been executed (first import only)."""
    sys.meta_path.insert(0, _AfterImport(target, fix))
