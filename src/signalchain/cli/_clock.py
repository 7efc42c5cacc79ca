"""The wall clock of one command: the seconds a command prints run from its start, imports included.

`signalchain audit` once printed "8 examples in 0.3 s" after 10 s of wall time (the rest was
start-up and imports). The group marks the start of each invocation; on the real command line the
start is the process's own (read from /proc where there is one), so interpreter start-up counts too.
"""

from __future__ import annotations

import os
import time

__all__ = ["begin", "elapsed", "process_age"]

_start: float | None = None


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc; None where it cannot be read)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks since boot
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def begin(whole_process: bool = False) -> None:
    """Mark the start of a command: now, or the process's start when `whole_process` (the real command line)."""
    global _start
    age = process_age() if whole_process else None
    _start = time.perf_counter() - (age or 0.0)


def elapsed() -> float:
    """Wall seconds since `begin()` (since the first call, when nothing called it: a Python caller)."""
    if _start is None:
        begin()
    assert _start is not None
    return time.perf_counter() - _start
