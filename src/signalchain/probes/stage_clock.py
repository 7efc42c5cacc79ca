"""`StageClock`: when each tapped stage of a step ended, when the model first ran, and which of the
user's lines the step was running, sampled.

The taps are the boundaries: the work between the previous tap and the tap of stage `s` produced
`s`. The clock records `time.perf_counter_ns()` at each tap (before the user's own tap runs), the
bytes and the largest array's size of the tapped value, and, when given a `reader` of the step
thread's (CPU seconds, run-queue seconds), both: its own time on a CPU, and how long it has so far
waited, runnable, for one (time other processes held the cores, which a judge of shares takes out);
a forward pre-hook on every module of the model that holds a trainable parameter of its own records
the first time the model ran in the step (a frozen codec or text encoder inside the model object is
data preparation, as it is in the user's cost model); with `watch_networks`, global forward hooks
record the span of every outermost call of a module with parameters, in the model or not, whether
all its parameters are frozen, and the size of its largest input (a frozen codec or text encoder
run inside the step, and where a network's own working memory lies); and a sampling thread reads
the main thread's Python stack every `interval` seconds and keeps the innermost frame of the user's
code. The sampler names the lines of work the profiler cannot see
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

__all__ = ["StageClock", "TapMark", "NetSpan", "value_bytes", "largest_numel"]

_THIRD_PARTY = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def largest_numel(value: Any) -> int:
    """Elements of the largest tensor or array in a value (lists, tuples, dicts walked)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return int(value.numel() if isinstance(value, torch.Tensor) else value.size)
    if isinstance(value, (list, tuple)):
        return max((largest_numel(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((largest_numel(v) for v in value.values()), default=0)
    return 0


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
    cpu: float | None = None  # the thread's CPU time so far, seconds (None: not read)
    numel: int = 0  # elements of the largest array in the tapped value


@dataclass
class NetSpan:
    """One outermost call of a module with parameters: when it ran, whether every parameter it holds
    is frozen, and the elements of its largest tensor argument."""

    start: int  # perf_counter_ns
    end: int
    frozen: bool
    numel: int


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
    reader: Callable[[], tuple[float, float | None]] | None = None  # (CPU s, run-queue s), read at each tap
    nets: list[NetSpan] = field(default_factory=list)

    def __post_init__(self) -> None:
        Probe.__init__(self)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_tap(self, stage: str, value: Any) -> None:
        t = time.perf_counter_ns()
        cpu, delay = self.reader() if self.reader is not None else (None, None)
        self.marks.append(TapMark(stage, t, value_bytes(value), delay, cpu, largest_numel(value)))

    def watch_networks(self) -> None:
        """Global forward hooks (removed with the probe's handles): the span of each outermost call of
        a module that holds parameters (see `NetSpan`)."""
        kinds: dict[int, tuple[bool, bool]] = {}  # id(module) -> (has parameters, all frozen)
        depth = [0]
        open_: list[tuple[int, bool, int]] = []

        def kind(m: torch.nn.Module) -> tuple[bool, bool]:
            k = kinds.get(id(m))
            if k is None:
                ps = list(m.parameters())
                k = kinds[id(m)] = (bool(ps), not any(p.requires_grad for p in ps))
            return k

        def pre(module: torch.nn.Module, args: Any) -> None:
            has, frozen = kind(module)
            if not has:
                return
            if depth[0] == 0:
                open_.append((time.perf_counter_ns(), frozen, largest_numel(list(args))))
            depth[0] += 1

        def post(module: torch.nn.Module, args: Any, output: Any) -> None:
            if not kind(module)[0] or depth[0] == 0:
                return
            depth[0] -= 1
            if depth[0] == 0 and open_:
                start, frozen, numel = open_.pop()
                self.nets.append(NetSpan(start, time.perf_counter_ns(), frozen, numel))

        self.hook(torch.nn.modules.module.register_module_forward_pre_hook(pre))
        self.hook(torch.nn.modules.module.register_module_forward_hook(post))

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

    @property
    def sampler_id(self) -> int | None:
        """The sampling thread's native id (its run-queue delay is not the step's), None when stopped."""
        return self._thread.native_id if self._thread is not None else None

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
