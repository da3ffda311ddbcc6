"""Errors that the CLI reports as one clear message (no traceback)."""


class PatchbenchError(Exception):
    """A user-facing failure: the message says what went wrong and what to do."""


class ApplyError(PatchbenchError):
    """A patch of the series did not apply; the build tree was left at the last good commit."""

    def __init__(self, message: str, patch: str, files: list[str]):
        super().__init__(message)
        self.patch = patch
        self.files = files


class RecordError(PatchbenchError):
    """A file under results/ that cannot be read: the message names it and what is wrong."""

    def __init__(self, path: object, problem: str):
        super().__init__(f"{path}: {problem}; restore it from git or re-run the step that wrote it")
        self.path = path
        self.problem = problem


class LockTimeout(PatchbenchError):
    """Another process held the pin's lock for longer than the timeout; nothing was done."""


class ConfigError(PatchbenchError):
    """An environment variable holds a value the tool cannot use; nothing was done."""


class EngineError(PatchbenchError):
    """An engine worker died, timed out, or failed a request."""
