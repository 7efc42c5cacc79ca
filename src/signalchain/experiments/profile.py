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
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.profiler import profile, record_function

from ..pipeline import capabilities
from ..probes.stage_clock import StageClock
from ..records.profile import BACKWARD, DATA, LOADER, MODEL, OPTIMIZER, OpTime, StageCost, StepProfile
from .context import Context
from .optimisation._train import update_step
from .performance import _device, _sync, run_queue_delay  # the timing family's device, drain and CPU wait

__all__ = ["profile_steps", "measure_profile", "TRACE_ENV"]

TRACE_ENV = "SIGNALCHAIN_TRACE"

_STEP = "signalchain.step"
_MARK = "signalchain.clock"
OFFSET_MARKS = 3  # offset marks after each step (each a few microseconds)
_BACKWARD = "autograd::engine::evaluate_function"
TOP_OPS = 4
#: Where no trainable module of the model was seen running (a functional model, parameters used
#: outside modules), the stage vocabulary's data-preparation names decide (DESIGN §2).
_DATA_STAGES = ("audio.", "caption", "metadata", "crop", "tokens", "mask.padding", "condition.tokens",
                "condition.mask", "condition.dropped", "midi.", "notes.")


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

    tid = threading.get_native_id()  # the thread that runs the step: its run-queue delay is read at each boundary
    delay = (lambda: run_queue_delay(tid)) if run_queue_delay(tid) is not None else None
    clock = StageClock(delay=delay)
    clock.watch_model(model)
    tap = clock.tap_wrapper()
    bounds: list[tuple[int, int, int, int]] = []  # per step: calibration, start, batch ready, end (perf ns)
    delays: list[tuple[float, float, float]] = []  # per step: the run-queue delay at start, ready, end (s)
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
            try:
                for _ in range(steps):
                    c0 = time.perf_counter_ns()
                    with record_function(_STEP):
                        t1 = time.perf_counter_ns()
                        d1 = delay() if delay else None
                        batch = batches.next()
                        t2 = time.perf_counter_ns()
                        d2 = delay() if delay else None
                        update_step(p, model, optimizer, batch, tap)
                        _sync(device)
                        t3 = time.perf_counter_ns()
                        d3 = delay() if delay else None
                    if d1 is not None and d2 is not None and d3 is not None:
                        delays.append((d1, d2, d3))
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
        if was_enabled:
            gc.enable()
    if trace:
        prof.export_chrome_trace(trace)
    rep = _attribute(prof, clock, bounds, marks, device, batches.loader,
                     delays if len(delays) == len(bounds) else None)
    rep.plain_ms = round(plain * 1000, 3)
    rep.wall_ms = [round((end - start) / 1e6, 3) for _, start, _, end in bounds]
    # the step thread's run-queue delay per step: what `busy_ms` took out of each step's wall time
    rep.queued_ms = [round(w - b, 3) for w, b in zip(rep.wall_ms, rep.busy_ms)] if rep.delay_ms is not None else []
    rep.trace_path = trace
    return rep


def _events(prof: Any, offset: int) -> tuple[list[tuple[int, int, str, int, str]], list[tuple[int, int, str]]]:
    """(start, end, name, thread, shapes) of the operators and (time, bytes, device) of the memory
    events, in perf_counter ns, sorted by start."""
    ops, mem = [], []
    for e in prof.kineto_results.events():
        name = e.name()
        if name == "[memory]":
            mem.append((e.start_ns() - offset, int(e.nbytes()), str(e.device_type()).split(".")[-1].lower()))
        elif not e.is_python_function() and name not in (_STEP, _MARK):
            shapes = e.shapes()
            ops.append((e.start_ns() - offset, e.end_ns() - offset, name, e.start_thread_id(),
                        str([list(s) for s in shapes if s]) if shapes else ""))
    ops.sort(key=lambda o: (o[3], o[0], -o[1]))
    mem.sort()
    return ops, mem


def _self_times(ops: list[tuple[int, int, str, int, str]]) -> list[tuple[int, int, str, int, str]]:
    """Each operator with its self time (its duration less its direct children's) as element 3."""
    out = []
    stack: list[list[Any]] = []  # [start, end, name, child time, shapes]
    thread = None

    def close(item: list[Any]) -> None:
        out.append((item[0], item[1], item[2], item[1] - item[0] - item[3], item[4]))

    for start, end, name, tid, shapes in ops:
        if tid != thread:
            while stack:
                close(stack.pop())
            thread = tid
        while stack and stack[-1][1] <= start:
            close(stack.pop())
        if stack:
            stack[-1][3] += end - start
        stack.append([start, end, name, 0, shapes])
    while stack:
        close(stack.pop())
    out.sort()
    return out


def _offset(prof: Any, marks: list[tuple[int, int, int]]) -> int:
    """kineto ns less perf_counter ns, from the offset mark that was entered fastest (the first
    `record_function` of a run costs a millisecond; later ones microseconds)."""
    starts = sorted(e.start_ns() for e in prof.kineto_results.events() if e.name() == _MARK)
    pairs = sorted((t4 - t3, s - (t3 + t4) // 2) for s, (_, t3, t4) in zip(starts, marks))
    return pairs[0][1] if pairs else 0


def _windows(clock: StageClock, ops: list[Any], start: int, ready: int, end: int,
             loader: bool) -> list[tuple[str, str, int, int, int, int]]:
    """(stage, kind, window start, end, value bytes, input bytes) of one step."""
    bw = [o for o in ops if start <= o[0] <= end and o[2].startswith(_BACKWARD)]
    bw_start = min((o[0] for o in bw), default=end + 1)
    bw_end = max((o[1] for o in bw), default=None)
    model_at = min((t for t in clock.model_calls if ready <= t <= end), default=None)
    out: list[tuple[str, str, int, int, int, int]] = []
    if loader:
        out.append(("loader", LOADER, start, ready, 0, 0))
    at, before = ready, 0
    for m in clock.marks:
        if not ready <= m.t_ns <= end or m.t_ns >= bw_start:
            continue
        data = m.t_ns <= model_at if model_at is not None else m.stage.startswith(_DATA_STAGES)
        out.append((m.stage, DATA if data else MODEL, at, m.t_ns, m.nbytes, before))
        at, before = m.t_ns, m.nbytes
    if bw_end is not None:
        out.append(("backward", BACKWARD, at, bw_end, 0, 0))
        at = bw_end
    out.append(("optimizer", OPTIMIZER, at, end, 0, 0))
    return out


def _delay_points(clock: StageClock, start: int, ready: int, end: int,
                  d: tuple[float, float, float] | None) -> list[tuple[int, int]]:
    """(perf ns, run-queue delay so far in ns) at the step's boundaries whose delay was read: its
    start, the batch, each tap, its end. Empty where the delay is not readable."""
    if d is None:
        return []
    pts = [(start, round(d[0] * 1e9)), (ready, round(d[1] * 1e9))]
    pts += [(m.t_ns, round(m.delay * 1e9)) for m in clock.marks if m.delay is not None and ready <= m.t_ns <= end]
    pts.append((end, round(d[2] * 1e9)))
    return sorted(pts)


def _delay_at(pts: list[tuple[int, int]], t: int) -> float:
    """The run-queue delay so far at time t, linear between the boundaries where it was read (the
    backward's end is not one: the wait from the last tap to the step's end is shared by time)."""
    if not pts or t <= pts[0][0]:
        return float(pts[0][1]) if pts else 0.0
    for (t0, d0), (t1, d1) in zip(pts, pts[1:]):
        if t <= t1:
            return d0 + (d1 - d0) * (t - t0) / (t1 - t0) if t1 > t0 else float(d1)
    return float(pts[-1][1])


def _attribute(prof: Any, clock: StageClock, bounds: list[tuple[int, int, int, int]],
               marks: list[tuple[int, int, int]], device: torch.device, loader: bool,
               delays: list[tuple[float, float, float]] | None = None) -> StepProfile:
    offset = _offset(prof, marks)
    raw, mem = _events(prof, offset)
    ops = _self_times(raw)
    dev = "cuda" if device.type == "cuda" else "cpu"
    mem = [m for m in mem if m[2] == dev]
    levels, level = [], 0
    for t, nbytes, _ in mem:
        level += nbytes
        levels.append((t, level))

    def level_at(t: int) -> int:
        val = 0
        for tt, lv in levels:  # small lists; a bisect is not worth it
            if tt > t:
                break
            val = lv
        return val

    acc: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    step_total = 0
    n = max(1, len(bounds))
    step_busy: list[float] = []  # ms per step, its run-queue delay taken out
    step_wait = 0.0
    for i, (_, start, ready, end) in enumerate(bounds):
        step_total += end - start
        pts = _delay_points(clock, start, ready, end, delays[i] if delays else None)
        waited = min(max(_delay_at(pts, end) - _delay_at(pts, start), 0.0), end - start)
        step_busy.append((end - start - waited) / 1e6)
        step_wait += waited
        base = level_at(start)
        for stage, kind, w0, w1, vb, ib in _windows(clock, raw, start, ready, end, loader):
            a = acc.get(stage)
            if a is None:
                a = acc[stage] = {"kind": kind, "ns": 0, "ops": defaultdict(lambda: [0, 0, 0, ""]),
                                  "lines": Counter(), "alloc": 0, "peak": 0, "peak_level": 0, "kept": 0, "vb": vb,
                                  "ib": ib, "spans": defaultdict(list), "delay": 0.0, "busy": [0.0] * n}
                order.append(stage)
            a["ns"] += w1 - w0
            wait = min(max(_delay_at(pts, w1) - _delay_at(pts, w0), 0.0), w1 - w0)
            a["delay"] += wait
            a["busy"][i] += (w1 - w0 - wait) / 1e6
            for s, e, name, self_ns, shapes in ops:
                if w0 <= s < w1:
                    o = a["ops"][name]
                    o[0] += self_ns
                    o[1] += 1
                    if self_ns > o[2]:
                        o[2], o[3] = self_ns, shapes
                    a["spans"][name].append((s, e))
            a["lines"].update(line for t, line in clock.samples if w0 <= t < w1)
            w_base = level_at(w0)
            inside = [(t, lv) for t, lv in levels if w0 <= t < w1]
            a["alloc"] += sum(n for t, n, _ in mem if w0 <= t < w1 and n > 0)
            top = max((lv for _, lv in inside), default=w_base)
            if top - w_base >= a["peak"]:
                a["peak"], a["peak_level"], a["kept"] = top - w_base, top - base, level_at(w1) - w_base
    step_ns = step_total / n
    stages = []
    for stage in order:
        a = acc[stage]
        ranked = sorted(a["ops"].items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
        op_rows = [OpTime(name, round(v[0] / n / 1e6, 3), round(v[1] / n, 2), _site(clock, a["spans"][name]), v[3])
                   for name, v in ranked if v[0] > 0]
        total_lines = sum(a["lines"].values())
        lines = {k: round(v / total_lines, 3) for k, v in a["lines"].most_common(3)} if total_lines else {}
        ms = a["ns"] / n / 1e6
        stages.append(StageCost(stage, a["kind"], round(ms, 3), round(a["ns"] / n / step_ns, 4) if step_ns else 0.0,
                                op_rows, lines, round(sum(v[0] for v in a["ops"].values()) / n / 1e6, 3),
                                int(a["alloc"] / n), int(a["peak"]), int(a["peak_level"]), int(a["kept"]), int(a["vb"]),
                                int(a["ib"]), round(a["delay"] / n / 1e6, 3), [round(b, 3) for b in a["busy"]]))
    source = ("torch.profiler [memory] events of the CUDA caching allocator" if dev == "cuda"
              else "torch.profiler [memory] events of the CPU allocator (torch tensors; numpy arrays are not seen)")
    return StepProfile(stages, round(step_ns / 1e6, 3), len(bounds), str(device), source,
                       "loader" if loader else "golden", busy_ms=[round(b, 3) for b in step_busy],
                       delay_ms=round(step_wait / n / 1e6, 3) if delays else None)


def _site(clock: StageClock, spans: list[tuple[int, int]]) -> str:
    """The user line sampled most often while the operator ran."""
    spans = sorted(spans)
    hits: Counter[str] = Counter()
    for t, line in clock.samples:
        for s, e in spans:
            if s > t:
                break
            if t < e:
                hits[line] += 1
                break
    return hits.most_common(1)[0][0] if hits else ""


def measure_profile(ctx: Context) -> StepProfile:
    """The doctor's step: `budget.profile_steps` profiled updates; a Chrome trace (Perfetto,
    chrome://tracing) is written where the environment names one in `SIGNALCHAIN_TRACE`."""
    return profile_steps(ctx, steps=int(ctx.budget.profile_steps), trace=os.environ.get(TRACE_ENV) or None)
