"""A profiled replay of a few training steps, attributed to the pipeline's own stages.

A fresh model and optimizer from the pipeline run `warmup` plain updates (allocator, kernels and
caches warm), one more plain update timed for the overhead, then `steps` updates under
the PyTorch profiler (`profile_memory=True, record_shapes=True`; CPU, and CUDA where the
model lives there), through the pipeline's own update (`update_step`: its `train_step` when it
has one). Batches come from `loader("train")` when the pipeline has one (the wait for each is the
`loader` window), else the golden batch.

The profiler is kineto's, entered through `torch.autograd.profiler.profile`, the object that
`torch.profiler.profile` wraps: the wrapper imports `torch._inductor` on entry (seconds, once per
process), which the doctor would pay for nothing.

The `StageClock` probe marks each tap, the model's first trainable module call and a sample of the
user's lines; the profiler's events (operators, `[memory]` allocations and frees) are put on the
same clock through a `record_function` mark after each step and bucketed into windows: each tap closes
the window of its stage, the autograd engine's last event closes `backward` (taps made after the
backward started, like `grad.norm`, are not boundaries), and `optimizer` runs to the end of the
update (clipping, the step, the scheduler, zero_grad). Memory is the profiler's own: its `[memory]`
events on the device the parameters live on (the CPU allocator's bytes here; the CUDA caching
allocator's on a GPU). This runs on a replay, never in the user's loop.

A busy machine stretches whichever window other processes happened to preempt. The step thread's
run-queue delay (Linux schedstat, the performance family's `run_queue_delay`) is read at the step's
start, its batch, each tap and its end; each window's share of it (linear between those readings:
the backward's end is not one) is kept per step beside the window, so that the judge can take it
out and ask for a share on every step (`StageCost.busy_ms`, `delay_ms`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.profiler import profile, record_function

from ..pipeline import capabilities
from ..probes.stage_clock import StageClock
from ..records.profile import StepProfile
from ._profile_attribute import MARK as _MARK
from ._profile_attribute import STEP as _STEP
from ._profile_attribute import StepClocks, attribute
from ._profile_attribute import _windows as _windows  # noqa: F401  (the tests read the windows of a step)
from ._thread_clock import ThreadClock
from .context import Context
from .optimisation._train import update_step
from .performance import _device, _sync  # the timing family's device and drain

__all__ = ["profile_steps", "measure_profile", "TRACE_ENV", "POOL_QUEUED"]

TRACE_ENV = "SIGNALCHAIN_TRACE"

POOL_QUEUED = 0.1  # the other threads' run-queue share of the replay's wall time that calls for one thread
OFFSET_MARKS = 3  # offset marks after each step (each a few microseconds)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (C++ logging that Python cannot filter)."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (an embedded interpreter): nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _Batches:
    """The next batch: the loader's (its wait timed) or the golden batch."""

    def __init__(self, ctx: Context):
        self.pipeline = ctx.pipeline
        self.loader = "loader" in capabilities(ctx.pipeline)
        self.golden = None if self.loader else ctx.batch()
        self.it: Any = None

    def next(self) -> Any:
        if not self.loader:
            return self.golden
        if self.it is None:
            self.it = iter(self.pipeline.loader("train"))
        try:
            return next(self.it)
        except StopIteration:  # a short finite loader: start another epoch
            self.it = iter(self.pipeline.loader("train"))
            return next(self.it)


def profile_steps(ctx: Context, steps: int = 2, warmup: int = 1, trace: str | None = None) -> StepProfile:
    """Profile `steps` updates after `warmup` plain ones and one timed plain one (see the module doc)."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    device = _device(model)
    batches = _Batches(ctx)
    for _ in range(max(1, warmup)):
        update_step(p, model, optimizer, batches.next())
    _sync(device)
    gc.collect()
    batch = batches.next()
    t0 = time.perf_counter()
    update_step(p, model, optimizer, batch)  # the update alone, for the overhead
    _sync(device)
    plain = time.perf_counter() - t0

    threads = ThreadClock()  # the thread that runs the step: its CPU time and run-queue delay at each boundary
    clock = StageClock(reader=threads.thread)
    clock.watch_model(model)
    clock.watch_networks()
    tap = clock.tap_wrapper()
    bounds: list[tuple[int, int, int, int]] = []  # per step: calibration, start, batch ready, end (perf ns)
    clocks = StepClocks()
    marks: list[tuple[int, int, int]] = []  # per offset mark: step start, before and after entering it
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        prof = profile(use_kineto=True, profile_memory=True, record_shapes=True,
                       use_device="cuda" if device.type == "cuda" else None)
        with clock.attached():
            with _quiet_stderr():  # kineto prints "profiler_start"/"profiler_stop" lines to fd 2
                prof.__enter__()
            clock.start_sampling()
            if clock.sampler_id is not None:
                threads.exclude.add(clock.sampler_id)  # the sampler's own wait does not hold the step up
            try:
                for _ in range(steps):
                    c0 = time.perf_counter_ns()
                    with record_function(_STEP):
                        o1 = threads.others()
                        t1 = time.perf_counter_ns()
                        r1 = threads.thread()
                        batch = batches.next()
                        t2 = time.perf_counter_ns()
                        r2 = threads.thread()
                        update_step(p, model, optimizer, batch, tap)
                        _sync(device)
                        t3 = time.perf_counter_ns()
                        r3 = threads.thread()
                        o3 = threads.others()
                    clocks.cpu.append((r1[0], r2[0], r3[0]))
                    if r1[1] is not None and r2[1] is not None and r3[1] is not None:
                        clocks.queued.append((r1[1], r2[1], r3[1]))
                    if o1 is not None and o3 is not None:
                        clocks.others.append((o1, o3))
                    for _ in range(OFFSET_MARKS):  # the clocks' offset, read where entering is cheap; the
                        t_in = time.perf_counter_ns()  # tightest bracket of all counts, so one preempted
                        with record_function(_MARK):  # entry (a busy machine) cannot shift it
                            t4 = time.perf_counter_ns()
                        marks.append((c0, t_in, t4))
                    bounds.append(((c0 + t1) // 2, t1, t2, t3))
            finally:
                clock.stop_sampling()
                with _quiet_stderr():
                    prof.__exit__(None, None, None)
    finally:
        threads.close()
        if was_enabled:
            gc.enable()
    if trace:
        prof.export_chrome_trace(trace)
    rep = attribute(prof, clock, bounds, marks, device, batches.loader, clocks)
    rep.plain_ms = round(plain * 1000, 3)
    rep.wall_ms = [round((end - start) / 1e6, 3) for _, start, _, end in bounds]
    # the step thread's run-queue delay per step: what `busy_ms` took out of each step's wall time
    rep.queued_ms = [round(w - b, 3) for w, b in zip(rep.wall_ms, rep.busy_ms)] if rep.delay_ms is not None else []
    rep.trace_path = trace
    rep.threads = torch.get_num_threads()
    return rep


def _pool_queued(rep: StepProfile) -> float | None:
    """The share of the replay's wall time the process's other threads queued, with more than one
    intra-op thread (None with one, or where it was not read)."""
    if rep.threads <= 1 or not rep.others_ms or len(rep.others_ms) != len(rep.wall_ms) or sum(rep.wall_ms) <= 0:
        return None
    return sum(rep.others_ms) / sum(rep.wall_ms)


def measure_profile(ctx: Context) -> StepProfile:
    """The doctor's step: `budget.profile_steps` profiled updates; a Chrome trace (Perfetto,
    chrome://tracing) is written where the environment names one in `SIGNALCHAIN_TRACE`.

    Where the intra-op pool threads queued `POOL_QUEUED` of the replay's wall time or more, the step
    also waited for them in ways no run-queue reading shows (a queued pool thread holds up the region
    its step thread spins or sleeps in), and the shares lean towards whichever stages ran parallel
    regions while other processes held the cores. The replay then runs again on one intra-op thread
    (restored after), where the step thread's own time is the step's: measured on the reference beside
    two busy processes, the largest stage share moved 4 points from the idle one-thread replay, against
    21 at two threads. The record says so (`threads`, `pool_queued_share`) and the summary with it.
    """
    steps, trace = int(ctx.budget.profile_steps), os.environ.get(TRACE_ENV) or None
    rep = profile_steps(ctx, steps=steps, trace=trace)
    share = _pool_queued(rep)
    if share is None or share < POOL_QUEUED:
        return rep
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        again = profile_steps(ctx, steps=steps, trace=trace)
    finally:
        torch.set_num_threads(threads)
    again.threads, again.pool_queued_share = 1, round(share, 4)
    return again
