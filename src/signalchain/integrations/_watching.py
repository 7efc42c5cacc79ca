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

from typing import Any

import torch

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

    def _add(self, finding: Finding) -> None:  # provided by `Reporting`
        raise NotImplementedError

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

    def _stop_watchers(self) -> None:
        watchdog, rank_watch, self._watchdog, self._rank_watch = self._watchdog, self._rank_watch, None, None
        try:
            if watchdog is not None:
                watchdog.stop()
        finally:
            if rank_watch is not None:
                rank_watch.close()
