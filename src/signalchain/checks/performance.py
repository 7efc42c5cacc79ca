"""Judge where a training step's time goes: data, one slow worker, restarting workers, stalls, syncs.

Input: a `PerfMeasurement` (per-update loader wait and compute, host reads counted in a few updates).
Timings are noisy (shared cores, other processes), so every rule compares medians and ratios
measured in the same run, asks for an absolute floor as well, and wants a pattern to repeat before
it names a cause. Position 0 (the fresh iterator's first batch, the fresh model's first update)
pays one-off costs and is only used where the rule is about exactly that cost (worker start-up).

Other processes on the machine are taken out first: the time the process's threads spent ready to
run but waiting for a CPU (Linux run-queue delay, `PerfMeasurement.*_delays`) is subtracted, and an
update that spent more than half its time so is dropped (on an oversubscribed machine the sum over
threads can reach the whole wall time). When fewer than half the updates are left, the timings are
not judged (`perf.machine_busy`, info); the sync count, which no load changes, still is.

Rules (all `warning`: slow training is not broken training):

- `perf.data_bound` @ loader: steady-state median wait ≥ 1.0 × median compute and ≥ 20 ms — the
  step spends at least as long waiting for its batch as computing on it.
- `perf.worker_restart` @ loader: the first batch is a *spike* (wait above the steady median by
  ≥ 0.1 s and ≥ 2 × that median) and the same cost (≥ half the first excess) comes back at least
  twice, at evenly spaced positions (gaps equal ± 1, ≥ 3 batches apart). A pool that is torn down
  and re-spawned pays again what a fresh iterator pays once: spawn, imports, opening files.
- `perf.slow_worker` @ loader: for a period k in 2..8 (in-order round robin over k workers), the
  batches at positions ≡ r (mod k), at least 4 of them, wait ≥ max(20 ms, 0.5 × the others'
  median) longer than the others (medians), each of them at least half that much, and every one
  of them longer than every other batch. The smallest such k is reported. (Simulated on i.i.d.
  log-normal waits with σ = 0.25, twice the spread of the reference's: < 0.1 % false alarms over
  6–33 updates; 3 repeats, or one exception among the others, gave 0.4–1 %.)
- `perf.stall` @ runtime: an update (not the first) computing ≥ 5 × the median update and ≥ 0.25 s
  longer; @ loader: a wait not explained by a restart that is ≥ 5 × the median whole step and
  ≥ 0.25 s above the median wait.
- `perf.sync_bound` @ runtime: the median update reads device values on the host, *in the pipeline's
  own code*, ≥ 32 times, or ≥ 8 times and at least once per 4 module calls (a read per module is
  the classic watchdog). Reads are placed at their innermost frame outside torch and signalchain;
  reads whose frame is a third-party library (site-packages, the standard library) are counted
  apart: a user cannot change those lines, so they are `info` (with the line and the user's call
  into the library), and a `warning` only when they alone are ≥ 32 per update *and* at least one per
  module call — a sync in every layer, which makes a GPU run latency-bound whatever the user writes
  and is worth an upgrade or another code path. (These counts are properties of the code, not of
  the reference pipeline: a read costs one device drain on any stack.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from .._units import duration, plural, short_path
from ..findings import Finding
from ..records.performance import PerfMeasurement
from .base import make

__all__ = ["judge_performance", "slow_class", "restart_spikes", "timeline", "SlowClass"]

CHECK = "checks.performance"

BUSY_SHARE = 0.5
DATA_BOUND_RATIO = 1.0
DATA_BOUND_FLOOR_S = 0.02
PERIODS = range(2, 9)
PERIOD_REPEATS = 4
SLOW_FLOOR_S = 0.02
SLOW_SHARE = 0.5
SPIKE_FLOOR_S = 0.1
SPIKE_SHARE = 2.0
RESTART_REPEATS = 2
STALL_RATIO = 5.0
STALL_FLOOR_S = 0.25
SYNC_ABS = 32
SYNC_MIN = 8
SYNC_MODULE_SHARE = 0.25
LIBRARY_MODULE_SHARE = 1.0

Series = Mapping[int, float]  # update position -> seconds; positions dropped as busy are absent


def _ms(s: float) -> float:
    return round(s * 1000.0, 1)


def _series(xs: Series | Sequence[float]) -> dict[int, float]:
    return dict(xs) if isinstance(xs, Mapping) else dict(enumerate(xs))


def _steady(xs: Series) -> list[float]:
    return [v for i, v in sorted(xs.items()) if i >= 1]


def timeline(rep: PerfMeasurement) -> tuple[dict[int, float], dict[int, float], list[int]]:
    """(waits, computes, busy positions): seconds with the CPU run-queue delay taken out."""
    n = len(rep.computes)
    waits: dict[int, float] = {}
    comps: dict[int, float] = {}
    busy: list[int] = []
    for i in range(n):
        w = rep.waits[i] if i < len(rep.waits) else 0.0
        dw = rep.wait_delays[i] if i < len(rep.wait_delays) else 0.0
        dc = rep.compute_delays[i] if i < len(rep.compute_delays) else 0.0
        if dw + dc > BUSY_SHARE * (w + rep.computes[i]):
            busy.append(i)
            continue
        comps[i] = max(rep.computes[i] - dc, 0.0)
        if i < len(rep.waits):
            waits[i] = max(w - dw, 0.0)
    return waits, comps, busy


def restart_spikes(waits: Series | Sequence[float]) -> list[int] | None:
    """Positions of a restart pattern (0 first), or None. See the module docstring."""
    w = _series(waits)
    steady = _steady(w)
    if 0 not in w or len(steady) < 1 + RESTART_REPEATS:
        return None
    base = median(steady)
    limit = max(SPIKE_FLOOR_S, SPIKE_SHARE * base)
    first = w[0] - base
    if first < limit:
        return None
    later = [i for i, v in sorted(w.items()) if i >= 1 and v - base >= max(limit, 0.5 * first)]
    if len(later) < RESTART_REPEATS:
        return None
    spots = [0, *later]
    gaps = [b - a for a, b in zip(spots, spots[1:], strict=False)]
    if min(gaps) < 3 or max(gaps) - min(gaps) > 1:
        return None
    return spots


@dataclass(frozen=True)
class SlowClass:
    period: int  # k: batches come from k workers in turn
    residue: int  # r: the slow worker serves positions ≡ r (mod k)
    positions: list[int]
    slow_median: float  # seconds
    base: float  # the other batches' median wait, seconds

    @property
    def excess(self) -> float:
        return self.slow_median - self.base


def slow_class(waits: Series | Sequence[float], skip: Collection[int] = ()) -> SlowClass | None:
    """The smallest period k and residue r whose batches are consistently slow, or None."""
    w = _series(waits)
    pos = [i for i in sorted(w) if i >= 1 and i not in skip]
    for k in PERIODS:
        best: SlowClass | None = None
        for r in range(k):
            cls = [i for i in pos if i % k == r]
            others = [w[i] for i in pos if i % k != r]
            if len(cls) < PERIOD_REPEATS or len(others) < PERIOD_REPEATS:
                continue
            base = median(others)
            slow = [w[i] for i in cls]
            excess = median(slow) - base
            if excess < max(SLOW_FLOOR_S, SLOW_SHARE * base):
                continue
            if min(slow) - base < 0.5 * excess:
                continue  # not every batch of the class is slow
            if min(slow) <= max(others):
                continue  # the others are not all faster: noise, not one slow worker
            if best is None or excess > best.excess:
                best = SlowClass(k, r, cls, median(slow), base)
        if best is not None:
            return best
    return None


def _data_bound(waits: Series, comps: Series) -> list[Finding]:
    ws, cs = _steady(waits), _steady(comps)
    if not ws or not cs:
        return []
    w, c = median(ws), median(cs)
    if w < DATA_BOUND_FLOOR_S or w < DATA_BOUND_RATIO * c:
        return []
    share = w / (w + c)
    return [make("perf.data_bound", "warning", "loader",
                 f"each update waits {duration(w)} for its batch and computes for {duration(c)} (medians of "
                 f"{len(ws)} updates): {share:.0%} of the time goes to waiting for data", CHECK,
                 hint="the loader cannot keep up: load and decode in DataLoader workers (num_workers > 0, "
                      "prefetch_factor, pin_memory) instead of the training process, cache decoded clips or "
                      "pre-computed codec tokens, and look for a file read or decoded twice per item "
                      "(e.g. a duration probe that decodes); time `next(it)` of the loader alone to confirm",
                 median_wait_ms=_ms(w), median_compute_ms=_ms(c), wait_share=round(share, 3),
                 updates=len(ws))]


def _worker_restart(waits: Series, spots: list[int]) -> Finding:
    base = median(_steady(waits))
    gaps = [b - a for a, b in zip(spots, spots[1:], strict=False)]
    costs = [waits[i] - base for i in spots]
    return make("perf.worker_restart", "warning", "loader",
                f"the loader pays a start-up cost again every ~{round(median(gaps))} batches: the first batch "
                f"waits {duration(waits[0])} and batches {spots[1:]} wait {duration(median(costs[1:]))} more than "
                f"the typical {duration(base)}: the data-loader workers are re-created", CHECK,
                hint="keep the workers alive: `persistent_workers=True`, no `max_tasks_per_child`-style recycling "
                     "or per-epoch DataLoader re-creation, no iterator rebuilt every N steps; if workers die "
                     "(out of memory, a crash caught by a retry) fix that, and move heavy imports and file "
                     "opening out of `worker_init_fn`",
                positions=spots, period=round(median(gaps)), first_wait_ms=_ms(waits[0]),
                restart_cost_ms=[_ms(x) for x in costs], median_wait_ms=_ms(base))


def _slow_worker(cls: SlowClass) -> Finding:
    k, pos = cls.period, cls.positions
    return make("perf.slow_worker", "warning", "loader",
                f"one batch in {k} (positions {pos}) waits {duration(cls.slow_median)} against "
                f"{duration(cls.base)} for the others: one of {k} loader workers is slow and the in-order "
                f"loader makes every step of its turn wait", CHECK,
                hint="find what differs for that worker (its shard, disk or network path, CPU affinity, a "
                     "shared lock); time each worker's `__getitem__` (`torch.utils.data.get_worker_info()`), "
                     "rebalance the shards, or let batches arrive out of order (`in_order=False`) with "
                     "more prefetch",
                period=k, residue=cls.residue, positions=pos, slow_wait_ms=_ms(cls.slow_median),
                other_wait_ms=_ms(cls.base))


def _stalls(waits: Series, comps: Series, explained: set[int]) -> list[Finding]:
    out: list[Finding] = []
    cs = _steady(comps)
    if len(cs) >= 2:
        c = median(cs)
        bad = [i for i, v in sorted(comps.items()) if i >= 1 and v >= STALL_RATIO * c and v - c >= STALL_FLOOR_S]
        if bad:
            worst = max(bad, key=lambda i: comps[i])
            out.append(make("perf.stall", "warning", "runtime",
                            f"update {worst} took {duration(comps[worst])} against a median of {duration(c)} "
                            f"({comps[worst] / c:.0f}×; {len(bad)} of {len(cs)} updates stalled: {bad}); "
                            f"the loader is not the cause: the time is inside the step", CHECK,
                            hint="something blocks inside the update at these steps: a synchronous checkpoint save "
                                 "or upload, an evaluation or logging hook, a blocking `print`/file flush, an "
                                 "allocator retry (`torch.cuda.empty_cache()`); hand checkpoints to a background "
                                 "thread (e.g. `torch.distributed.checkpoint.async_save`) and profile that step "
                                 "with `torch.profiler`",
                            updates=bad, stall_ms=[_ms(comps[i]) for i in bad], median_compute_ms=_ms(c)))
    ws = _steady(waits)
    if len(ws) >= 2 and cs:
        w = median(ws)
        step = median(waits[i] + comps[i] for i in waits if i >= 1 and i in comps)
        bad = [i for i, v in sorted(waits.items()) if i >= 1 and i not in explained
               and v >= STALL_RATIO * step and v - w >= STALL_FLOOR_S]
        if bad:
            worst = max(bad, key=lambda i: waits[i])
            out.append(make("perf.stall", "warning", "loader",
                            f"the loader stalled: batch {worst} took {duration(waits[worst])} to arrive against a "
                            f"median of {duration(w)} ({plural(len(bad), 'stall')}: {bad})", CHECK,
                            hint="one fetch blocked: a network or storage hiccup, a lock, a huge item, a worker "
                                 "timing out; log per-item load times and look at the slow items",
                            batches=bad, stall_ms=[_ms(waits[i]) for i in bad], median_wait_ms=_ms(w)))
    return out


_SYNC_COST = {False: "every read makes the host wait for the device to drain its queue",
              True: "on a GPU every one of them makes the host wait for the device to drain its queue"}


def _where(sites: Mapping[str, int], callers: Mapping[str, str] | None = None) -> str:
    items = list(sites.items())[:5]
    return "; ".join(f"{short_path(k)} (×{v})"
                     + (f", called from {short_path(callers[k])}" if callers and k in callers else "")
                     for k, v in items) or "?"


def _sync_bound(rep: PerfMeasurement) -> list[Finding]:
    """The user's reads are judged; reads inside third-party code are the library's cost (info),
    unless they alone read once per module call on a step that reads at least `SYNC_ABS` times."""
    if not rep.syncs:
        return []
    lib = list(rep.library_syncs) if len(rep.library_syncs) == len(rep.syncs) else [0] * len(rep.syncs)
    total = median(rep.syncs)
    s = median([a - b for a, b in zip(rep.syncs, lib, strict=True)])  # the user's own reads
    ls = median(lib)
    calls = median(rep.module_calls) if rep.module_calls else 0
    out: list[Finding] = []
    if s >= SYNC_ABS or (s >= SYNC_MIN and s >= SYNC_MODULE_SHARE * calls):
        sites = list(rep.sync_sites.items())[:5]
        where = _where(rep.sync_sites)
        also = f"; {ls:g} more inside libraries" if ls else ""
        out.append(make("perf.sync_bound", "warning", "runtime",
                        f"each update reads tensor values on the host {s:g} times in the pipeline's own code (median "
                        f"of {len(rep.syncs)} updates, {calls:g} module calls{also}): "
                        f"{_SYNC_COST[rep.device.startswith('cpu')]}", CHECK,
                        hint=f"most reads come from {where}; keep values on the device (accumulate losses in tensors "
                             f"and call `.item()` once every N steps), remove per-module watchers that call "
                             f"`.item()`/`.tolist()`/`print(tensor)`, avoid `nonzero`, boolean-mask indexing and "
                             f"`.cpu()` inside the step",
                        syncs_per_update=s, library_syncs_per_update=ls, total_syncs_per_update=total,
                        module_calls_per_update=calls, ops=rep.sync_ops, sites=dict(sites), owner="user",
                        device=rep.device))
    if ls:
        dominant = ls >= SYNC_ABS and ls >= LIBRARY_MODULE_SHARE * calls
        where = _where(rep.library_sites, rep.library_callers)
        out.append(
            make(
                "perf.sync_bound",
                "warning" if dominant else "info",
                "runtime",
                f"{ls:g} of the {total:g} host reads per update happen inside third-party code"
                + (
                    f", at least one per module call ({calls:g} calls): on a GPU every layer waits for the device"
                    if dominant
                    else ": the library's own cost, not a line of this pipeline"
                ),
                CHECK,
                hint=f"they come from {where}; the library line cannot be edited here: look for a "
                "newer release or an option that avoids it, or call that code less often (e.g. "
                "precompute codec tokens outside the training step)",
                library_syncs_per_update=ls,
                total_syncs_per_update=total,
                module_calls_per_update=calls,
                sites=dict(list(rep.library_sites.items())[:5]),
                callers={
                    k: v for k, v in rep.library_callers.items() if k in dict(list(rep.library_sites.items())[:5])
                },
                owner="library",
                device=rep.device,
            )
        )
    return out


def _summary(rep: PerfMeasurement, waits: Series, comps: Series, busy: list[int]) -> Finding:
    cs, ws = _steady(comps) or list(comps.values()), _steady(waits) or list(waits.values())
    c = median(cs) if cs else 0.0
    w = median(ws) if ws else None
    s = median(rep.syncs) if rep.syncs else None
    parts = [f"median update {duration(c)} on {rep.device}" if cs else
             f"no update timed on {rep.device} (each waited for a CPU: no median is worth printing)"]
    if w is not None and cs:
        parts.append(f"{duration(w)} waiting for each batch ({w / (w + c) if w + c else 0:.0%} of the time)")
    if s is not None:
        parts.append(f"{s:g} host reads per update")
    note = f", {len(busy)} dropped as the machine was busy" if busy else ""
    return make("perf.summary", "info", None, "; ".join(parts) + f" ({len(rep.computes)} updates timed{note})",
                CHECK, median_compute_ms=_ms(c) if cs else None, median_wait_ms=None if w is None else _ms(w),
                syncs_per_update=s, updates=len(rep.computes), busy_updates=busy, device=rep.device)


def _threads_waiting(delay: float, wall: float) -> str:
    """The run-queue wait summed over threads, said as what it means: it can exceed the wall time
    (two threads queued for a second are 2 s of wait in 1 s), so it is given as threads at a time."""
    if wall <= 0:
        return "no wall time to compare with"
    share = delay / wall
    if share >= 1:
        return f"{share:.1f} threads waiting at any moment, on average"
    return f"a thread waiting {share:.0%} of the time"


def _busy(rep: PerfMeasurement, busy: list[int]) -> Finding:
    delay = sum(rep.wait_delays) + sum(rep.compute_delays)
    wall = sum(rep.waits) + sum(rep.computes)
    return make("perf.machine_busy", "info", "runtime",
                f"timings not judged: {len(busy)} of {plural(len(rep.computes), 'update')} spent over half their "
                f"time waiting for a CPU (in {duration(wall)} of updates the process's threads queued for "
                f"{duration(delay)} together: {_threads_waiting(delay, wall)}): other processes or too many "
                "threads share the cores", CHECK,
                hint="rerun on an idle machine, or with fewer intra-op threads (`torch.set_num_threads`) than "
                     "free cores; the host-sync count above does not depend on load",
                busy_updates=busy, cpu_wait_ms=_ms(delay), wall_ms=_ms(wall))


def judge_performance(rep: PerfMeasurement) -> list[Finding]:
    """Findings about where the time of a training update goes (and one `perf.summary`, info)."""
    if not rep.computes:
        return []
    waits, comps, busy = timeline(rep)
    out: list[Finding] = []
    steady = len(rep.computes) - 1
    if len(_steady(comps)) < max(2, steady / 2):
        out.append(_busy(rep, busy))
    else:
        out += _data_bound(waits, comps)
        spots = restart_spikes(waits) if waits else None
        if spots is not None:
            out.append(_worker_restart(waits, spots))
        explained = set(spots or [])
        cls = slow_class(waits, explained) if waits else None
        if cls is not None:
            out.append(_slow_worker(cls))
            explained |= set(cls.positions)
        out += _stalls(waits, comps, explained)
    out += _sync_bound(rep)
    return [*out, _summary(rep, waits, comps, busy)]
