"""The record the performance experiment fills and `checks/performance.py` judges.

It lives with the checks (layer 3, judge side) so that checks never import experiments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PerfMeasurement"]


@dataclass
class PerfMeasurement:
    """Wall-clock timings of consecutive training updates and the host reads made in a few of them.

    Position 0 is the fresh loader iterator's first batch and the fresh model's first update: both
    pay one-off costs (worker start-up, allocator and kernel warm-up) and are judged apart; so is
    `reread_from`, the second pass's fresh iterator.
    """

    waits: list[float]  # seconds spent in `next(loader)` before each update ([] without a loader)
    computes: list[float]  # seconds of each update: forward, backward, optimizer (device synchronised)
    device: str  # where the parameters live ("cpu", "cuda:0"…)
    has_loader: bool = True
    # Seconds the process's threads were ready to run but waited for a CPU (Linux run-queue delay,
    # summed over threads) during each wait and each update; [] where the OS does not say.
    wait_delays: list[float] = field(default_factory=list)
    compute_delays: list[float] = field(default_factory=list)
    # The thread that runs the loop alone: its run-queue delay and its CPU time in each wait and update
    # ([] where not read; then the judge can only bound the step's share of `*_delays`).
    wait_queued: list[float] = field(default_factory=list)
    compute_queued: list[float] = field(default_factory=list)
    wait_cpu: list[float] = field(default_factory=list)
    compute_cpu: list[float] = field(default_factory=list)
    # Positions from `reread_from` on are a second pass: a fresh iterator of the same loader, whose
    # batches (the same ones, where the loader is seeded) a cache filled by the first pass would serve.
    # None: no second pass.
    reread_from: int | None = None
    # Where the process's pool threads queued for CPUs (a busy machine), a few updates timed again on one
    # intra-op thread: each one's own time (wall less the loop thread's run-queue delay, exact on one
    # thread). [] where not timed (an idle machine, one thread already, or no loader).
    one_thread: list[float] = field(default_factory=list)
    syncs: list[int] = field(default_factory=list)  # host reads of tensor values, per counted update
    module_calls: list[int] = field(default_factory=list)  # module forward calls, per counted update
    sync_ops: dict[str, int] = field(default_factory=dict)  # op -> count, over the counted updates
    sync_sites: dict[str, int] = field(default_factory=dict)  # user file:line -> count, most first
    # Of `syncs`, the reads placed inside third-party code (site-packages, the standard library),
    # per counted update; their lines, and the user's line that called into each ([] / {}: unknown).
    library_syncs: list[int] = field(default_factory=list)
    library_sites: dict[str, int] = field(default_factory=dict)
    library_callers: dict[str, str] = field(default_factory=dict)
