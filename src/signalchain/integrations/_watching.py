"""Phases, the stall watchdog and the rank watch of a live session.

The trainer hooks see where phases begin (a step begins: forward; a training forward returned:
backward; the optimizer is about to run: optimizer; a step ended: loader, until the next batch is
in), so every mark is one boundary: the watchdog is told the phase it is in (`set_phase`, nothing
timed), and the rank watch's section clock closes the previous section there (`enter`). The
watchdog gets the rank watch's `on_stall` as its stall hook, so that a stalled rank publishes its
state and names the ranks it waits for. With one process there is no rank watch; with
`watchdog_timeout=None`, no watchdog thread.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from ..checks.distributed_nonfinite import attribute, from_rank, needs_origin, shared
from ..findings import Finding

__all__ = ["Watching"]


class Watching:
    """The phases half of `LiveSession` (a mixin: the session sets these attributes)."""

    every: int
    world: int
    watchdog_timeout: float | None
    distributed: bool | None
    phase_times: dict[str, float]
    _phase: str
    _watchdog: Any
    _rank_watch: Any
    rank: int
    findings: list[Finding]
    _lock: threading.RLock

    def _add(self, finding: Finding) -> None:  # provided by `Reporting`
        raise NotImplementedError

    def _write(self) -> None:  # provided by `Reporting`
        raise NotImplementedError

    # ---- a rank's verdicts on rank 0 -------------------------------------------------------------

    def _across_ranks(self, finding: Finding) -> list[Finding]:
        """A Monitor finding under a rank watch: tagged with this rank; on a rank > 0 shared with rank 0;
        on rank 0, an un-located non-finite verdict (its own batch replays finite) waits briefly for the
        rank that located it, names it, and brings its verdict along."""
        rw = self._rank_watch
        if rw is None or self.world < 2:
            return [finding]
        finding = dataclasses.replace(finding, evidence={**finding.evidence, "rank": self.rank})
        if self.rank != 0:
            if shared(finding):
                rw.share(finding)
            return [finding]
        if not needs_origin(finding):
            return [finding]
        # every rank fires at this step and replays its own batch: wait for theirs (bounded; a verdict
        # that comes later is taken in at the next exchange or at close)
        remote = rw.shared(step=finding.evidence.get("step"), within=min(5.0, max(1.0, rw.grace)))
        return [attribute(finding, remote), *self._new_from_ranks(remote)]

    def _new_from_ranks(self, remote: list[Finding]) -> list[Finding]:
        with self._lock:
            have = {(f.id, f.stage, f.message) for f in self.findings}
        out = [from_rank(f) for f in remote if shared(f)]
        return [f for f in out if (f.id, f.stage, f.message) not in have]

    def _gather_from_ranks(self) -> None:
        """Rank 0: take in what other ranks shared since, and name the origin of its own verdicts
        that were still waiting for it."""
        rw = self._rank_watch
        if rw is None or self.rank != 0 or self.world < 2:
            return
        remote = rw.shared()
        if not remote:
            return
        changed = False
        with self._lock:
            for i, f in enumerate(self.findings):
                if needs_origin(f) and "origin" not in f.evidence:
                    g = attribute(f, remote)
                    if g is not f:
                        self.findings[i], changed = g, True
        for f in self._new_from_ranks(remote):
            self._add(f)
        if changed:
            self._write()

    def _mark(self, name: str) -> None:
        self._phase = name
        if self._watchdog is not None:
            self._watchdog.set_phase(name)
        if self._rank_watch is not None:
            self._rank_watch.enter(name)

    def _phase_done(self, name: str, seconds: float, before: str) -> None:
        self.phase_times[name] = self.phase_times.get(name, 0.0) + seconds
        self._mark(before)

    def _progress(self, step: int | None) -> None:
        """Work that is not a training step but is progress (an evaluation batch): no stall."""
        if self._watchdog is not None:
            self._watchdog.beat(step)

    def _start_watchdog(self) -> None:
        """The stall watchdog: `beat(step)` at each end_step, the phase at each mark; on a stall the
        rank watch (when there is one) publishes this rank's state and names the others'."""
        if not self.watchdog_timeout or self._watchdog is not None:
            return
        from ..monitor.watchdog import Watchdog

        hooks = [self._rank_watch.on_stall] if self._rank_watch is not None else []
        # the first step also builds the optimizer state, compiles, warms the loader workers
        first = max(self.watchdog_timeout, self.first_timeout or 0.0)
        probe = self._rank_watch.pending_collective if self._rank_watch is not None else None
        self._watchdog = Watchdog(self.watchdog_timeout, first_timeout=first, stall_hooks=hooks,
                                  on_finding=self._add, dump_dir=self._dump_dir(), collective_probe=probe)
        self._watchdog.start()

    def _dump_dir(self) -> Any:
        out = getattr(self, "out_dir", None)
        return out / "stalls" if out is not None else None

    def _start_rank_watch(self, model: torch.nn.Module) -> None:
        """Section times, parameter hashes and desync checks across ranks (world > 1, or asked)."""
        wanted = self.distributed if self.distributed is not None else self.world > 1
        if not wanted or self._rank_watch is not None:
            return
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        from ..monitor.distributed import RankWatch

        # the collectives' own timeout bounds signalchain's side exchange: never shorter than a stall
        # the side exchange's collectives wait long (a rank may be saving a checkpoint); a stalled rank
        # waits for the others' states half a watchdog timeout: a hang is judged within 2 x the timeout
        wd = self.watchdog_timeout or 0.0
        self._rank_watch = RankWatch(model, every=self.every, timeout=max(60.0, 2 * wd),
                                     grace=wd / 2 if wd else None, on_finding=self._add)

    def _rank_watch_step(self, step: int) -> None:
        """The rank watch's step end (every `every` steps: the exchange; all ranks call it)."""
        if self._rank_watch is not None:
            self._rank_watch.step_end(step)
            if step % self.every == 0:
                self._gather_from_ranks()

    def _stop_watchers(self) -> None:
        try:
            self._gather_from_ranks()
        except Exception:
            pass
        watchdog, rank_watch, self._watchdog, self._rank_watch = self._watchdog, self._rank_watch, None, None
        try:
            if watchdog is not None:
                watchdog.stop()
        finally:
            if rank_watch is not None:
                rank_watch.close()
