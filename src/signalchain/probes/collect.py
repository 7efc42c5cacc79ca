"""`collect`: run one step, keep the values of the named stages, stop the step once it has enough.

The one "grab a tap and stop" of signalchain: the step gets a tap that keeps every tapped value of
the wanted stages (each occurrence, in tap order) and, once `stop_after` is seen, ends the step
from inside the tap (an exception only `collect` catches). Any other exception of the step
propagates unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Container
from typing import Any

import numpy as np
import torch

from .._tensor import is_array, to_numpy
from ..pipeline import Pipeline

__all__ = ["collect", "Collected", "Tapped"]


class _Enough(Exception):
    """Raised from collect's tap once `stop_after` is seen: the rest of the step is not needed."""


@dataclasses.dataclass
class Tapped:
    """One tapped value: its stage, the value (a numpy copy with `copy=True`), the tap's meta, and
    the array's own dtype (`copy=True` only: a bfloat16 tensor's copy is float32)."""

    stage: str
    value: Any
    meta: dict[str, Any]
    dtype: Any = None


@dataclasses.dataclass
class Collected:
    """What `collect` kept. `out`: the step's return value, None when the step was stopped."""

    taps: list[Tapped] = dataclasses.field(default_factory=list)
    out: Any = None
    stopped: bool = False

    def first(self, stage: str) -> Tapped | None:
        return next((t for t in self.taps if t.stage == stage), None)

    def __contains__(self, stage: str) -> bool:
        return self.first(stage) is not None

    def __len__(self) -> int:
        return len(self.taps)


StageTest = Callable[[str], bool]
StopTest = Callable[[str, Collected], bool]


def _stage_test(stages: Container[str] | StageTest | None) -> StageTest:
    if stages is None:
        return lambda stage: True
    if callable(stages):
        return stages  # type: ignore[return-value]
    return lambda stage: stage in stages  # type: ignore[operator]


def _stop_test(stop_after: str | Container[str] | StopTest | None) -> StopTest:
    if stop_after is None:
        return lambda stage, got: False
    if isinstance(stop_after, str):
        return lambda stage, got: stage == stop_after
    if callable(stop_after):
        return stop_after  # type: ignore[return-value]
    return lambda stage, got: stage in stop_after  # type: ignore[operator]


def collect(pipeline: Pipeline, model: Any, batch: Any, stages: Container[str] | StageTest | None,
            stop_after: str | Container[str] | StopTest | None = None, *, first_only: bool = False,
            copy: bool = False, no_grad: bool = False) -> Collected:
    """Run `pipeline.step(model, batch, tap)` once and return the tapped values of `stages`.

    stages: the stage names to keep (a container or a predicate on the name; None: all).
    stop_after: a stage name, several, or a predicate `(stage, collected so far) -> bool` asked
        after each tap (once its value is kept): true ends the step there (`stopped`, no `out`).
    first_only: keep only the first value of each stage.
    copy: keep arrays as numpy copies made at tap time (later in-place edits do not reach them).
    no_grad: run the step under `torch.no_grad()`.
    """
    keep, stop = _stage_test(stages), _stop_test(stop_after)
    got = Collected()
    seen: set[str] = set()

    def collecting_tap(stage: str, value: Any, /, **meta: Any) -> Any:
        if keep(stage) and not (first_only and stage in seen):
            seen.add(stage)
            if copy and is_array(value):
                got.taps.append(Tapped(stage, np.array(to_numpy(value), copy=True), meta,
                                       getattr(value, "dtype", None)))
            else:
                got.taps.append(Tapped(stage, value, meta))
        if stop(stage, got):
            raise _Enough
        return value

    with torch.no_grad() if no_grad else contextlib.nullcontext():
        try:
            got.out = pipeline.step(model, batch, collecting_tap)
        except _Enough:
            got.stopped = True
    return got
