"""Run one pipeline step on its golden batch under a recording: the trace a golden batch stores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..pipeline import StepOutput, as_step_output, capabilities
from ..trace import Trace, record, tap
from ._outputs import call_decode
from ._seed import seed_everything

__all__ = ["GoldenRun", "run_golden"]


@dataclass
class GoldenRun:
    trace: Trace
    output: StepOutput
    model: Any
    batch: Any
    decode_error: str | None = None  # what decode raised on the golden tokens (no audio.decoded then)


def run_golden(pipeline: Any, seed: int = 0, *, values: bool = True, decode: bool = True) -> GoldenRun:
    """Build the model and golden batch for `seed`, record one step, and decode the tokens if possible.

    Every random source is seeded before each phase, so the same code gives the same trace.
    """
    seed_everything(seed)
    batch = pipeline.golden_batch(seed)
    seed_everything(seed)
    model = pipeline.build_model(seed)
    seed_everything(seed)
    decode_error = None
    with record(values=values) as trace:
        output = as_step_output(pipeline.step(model, batch, tap))
        if "loss" not in trace:
            tap("loss", output.loss)
        if decode and "decode" in capabilities(pipeline) and "tokens" in trace and "audio.decoded" not in trace:
            tokens = trace["tokens"].value if values else None
            if tokens is not None:
                try:
                    audio = call_decode(pipeline, tokens, model)
                except Exception as exc:  # the output family probes the decoder and says why
                    decode_error = f"{type(exc).__name__}: {exc}"
                else:
                    tap("audio.decoded", audio, sample_rate=getattr(pipeline, "sample_rate", None), source="tokens")
    return GoldenRun(trace=trace, output=output, model=model, batch=batch, decode_error=decode_error)
