"""Run one pipeline step on its golden batch under a recording: the trace a golden batch stores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..pipeline import StepOutput, as_step_output, capabilities
from ..trace import Trace, record, tap
from ._seed import seed_everything

__all__ = ["GoldenRun", "run_golden"]


@dataclass
class GoldenRun:
    trace: Trace
    output: StepOutput
    model: Any
    batch: Any


def run_golden(pipeline: Any, seed: int = 0, *, values: bool = True, decode: bool = True) -> GoldenRun:
    """Build the model and golden batch for `seed`, record one step, and decode the tokens if possible.

    Every random source is seeded before each phase, so the same code gives the same trace.
    """
    seed_everything(seed)
    batch = pipeline.golden_batch(seed)
    seed_everything(seed)
    model = pipeline.build_model(seed)
    seed_everything(seed)
    with record(values=values) as trace:
        output = as_step_output(pipeline.step(model, batch, tap))
        if "loss" not in trace:
            tap("loss", output.loss)
        if decode and "decode" in capabilities(pipeline) and "tokens" in trace and "audio.decoded" not in trace:
            tokens = trace["tokens"].value if values else None
            if tokens is not None:
                audio = pipeline.decode(tokens)
                tap("audio.decoded", audio, sample_rate=getattr(pipeline, "sample_rate", None), source="tokens")
    return GoldenRun(trace=trace, output=output, model=model, batch=batch)
