"""signalchain: find the earliest stage where a music model's training goes wrong, and listen to it.

Public API (docs/architecture.md, "Layers": layer 5). User code needs only `tap` and, for the command line, an object
honouring `Pipeline`.

`import signalchain` is cheap (no numpy, torch or pydantic): every name below but the errors and
the version loads on first use, because the pytest plugin imports this package in every pytest
session of anyone who installs signalchain.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import GoldenFileError, PipelineError, SignalchainError, TraceError, UsageError

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports each on first use
    from .findings import Finding, Severity
    from .golden import Comparison, Golden, Tolerance, compare_traces, load_golden, save_golden
    from .monitor import Monitor
    from .monitor.watchdog import Watchdog, watchdog
    from .pipeline import Pipeline, StepOutput, load_pipeline
    from .trace import StageRecord, Trace, record, tap

__all__ = [
    "Comparison",
    "Finding",
    "Golden",
    "GoldenFileError",
    "Monitor",
    "Pipeline",
    "PipelineError",
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
    "compare_traces",
    "load_golden",
    "load_pipeline",
    "record",
    "save_golden",
    "tap",
    "watchdog",
]

_LAZY = {
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
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
