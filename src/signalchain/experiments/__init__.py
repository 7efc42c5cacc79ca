"""Layer 3: experiments that drive a `Pipeline` and hand their traces and metrics to checks."""

from .capture import GoldenRun, run_golden

__all__ = ["GoldenRun", "run_golden"]
