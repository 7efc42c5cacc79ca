"""`StageClock`: when each tapped stage of a step ended, when the model first ran, and which of the
user's lines the step was running, sampled.

The taps are the boundaries: the work between the previous tap and the tap of stage `s` produced
`s`. The clock records `time.perf_counter_ns()` at each tap (before the user's own tap runs) and the
bytes of the tapped value, and, when given a `delay` reader, how long the step's thread has so far
waited, runnable, for a CPU (the run-queue delay: time other processes held the cores, which a
judge of shares takes out); a forward pre-hook on every module of the model that holds a trainable
parameter of its own records the first time the model ran in the step (a frozen codec or text
encoder inside the model object is data preparation, as it is in the user's cost model); and a
sampling thread reads the main thread's Python stack every `interval` seconds and keeps the
innermost frame of the user's code. The sampler names the lines of work the profiler cannot see
(numpy, Python loops) and the call sites of the operators it can; it costs one stack walk per
sample and nothing per op (the profiler's own `with_stack` traces every Python call and made a
Python-heavy step several times slower here).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .base import Probe
from .frames import code_frames

__all__ = ["StageClock", "TapMark", "value_bytes"]

_THIRD_PARTY = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def value_bytes(value: Any) -> int:
    """Bytes held by the tensors and arrays in a tapped value (lists, tuples, dicts walked)."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sum(value_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(value_bytes(v) for v in value.values())
    return 0


@dataclass
class TapMark:
    stage: str
    t_ns: int  # perf_counter_ns when the tap was called
    nbytes: int  # of the tapped value
    delay: float | None = None  # the thread's run-queue delay so far, seconds (None: not read)


def _user_line(frame: Any) -> str | None:
    """The innermost frame of the user's own code (third-party libraries skipped when the user's
    code called them), as "path:line"."""
    first = None
    for path, line in code_frames(frame):
        if first is None:
            first = f"{path}:{line}"
        if not any(p in path for p in _THIRD_PARTY):
            return f"{path}:{line}"
    return first


@dataclass
class StageClock(Probe):
    """Tap times, the model's first call and sampled user lines of the steps run inside `watching`."""

    interval: float = 0.001
    marks: list[TapMark] = field(default_factory=list)
    model_calls: list[int] = field(default_factory=list)  # perf_counter_ns of each trainable module call
    samples: list[tuple[int, str]] = field(default_factory=list)  # (perf_counter_ns, user line)
    delay: Callable[[], float | None] | None = None  # the run-queue delay reader, read at each tap

    def __post_init__(self) -> None:
        Probe.__init__(self)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_tap(self, stage: str, value: Any) -> None:
        t = time.perf_counter_ns()
        self.marks.append(TapMark(stage, t, value_bytes(value), self.delay() if self.delay is not None else None))

    def watch_model(self, model: torch.nn.Module) -> None:
        calls = self.model_calls

        def pre(module: torch.nn.Module, args: Any) -> None:
            calls.append(time.perf_counter_ns())

        for m in model.modules():
            if any(p.requires_grad for p in m.parameters(recurse=False)):
                self.hook(m.register_forward_pre_hook(pre))

    # ---- the sampler ----------------------------------------------------------------------------

    def _sample(self, ident: int) -> None:
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(ident)
            if frame is None:
                continue
            line = _user_line(frame)
            del frame  # a frame held here would keep the step's locals (and their memory) alive
            if line is not None:
                self.samples.append((time.perf_counter_ns(), line))

    def start_sampling(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, args=(threading.get_ident(),), daemon=True,
                                        name="signalchain-stage-sampler")
        self._thread.start()

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
