"""The record the stall watchdog fills when no step completes in time, and `checks/stall.py` judges.

Plain data (no torch, no frames): the watchdog has already turned every thread's stack into
"path:line in func" strings, so a judge, a report or a test can build one by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StallRecord"]


@dataclass
class StallRecord:
    """One stall episode: the watched thread completed no step for `since_s` seconds.

    `phase` is what the run was doing, as decided from `explicit_phase` (what the user's code said
    with `Watchdog.phase`) and `stack_phase` (what the watched thread's stack shows); `phase_source`
    says which of the two won ("explicit" or "stack").
    """

    since_s: float  # seconds since the last beat (or since the watchdog started, before the first)
    timeout: float  # the limit that was passed (the first-step limit before the first beat)
    step: int | None  # the last step beaten, None before the first
    phase: str  # one of the watchdog's phases ("loader", "forward", ...; "step" when nothing is known)
    phase_source: str  # "explicit" or "stack"
    explicit_phase: str | None = None
    stack_phase: str | None = None
    collective: str | None = None  # the torch.distributed function the thread is in (phase collective)
    loader_workers: bool | None = None  # phase loader: the batch is awaited from worker processes
    site: str | None = None  # "path:line" of the innermost frame of the user's own code
    where: str | None = None  # "path:line in func" of the innermost Python frame
    thread: str = "MainThread"  # the watched thread's name
    pid: int = 0
    name: str = "train"  # the watchdog's name (which loop it watches)
    stacks: dict[str, list[str]] = field(default_factory=dict)  # thread -> frames, innermost last
    first_step: bool = False  # no step had completed yet (the first-step limit applied)
    episode: int = 1  # 1 for the first stall of this watchdog, 2 for the next, ...
    dump_path: str | None = None  # the plain-text dump of every thread's stack, when one was written
    lasted_s: float | None = None  # how long the stall lasted, once a later beat ended it
