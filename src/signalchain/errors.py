"""The one exception root of signalchain.

Every error signalchain raises on purpose is a `SignalchainError`. Messages quote the offending
value, say what was allowed, and name the fix (einops style), so the CLI can print one line.
"""

from __future__ import annotations

__all__ = [
    "SignalchainError",
    "UsageError",
    "GoldenFileError",
    "PipelineError",
    "TraceError",
    "PipelineExit",
]


class SignalchainError(Exception):
    """Root of every error signalchain raises deliberately."""


class UsageError(SignalchainError):
    """The caller asked for something that cannot be done as asked (bad option, bad name)."""


class GoldenFileError(SignalchainError):
    """A golden batch on disk is missing, damaged, tampered with or of an unknown schema."""


class PipelineError(SignalchainError):
    """A pipeline could not be loaded, or does not honour the `Pipeline` protocol."""


class TraceError(SignalchainError):
    """A value could not be recorded or two traces cannot be compared."""


class PipelineExit(PipelineError):
    """A pipeline's own code called `sys.exit()` while signalchain ran it (`code`: what it passed).

    Raised in place of the `SystemExit`, with the user's frames in its traceback, so that it is
    reported like any other crash of the pipeline instead of ending signalchain with that code.
    """

    def __init__(self, message: str, code: object = None):
        super().__init__(message)
        self.code = code
