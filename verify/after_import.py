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
        spec = self._next_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            self.fix(module)

        spec.loader.exec_module = exec_module
        return spec

    def _next_spec(self, name, path, target):
        """The spec the finders after this one give (another fix-up of the same module wraps
        it in turn: two shims may fix one module)."""
        finders = sys.meta_path
        later = finders[finders.index(self) + 1 :] if self in finders else finders
        for finder in later:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                return spec
        return importlib.machinery.PathFinder.find_spec(name, path)


def after_import(target: str, fix: Callable[[ModuleType], None]) -> None:
    """Call `fix(module)` once module `target` has been executed (first import only)."""
    sys.meta_path.insert(0, _AfterImport(target, fix))


def chain_next_sitecustomize(here: str, path: list[str]) -> None:
    """Run the sitecustomize.py that the one in folder `here` shadows on `path` (the next one
    after `here`), if any: shims stack."""
    import os

    folders = [os.path.abspath(p) for p in path if p]
    start = folders.index(os.path.abspath(here)) + 1 if os.path.abspath(here) in folders else 0
    for entry in folders[start:]:
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate) as fh:
                code = compile(fh.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return
