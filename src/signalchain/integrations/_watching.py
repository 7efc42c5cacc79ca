"""Phases, the stall watchdog and the rank watch of a live session: the integration points.

`signalchain.monitor.watchdog` (branch h-watch) and `signalchain.monitor.distributed` (branch
h-dist) plug in here. Until those modules exist (ImportError) the session names its phases and
times them, and nothing else happens: no thread, no collective.
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
            self._watchdog.phase(name)

    def _phase_done(self, name: str, seconds: float, before: str) -> None:
        self.phase_times[name] = self.phase_times.get(name, 0.0) + seconds
        self._rank_time(name, seconds)
        self._mark(before)

    def _start_watchdog(self) -> None:
        """Integration point for `signalchain.monitor.watchdog` (branch h-watch): a stall watchdog fed
        `beat(step)` at each end_step and `phase(name)`; nothing until that module exists."""
        if not self.watchdog_timeout or self._watchdog is not None:
            return
        try:
            from ..monitor.watchdog import Watchdog  # type: ignore[import-not-found]
        except ImportError:
            return
        self._watchdog = Watchdog(self.watchdog_timeout, stall_hooks=[], on_finding=self._add)
        self._watchdog.start()

    def _start_rank_watch(self, model: torch.nn.Module) -> None:
        """Integration point for `signalchain.monitor.distributed` (branch h-dist): section times,
        parameter hashes and desync checks across ranks; nothing until that module exists."""
        wanted = self.distributed if self.distributed is not None else self.world > 1
        if not wanted or self._rank_watch is not None:
            return
        try:
            from ..monitor.distributed import RankWatch  # type: ignore[import-not-found]
        except ImportError:
            return
        self._rank_watch = RankWatch(model, every=self.every, timeout=self.watchdog_timeout or 300.0,
                                     on_finding=self._add)

    def _rank_time(self, section: str, seconds: float) -> None:
        if self._rank_watch is not None:
            self._rank_watch.add_time(section, seconds)

    def _rank_watch_step(self, step: int) -> None:
        """Integration point: the rank watch's per-step exchange (RankWatch.step_end)."""
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
