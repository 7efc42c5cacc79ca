"""Where a training update's time goes: waiting for the loader against computing, and host syncs.

Two measurements, each on a freshly built model and optimizer, through the pipeline's own update
(`update_step`: its `train_step` when it has one):

1. *Timing*: `budget.perf_steps` updates on consecutive batches of `loader("train")`, each timed
   in two parts with `time.perf_counter`: the wait for the batch (iterator creation included in
   the first, since a DataLoader starts its workers there) and the update itself, followed by
   `torch.cuda.synchronize()` when the parameters live on a GPU so that queued kernels are paid
   by the update that launched them. Python's garbage collector is paused for the loop: a full
   collection lands on a random update and would read as a stall that is the process's own.
   Beside each time, the run-queue delay of the process's threads (Linux `/proc/self/task/*/
   schedstat`): time spent ready to run while other processes held the cores, which the judge
   takes out.
2. *Host reads*: `budget.perf_sync_steps` updates on the golden batch under `HostReads`, which
   counts the ops that make the host wait for a tensor's value, the module calls per update, and
   the file:line of each read, the user's own apart from those inside third-party libraries. This
   run is separate because watching every op slows it.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..pipeline import capabilities
from ..probes.host_reads import HostReads
from ..probes.module_calls import ModuleCalls
from ..records.performance import PerfMeasurement
from ._thread_clock import ThreadClock
from .context import Context
from .optimisation._train import update_step

__all__ = ["measure_performance", "time_updates", "run_queue_delay", "count_host_reads", "host_read_counts",
           "HostReadCounts"]


def _device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def run_queue_delay(thread: int | None = None) -> float | None:
    """Seconds this process's threads have waited, runnable, for a CPU (None where unknown); only
    thread `thread` (a native id: `threading.get_native_id()`) when one is named."""
    if thread is not None:
        try:
            with open(f"/proc/self/task/{thread}/schedstat") as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None
    total = 0
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])  # ns: on-CPU time, run-queue wait, timeslices
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Timer:
    """Wall clock, the loop thread's CPU time and run-queue delay, and the process's threads' delay."""

    def __init__(self) -> None:
        self.clock = ThreadClock()

    def read(self) -> tuple[float, float, float | None, float | None]:
        cpu, queued = self.clock.thread()
        return time.perf_counter(), cpu, queued, self.clock.others()


def _append(rep: PerfMeasurement, loader: bool, r0: tuple, r1: tuple, r2: tuple) -> None:
    """One update's wait (r0 to r1) and compute (r1 to r2) into the record."""
    if loader:
        rep.waits.append(r1[0] - r0[0])
    rep.computes.append(r2[0] - r1[0])
    rep.wait_cpu.append(r1[1] - r0[1])
    rep.compute_cpu.append(r2[1] - r1[1])
    if r0[2] is not None and r1[2] is not None and r2[2] is not None:
        rep.wait_queued.append(r1[2] - r0[2])
        rep.compute_queued.append(r2[2] - r1[2])
        if r0[3] is not None and r1[3] is not None and r2[3] is not None:  # every thread's delay
            rep.wait_delays.append(rep.wait_queued[-1] + max(r1[3] - r0[3], 0.0))
            rep.compute_delays.append(rep.compute_queued[-1] + max(r2[3] - r1[3], 0.0))


def time_updates(ctx: Context, steps: int, reread: int = 0) -> PerfMeasurement:
    """Seconds per update (waits are [] when the pipeline has no loader), the loop thread's CPU time
    and run-queue delay, and every thread's delay; then, with a loader and `reread` > 0, `reread`
    more updates on a fresh iterator of the same loader (a second pass: see `PerfMeasurement`)."""
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    device = _device(model)
    loader = "loader" in capabilities(p)
    batch = None if loader else ctx.batch()
    it: Any = None
    rep = PerfMeasurement(waits=[], computes=[], device=str(device), has_loader=loader)
    timer = _Timer()
    passes = [steps] + ([reread] if loader and reread > 0 else [])
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _sync(device)
        for k, n in enumerate(passes):
            if k:
                rep.reread_from, it = len(rep.computes), None
            for _ in range(n):
                r0 = timer.read()
                if loader:
                    try:
                        if it is None:
                            it = iter(p.loader("train"))  # a DataLoader spawns its workers here
                        batch = next(it)
                    except StopIteration:
                        break  # a short finite loader: judge what it gave
                r1 = timer.read()
                update_step(p, model, optimizer, batch)
                _sync(device)
                _append(rep, loader, r0, r1, timer.read())
        if loader and batch is not None and _pool_queued(rep):
            rep.one_thread = _one_thread_updates(p, model, optimizer, batch, device, timer)
    finally:
        timer.clock.close()
        if was_enabled:
            gc.enable()
    if rep.reread_from is not None and rep.reread_from >= len(rep.computes):
        rep.reread_from = None  # the second pass gave nothing
    n = len(rep.computes)
    if len(rep.compute_queued) != n:
        rep.wait_queued, rep.compute_queued = [], []
    if len(rep.compute_delays) != n:
        rep.wait_delays, rep.compute_delays = [], []
    return rep


#: The other threads' run-queue delay during the updates, as a share of their wall time, from which the
#: updates are timed again on one intra-op thread (the loop thread's own time is then exact).
POOL_QUEUED = 0.1
ONE_THREAD_UPDATES = 5


def _pool_queued(rep: PerfMeasurement) -> bool:
    """The process's other threads queued for CPUs during the updates, with more than one intra-op thread."""
    if torch.get_num_threads() <= 1 or len(rep.compute_delays) != len(rep.computes) or not rep.compute_queued:
        return False
    others = sum(d - q for d, q in zip(rep.compute_delays, rep.compute_queued))
    return others >= POOL_QUEUED * sum(rep.computes)


def _one_thread_updates(p: Any, model: torch.nn.Module, optimizer: Any, batch: Any, device: torch.device,
                        timer: _Timer) -> list[float]:
    """Own seconds of `ONE_THREAD_UPDATES` updates on the last batch with one intra-op thread (after one
    untimed), the thread count restored after; [] where the loop thread's delay is not readable."""
    threads = torch.get_num_threads()
    out: list[float] = []
    try:
        torch.set_num_threads(1)
        update_step(p, model, optimizer, batch)
        for _ in range(ONE_THREAD_UPDATES):
            r0 = timer.read()
            update_step(p, model, optimizer, batch)
            _sync(device)
            r1 = timer.read()
            if r0[2] is None or r1[2] is None:
                return []
            out.append(max((r1[0] - r0[0]) - (r1[2] - r0[2]), 0.0))
    finally:
        torch.set_num_threads(threads)
    return out


@dataclass
class HostReadCounts:
    """Host reads in a few updates: all of them and those inside third-party code, per update."""

    reads: list[int] = field(default_factory=list)
    library: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)  # module forward calls per update
    ops: dict[str, int] = field(default_factory=dict)
    sites: dict[str, int] = field(default_factory=dict)  # the user's lines
    library_sites: dict[str, int] = field(default_factory=dict)
    callers: dict[str, str] = field(default_factory=dict)  # library line -> the user's line into it


def host_read_counts(ctx: Context, steps: int) -> HostReadCounts:
    p = ctx.pipeline
    model = ctx.fresh_model()
    optimizer = p.build_optimizer(model)
    device = _device(model)
    batch = ctx.batch()
    reads = HostReads(accelerator=device.type not in ("cpu", "meta"))
    out = HostReadCounts()
    with ModuleCalls(model).attached_to() as calls:
        for _ in range(steps):
            before, lib_before, calls.count = reads.count, reads.library, 0
            with reads.watch(optimizer):
                update_step(p, model, optimizer, batch)
                _sync(device)
            out.reads.append(reads.count - before)
            out.library.append(reads.library - lib_before)
            out.calls.append(calls.count)
    out.ops = dict(reads.ops.most_common())
    out.sites = dict(reads.sites.most_common(20))
    out.library_sites = dict(reads.library_sites.most_common(20))
    out.callers = {k: reads.callers[k] for k in out.library_sites if k in reads.callers}
    return out


def count_host_reads(ctx: Context, steps: int) -> tuple[list[int], list[int], dict[str, int], dict[str, int]]:
    """(reads per update, module calls per update, reads per op, reads per file:line, the user's and
    the libraries' together)."""
    c = host_read_counts(ctx, steps)
    sites = dict(sorted({**c.sites, **c.library_sites}.items(), key=lambda kv: -kv[1])[:20])
    return c.reads, c.calls, c.ops, sites


def measure_performance(ctx: Context) -> PerfMeasurement:
    rep = time_updates(ctx, ctx.budget.perf_steps, ctx.budget.perf_reread)
    if ctx.budget.perf_sync_steps > 0:
        c = host_read_counts(ctx, ctx.budget.perf_sync_steps)
        rep.syncs, rep.module_calls, rep.sync_ops, rep.sync_sites = c.reads, c.calls, c.ops, c.sites
        rep.library_syncs, rep.library_sites, rep.library_callers = c.library, c.library_sites, c.callers
    return rep
