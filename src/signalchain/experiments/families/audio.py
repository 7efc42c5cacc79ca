"""The audio family: silence, clipping, scale, channels and rate at every tapped stage of the golden step."""

from __future__ import annotations

from ...checks.audio import judge_audio
from ...trace import Trace
from ..context import Context
from ..doctor import Family, Step, register

__all__ = ["golden_trace"]


def golden_trace(ctx: Context) -> Trace:
    """The golden step's trace (recorded once per run)."""
    return ctx.golden().trace


register(Family("audio", "Audio at every stage: silence, clipping, scale, channels, rate", steps=(
    Step("golden", measure=golden_trace, timing="", isolated=False, judges=(judge_audio,)),
)))
