"""`tap` and `record`: mark stage boundaries in user code; record them only when asked.

Outside `record()`, `tap` returns its value after one context-variable lookup (a few tens of
nanoseconds; see benchmarks/bench_tap.py). Inside, it summarises the value and, when asked, keeps
a private copy. A failure while recording never reaches the user's code (DESIGN §8) unless the
recording is `strict`: it becomes a finding on the trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container, Iterator
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from ..findings import Finding, Severity
from .record import make_record
from .trace import Trace

__all__ = ["tap", "record", "recording", "redirect", "Recording", "Tap"]

T = TypeVar("T")


class Tap(Protocol):
    """What a step receives as `tap`: `(stage, value, /, **meta) -> value` (returns the value it was given)."""

    def __call__(self, stage: str, value: Any, /, **meta: Any) -> Any: ...


class Recording:
    """An active recording: where taps go while `record()` is open."""

    def __init__(self, values: bool | Container[str] = False, stages: Container[str] | None = None,
                 strict: bool = False):
        self.values = values
        self.stages = stages
        self.strict = strict
        self.trace = Trace()

    def _keep(self, stage: str) -> bool:
        if isinstance(self.values, bool):
            return self.values
        return stage in self.values

    def add(self, stage: str, value: Any, meta: dict[str, Any]) -> None:
        if self.stages is not None and stage not in self.stages:
            return
        try:
            name = self.trace.next_name(stage)
            rec = make_record(name, len(self.trace), value, meta, self._keep(stage))
            self.trace.append(rec)
        except Exception as exc:  # never break the run we watch
            if self.strict:
                raise
            self.trace.problems.append(
                Finding(
                    id="trace.tap_failed",
                    severity=Severity.WARNING,
                    stage=stage,
                    message=f"could not record stage {stage!r}: {type(exc).__name__}: {exc}",
                    evidence={"value_type": type(value).__name__},
                    hint="tap values must be tensors, arrays, strings, lists of strings, dicts or scalars",
                    check="trace.recorder",
                )
            )


_ACTIVE: ContextVar[Recording | None] = ContextVar("signalchain_recording", default=None)
_get_active: Callable[[], Recording | None] = _ACTIVE.get


def tap(stage: str, value: T, /, **meta: Any) -> T:
    """Mark a stage boundary. Returns `value` unchanged, so it can wrap an expression.

    `meta` carries what the value alone does not say: `sample_rate=`, `cardinality=`, `lengths=`…
    """
    rec = _get_active()
    if rec is None:
        return value
    rec.add(stage, value, meta)
    return value


def recording() -> Recording | None:
    """The active recording in this context, if any."""
    return _ACTIVE.get()


class _Redirected(Recording):
    """A recording that hands every global `tap` to a function instead of keeping it."""

    def __init__(self, fn: Tap):
        super().__init__()
        self.fn = fn

    def add(self, stage: str, value: Any, meta: dict[str, Any]) -> None:
        self.fn(stage, value, **meta)


@contextlib.contextmanager
def redirect(fn: Tap) -> Iterator[None]:
    """Hand every global `tap` in this context to `fn` (a user's own loop, watched by a probe).

    It takes the place of any open `record()` until it closes; what `fn` returns is not used (the
    global `tap` always returns its value unchanged).
    """
    token = _ACTIVE.set(_Redirected(fn))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def record(values: bool | Container[str] = False, stages: Container[str] | None = None,
           strict: bool = False) -> Iterator[Trace]:
    """Record every `tap` in this context into a `Trace`.

    values: keep full values (True), none (False) or only those of the named stages.
    stages: record only these stages (None: all).
    strict: let a failure to record raise instead of becoming a finding on the trace.
    """
    rec = Recording(values=values, stages=stages, strict=strict)
    token = _ACTIVE.set(rec)
    try:
        yield rec.trace
    except BaseException as exc:
        # Where the step got to: a crash after the last tapped stage is localised there.
        if len(rec.trace) and not hasattr(exc, "signalchain_after_stage"):
            try:
                exc.signalchain_after_stage = rec.trace.names()[-1]  # type: ignore[attr-defined]
            except Exception:
                pass
        raise
    finally:
        _ACTIVE.reset(token)
