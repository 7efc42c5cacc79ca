"""`ThreadClock`: the step thread's own CPU time and run-queue delay, and the run-queue delay of the
process's other threads, for timing on a machine that other processes share.

A wall-clock interval on a busy machine is the step's own time plus the time its thread stood in the
run queue while other processes held the cores. Linux keeps both per thread
(`/proc/self/task/<tid>/schedstat`: nanoseconds on a CPU, nanoseconds runnable but waiting for
one), so the interval less the thread's run-queue delay is what the thread did: computed on a CPU,
or blocked (sleeping on I/O, a lock, a worker process). That is the idle machine's time for the
same work, except where the step waited, blocked, for *its own* other threads (torch's intra-op
pool, OpenBLAS) while other processes held *them*: their run-queue delay bounds that part, so an
estimate comes with a lower bound, wall less both delays. The files are opened once and re-read
with `pread` (a few microseconds a read; opening them costs ten times that).

Where schedstat is not readable (not Linux), the thread's CPU time still comes from
`time.thread_time` and the delays are None: the judges then read the wall clock and say so.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["ThreadClock", "ThreadReading"]

_TASKS = "/proc/self/task"


@dataclass(frozen=True)
class ThreadReading:
    """One reading: seconds so far."""

    wall: float  # time.perf_counter()
    cpu: float  # the thread's CPU time
    queued: float | None  # the thread's run-queue delay (None: not readable here)
    others: float | None = None  # summed over the process's other threads (those named `exclude` left out)


def _pread(fd: int) -> tuple[int, int] | None:
    try:
        on_cpu, queued = os.pread(fd, 128, 0).split()[:2]
        return int(on_cpu), int(queued)
    except (OSError, ValueError):
        return None


class ThreadClock:
    """Readings of the calling thread (or `tid`), and of the process's other threads with `others=True`."""

    def __init__(self, tid: int | None = None, exclude: Collection[int] = ()):
        self.tid = threading.get_native_id() if tid is None else tid
        self.exclude = set(exclude)
        self._own = self._open(self.tid)
        self._fds: dict[int, int] = {}
        # a thread that ends takes its delay out of the sum: what it had is kept so the sum never falls
        self._gone = 0
        self._last: dict[int, int] = {}

    @staticmethod
    def _open(tid: int) -> int | None:
        try:
            return os.open(f"{_TASKS}/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            return None

    @property
    def readable(self) -> bool:
        return self._own is not None

    def thread(self) -> tuple[float, float | None]:
        """(CPU seconds, run-queue seconds or None) of the thread."""
        got = _pread(self._own) if self._own is not None else None
        if got is None:
            return time.thread_time(), None
        return got[0] / 1e9, got[1] / 1e9

    def others(self) -> float | None:
        """Run-queue seconds of the process's other threads so far (None where not readable)."""
        if self._own is None:
            return None
        try:
            tids = {int(t) for t in os.listdir(_TASKS)} - {self.tid} - self.exclude
        except (OSError, ValueError):
            return None
        for tid in [t for t in self._fds if t not in tids]:  # ended since the last reading
            self._gone += self._last.pop(tid, 0)
            os.close(self._fds.pop(tid))
        total = self._gone
        for tid in tids:
            fd = self._fds.get(tid)
            if fd is None:
                fd = self._open(tid)
                if fd is None:
                    continue
                self._fds[tid] = fd
            got = _pread(fd)
            if got is not None:
                self._last[tid] = got[1]
            total += self._last.get(tid, 0)
        return total / 1e9

    def read(self, others: bool = True) -> ThreadReading:
        cpu, queued = self.thread()
        return ThreadReading(time.perf_counter(), cpu, queued, self.others() if others else None)

    def close(self) -> None:
        for fd in [self._own, *self._fds.values()]:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._own, self._fds = None, {}

    def __enter__(self) -> ThreadClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
