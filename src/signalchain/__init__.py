"""signalchain: find the earliest stage where a music model's training goes wrong, and listen to it.

Public API (DESIGN §1, layer 5). User code needs only `tap` and, for the command line, an object
honouring `Pipeline`.
"""

from ._version import __version__
from .errors import GoldenFileError, PipelineError, SignalchainError, TraceError, UsageError
from .findings import Finding, Severity
from .golden import Comparison, Golden, Tolerance, compare_traces, load_golden, save_golden
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
    "__version__",
    "compare_traces",
    "load_golden",
    "load_pipeline",
    "record",
    "save_golden",
    "tap",
]


def __getattr__(name: str) -> object:  # `Monitor` imports torch: load it on first use, keep `import signalchain` light
    if name == "Monitor":
        from .monitor import Monitor

        return Monitor
    raise AttributeError(f"module 'signalchain' has no attribute {name!r}")
