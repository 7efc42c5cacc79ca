"""The audio family: silence, clipping, scale, channels and rate at every tapped stage of the golden step."""

from __future__ import annotations

from ...checks.audio import check_audio
from ..context import Context
from ..doctor import Family, Step, register

__all__: list[str] = []


def _golden_trace(ctx: Context):  # noqa: ANN202  (a Trace)
    return ctx.golden().trace


register(Family("audio", "Audio at every stage: silence, clipping, scale, channels, rate", steps=(
    Step("golden", measure=_golden_trace, timing="", isolated=False, judges=(check_audio,)),
)))
