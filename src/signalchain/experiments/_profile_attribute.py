"""How a profiled replay's events become stages: the profiler's operators and memory events, the
stage clock's taps, network spans and samples, and the step thread's clocks, bucketed into each
stage's window (see `experiments/profile.py` for what is measured and why)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from ..probes.stage_clock import NetSpan, StageClock
from ..records.profile import BACKWARD, DATA, LOADER, MODEL, OPTIMIZER, OpTime, StageCost, StepProfile

__all__ = ["StepClocks", "attribute", "STEP", "MARK"]

STEP = _STEP = "signalchain.step"
MARK = _MARK = "signalchain.clock"
_BACKWARD = "autograd::engine::evaluate_function"
TOP_OPS = 4
#: Where no trainable module of the model was seen running (a functional model, parameters used
#: outside modules), the stage vocabulary's data-preparation names decide (DESIGN §2).
_DATA_STAGES = ("audio.", "caption", "metadata", "crop", "tokens", "mask.padding", "condition.tokens",
                "condition.mask", "condition.dropped", "midi.", "notes.")


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
             loader: bool) -> list[tuple[str, str, int, int, int, int, int]]:
    """(stage, kind, window start, end, value bytes, input bytes, input's largest array elements) of one step."""
    bw = [o for o in ops if start <= o[0] <= end and o[2].startswith(_BACKWARD)]
    bw_start = min((o[0] for o in bw), default=end + 1)
    bw_end = max((o[1] for o in bw), default=None)
    model_at = min((t for t in clock.model_calls if ready <= t <= end), default=None)
    out: list[tuple[str, str, int, int, int, int, int]] = []
    if loader:
        out.append(("loader", LOADER, start, ready, 0, 0, 0))
    at, before, numel = ready, 0, 0
    for m in clock.marks:
        if not ready <= m.t_ns <= end or m.t_ns >= bw_start:
            continue
        data = m.t_ns <= model_at if model_at is not None else m.stage.startswith(_DATA_STAGES)
        out.append((m.stage, DATA if data else MODEL, at, m.t_ns, m.nbytes, before, numel))
        at, before, numel = m.t_ns, m.nbytes, m.numel
    if bw_end is not None:
        out.append(("backward", BACKWARD, at, bw_end, 0, 0, 0))
        at = bw_end
    out.append(("optimizer", OPTIMIZER, at, end, 0, 0, 0))
    return out


def _points(clock: StageClock, start: int, ready: int, end: int, d: tuple[float, float, float] | None,
            attr: str = "delay") -> list[tuple[int, int]]:
    """(perf ns, the step thread's `attr` so far in ns: its run-queue delay, or its CPU time with
    `attr="cpu"`) at the step's boundaries where it was read: its start, the batch, each tap, its
    end. Empty where it is not readable."""
    if d is None:
        return []
    pts = [(start, round(d[0] * 1e9)), (ready, round(d[1] * 1e9))]
    pts += [(m.t_ns, round(getattr(m, attr) * 1e9)) for m in clock.marks
            if getattr(m, attr) is not None and ready <= m.t_ns <= end]
    pts.append((end, round(d[2] * 1e9)))
    return sorted(pts)


_delay_points = _points


def _delay_at(pts: list[tuple[int, int]], t: int) -> float:
    """The run-queue delay so far at time t, linear between the boundaries where it was read (the
    backward's end is not one: the wait from the last tap to the step's end is shared by time)."""
    if not pts or t <= pts[0][0]:
        return float(pts[0][1]) if pts else 0.0
    for (t0, d0), (t1, d1) in zip(pts, pts[1:]):
        if t <= t1:
            return d0 + (d1 - d0) * (t - t0) / (t1 - t0) if t1 > t0 else float(d1)
    return float(pts[-1][1])


def _overlap(spans: list[NetSpan], w0: int, w1: int, frozen: bool | None = None) -> int:
    """ns of the window [w0, w1) inside the spans (only frozen ones, or only trainable, where asked)."""
    return sum(max(0, min(s.end, w1) - max(s.start, w0)) for s in spans if frozen is None or s.frozen == frozen)


@dataclass
class StepClocks:
    """Per profiled step, what the step thread's clock said at its start, batch and end (seconds):
    run-queue delay and CPU time; and the process's other threads' run-queue delay at start and end."""

    queued: list[tuple[float, float, float]] = field(default_factory=list)
    cpu: list[tuple[float, float, float]] = field(default_factory=list)
    others: list[tuple[float, float]] = field(default_factory=list)


def _attribute(prof: Any, clock: StageClock, bounds: list[tuple[int, int, int, int]],
               marks: list[tuple[int, int, int]], device: torch.device, loader: bool,
               clocks: StepClocks | None = None) -> StepProfile:
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

    n = max(1, len(bounds))
    clocks = clocks or StepClocks()
    queued = clocks.queued if len(clocks.queued) == len(bounds) else None
    cpus = clocks.cpu if len(clocks.cpu) == len(bounds) else None
    others = clocks.others if len(clocks.others) == len(bounds) else None
    acc: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    step_total = 0
    step_busy: list[float] = []  # ms per step, its run-queue delay taken out
    step_cpu: list[float] = []
    step_wait = 0.0
    for i, (_, start, ready, end) in enumerate(bounds):
        step_total += end - start
        pts = _points(clock, start, ready, end, queued[i] if queued else None)
        cpts = _points(clock, start, ready, end, cpus[i] if cpus else None, "cpu")
        waited = min(max(_delay_at(pts, end) - _delay_at(pts, start), 0.0), end - start)
        step_busy.append((end - start - waited) / 1e6)
        step_cpu.append(max(_delay_at(cpts, end) - _delay_at(cpts, start), 0.0) / 1e6)
        step_wait += waited
        base = level_at(start)
        nets = [s for s in clock.nets if s.end >= start and s.start <= end]
        for stage, kind, w0, w1, vb, ib, inum in _windows(clock, raw, start, ready, end, loader):
            a = acc.get(stage)
            if a is None:
                a = acc[stage] = {"kind": kind, "ns": 0, "ops": defaultdict(lambda: [0, 0, 0, ""]),
                                  "lines": Counter(), "alloc": 0, "peak": 0, "peak_level": 0, "kept": 0, "vb": vb,
                                  "ib": ib, "inum": inum, "spans": defaultdict(list), "delay": 0.0,
                                  "busy": [0.0] * n, "cpu": 0.0, "net": 0, "frozen": 0, "fnum": 0, "in_net": False}
                order.append(stage)
            a["ns"] += w1 - w0
            wait = min(max(_delay_at(pts, w1) - _delay_at(pts, w0), 0.0), w1 - w0)
            a["delay"] += wait
            a["busy"][i] += (w1 - w0 - wait) / 1e6
            a["cpu"] += max(_delay_at(cpts, w1) - _delay_at(cpts, w0), 0.0)
            a["net"] += _overlap(nets, w0, w1)
            a["frozen"] += _overlap(nets, w0, w1, frozen=True)
            a["fnum"] = max([a["fnum"]] + [s.numel for s in nets if s.frozen and w0 <= s.start < w1])
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
            t_top, top = max(inside, key=lambda x: x[1], default=(w0, w_base))
            if top - w_base >= a["peak"]:
                a["peak"], a["peak_level"], a["kept"] = top - w_base, top - base, level_at(w1) - w_base
                a["in_net"] = top > w_base and any(s.start <= t_top <= s.end for s in nets)
    step_ns = step_total / n
    busy_total = sum(step_busy)
    stages = []
    for stage in order:
        a = acc[stage]
        ranked = sorted(a["ops"].items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
        op_rows = [OpTime(name, round(v[0] / n / 1e6, 3), round(v[1] / n, 2), _site(clock, a["spans"][name]), v[3])
                   for name, v in ranked if v[0] > 0]
        total_lines = sum(a["lines"].values())
        lines = {k: round(v / total_lines, 3) for k, v in a["lines"].most_common(3)} if total_lines else {}
        ms = a["ns"] / n / 1e6
        wall_share = round(a["ns"] / n / step_ns, 4) if step_ns else 0.0
        share = round(sum(a["busy"]) / busy_total, 4) if busy_total > 0 else wall_share
        stages.append(StageCost(stage, a["kind"], round(ms, 3), share,
                                op_rows, lines, round(sum(v[0] for v in a["ops"].values()) / n / 1e6, 3),
                                int(a["alloc"] / n), int(a["peak"]), int(a["peak_level"]), int(a["kept"]), int(a["vb"]),
                                int(a["ib"]), round(a["delay"] / n / 1e6, 3), [round(b, 3) for b in a["busy"]],
                                cpu_ms=round(a["cpu"] / n / 1e6, 3) if cpus else 0.0, wall_share=wall_share,
                                net_ms=round(a["net"] / n / 1e6, 3), frozen_ms=round(a["frozen"] / n / 1e6, 3),
                                frozen_numel=int(a["fnum"]), input_numel=int(a["inum"]), peak_in_net=bool(a["in_net"])))
    source = ("torch.profiler [memory] events of the CUDA caching allocator" if dev == "cuda"
              else "torch.profiler [memory] events of the CPU allocator (torch tensors; numpy arrays are not seen)")
    return StepProfile(stages, round(step_ns / 1e6, 3), len(bounds), str(device), source,
                       "loader" if loader else "golden", busy_ms=[round(b, 3) for b in step_busy],
                       delay_ms=round(step_wait / n / 1e6, 3) if queued else None,
                       others_ms=[round(max(b - a, 0.0) * 1000, 3) for a, b in others] if others else [],
                       cpu_ms=[round(c, 3) for c in step_cpu] if cpus else [])


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


attribute = _attribute
