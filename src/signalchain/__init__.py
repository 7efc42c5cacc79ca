"""signalchain: find the earliest stage where a music model's training goes wrong, and listen to it.

Public API (docs/architecture.md, "Layers": layer 5). User code needs only `tap` and, for the command
line, an object honouring `Pipeline`. The commands are functions too: `doctor`, `audit`, `listen`,
`compare` and `capture` return a `Report` (`.findings`, `.ok`, `.to_json()`, `.to_html(path)`, a
readable `str()`).

`import signalchain` is cheap (no numpy, torch or pydantic): every name below but the errors and
the version loads on first use, because the pytest plugin imports this package in every pytest
session of anyone who installs signalchain.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import GoldenFileError, PipelineError, SignalchainError, TraceError, UsageError

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports each on first use
    from .api import (
        AuditReport,
        CaptureReport,
        CompareReport,
        DoctorReport,
        ListenReport,
        Report,
        audit,
        capture,
        compare,
        doctor,
        listen,
    )
    from .findings import Finding, Severity
    from .golden import Comparison, Golden, Tolerance, compare_traces, load_golden, save_golden
    from .monitor import Monitor
    from .monitor.watchdog import Watchdog, watchdog
    from .pipeline import Pipeline, StepOutput, load_pipeline
    from .trace import StageRecord, Trace, record, tap

__all__ = [
    "AuditReport",
    "CaptureReport",
    "CompareReport",
    "Comparison",
    "DoctorReport",
    "Finding",
    "Golden",
    "GoldenFileError",
    "ListenReport",
    "Monitor",
    "Pipeline",
    "PipelineError",
    "Report",
    "Severity",
    "SignalchainError",
    "StageRecord",
    "StepOutput",
    "Tolerance",
    "Trace",
    "TraceError",
    "UsageError",
    "Watchdog",
    "__version__",
    "audit",
    "capture",
    "compare",
    "compare_traces",
    "doctor",
    "history",
    "listen",
    "load_golden",
    "load_pipeline",
    "record",
    "save_golden",
    "tap",
    "watchdog",
]

_LAZY = {
    # the commands as functions and their reports (import numpy and, when they run a pipeline, torch)
    # (`audit` is also a subpackage's name: `_Face` below makes that package the callable)
    "doctor": "api", "audit": "audit", "history": "history", "listen": "api", "compare": "api", "capture": "api",
    "Report": "api", "DoctorReport": "api", "AuditReport": "api", "ListenReport": "api", "CompareReport": "api",
    "CaptureReport": "api",
    "Finding": "findings", "Severity": "findings",
    "Comparison": "golden", "Golden": "golden", "Tolerance": "golden", "compare_traces": "golden",
    "load_golden": "golden", "save_golden": "golden",
    "Monitor": "monitor",  # imports torch
    "Pipeline": "pipeline", "StepOutput": "pipeline", "load_pipeline": "pipeline",
    "Watchdog": "monitor.watchdog", "watchdog": "monitor.watchdog",  # imports torch (via monitor/__init__)
    "StageRecord": "trace", "Trace": "trace", "record": "trace", "tap": "trace",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'signalchain' has no attribute {name!r}")
    if name == module:  # a subpackage, made callable as it is bound here
        return importlib.import_module(f"{__name__}.{module}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _CallablePackage(types.ModuleType):
    """The `signalchain.audit` package, callable: `signalchain.audit(path, ...)` is `signalchain.api.audit`.

    Importing a subpackage binds it on its parent under its own name, which would hide a function
    of that name: so the package itself answers the call, and `signalchain.audit.run_audit` (the
    layer-3 package) keeps working beside it.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from . import api

        return getattr(api, self.__name__.rsplit(".", 1)[1])(*args, **kwargs)


#: Subpackages named like a command function, and the call's first argument.
_CALLABLE = {"audit": "paths", "history": "run"}


class _Face(types.ModuleType):
    """This package's module type: it makes a subpackage named like a command function callable."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE and type(value) is types.ModuleType and value.__name__ == f"{__name__}.{name}":
            value.__class__ = _CallablePackage
            call = f"`signalchain.{name}({_CALLABLE[name]}, ...)` is `api.{name}`"
            value.__doc__ = f"{value.__doc__ or ''}\nCalled, {call}.\n"
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
