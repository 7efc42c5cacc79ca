"""What a long command is doing, while it does it: on stderr, never on stdout (`--json -` stays clean).

Three forms, chosen once per command:
- a terminal: a rich bar (spinner, description, counts when known, elapsed), gone when done;
- a pipe or a CI log (stderr not a terminal, or `CI` set): one plain line per phase, family, step or
  batch, each with the wall time since the command started, and a "still …" line whenever nothing
  was said for `HEARTBEAT_S`, so that no stretch of a log is silent for longer than that;
  A command that ends within `GRACE_S` (or $SIGNALCHAIN_PROGRESS_GRACE) prints no progress (its
  lines are held that long);
- `--quiet`: nothing at all (the findings and the report still print).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

__all__ = ["Reporter", "set_quiet", "is_quiet", "HEARTBEAT_S", "BATCH_EVERY_S", "GRACE_S"]

HEARTBEAT_S = 10.0  # the longest a plain log stays silent
GRACE_S = 1.0  # a command done sooner says nothing: lines are held this long (a usage error stays one line)
GRACE_ENV = "SIGNALCHAIN_PROGRESS_GRACE"  # seconds, to change it (0: every line, however quick the command)
BATCH_EVERY_S = 2.0  # counts in a plain log: one line per batch, at most one per this many seconds

_QUIET = False


def set_quiet(on: bool = True) -> None:
    """`--quiet`: no progress of any kind for the commands that follow (reset by each command's option)."""
    global _QUIET
    _QUIET = on


def is_quiet() -> bool:
    return _QUIET


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


class Reporter:
    """Progress of one command, named `command` in every line.

    `say(what)`: the command moved on (a family, a step, a phase). `item(what)`: the next of `total`
    items starts (counts). `start(total)` / `advance(n)`: counted work done in batches (files). `note(text)`:
    a line worth keeping (a zoo run's result), printed above the bar on a terminal. `status(what)`: a
    context manager saying `what` while it lasts. Use it as a context manager: it starts the bar or
    the heartbeat, and stops them.
    """

    def __init__(self, command: str, total: int | None = None, *, mode: str | None = None,
                 heartbeat: float = HEARTBEAT_S, every: float = BATCH_EVERY_S, grace: float | None = None,
                 stream: Any = None):
        if grace is None:
            try:
                grace = float(os.environ.get(GRACE_ENV, GRACE_S))
            except ValueError:
                grace = GRACE_S
        self.command, self.total, self.heartbeat, self.every, self.grace = command, total, heartbeat, every, grace
        self._pending: list[str] = []
        self._stream = stream
        if mode is None:
            from rich.console import Console  # here, not at import: `--quiet` is read by every command's --help

            probe = Console(stderr=True) if stream is None else Console(file=stream)
            mode = "off" if _QUIET else ("bar" if probe.is_terminal and not _in_ci() else "lines")
        self.mode = mode
        self.done = 0
        self.what = "starting"
        self._t0 = self._last = time.monotonic()
        self._last_count = float("-inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._bar: Any = None
        self._task: Any = None

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Reporter:
        self._t0 = self._last = time.monotonic()
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(stderr=True) if self._stream is None else Console(file=self._stream)
            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(f"{self.command}: {self.what}", total=self.total)
        elif self.mode == "lines":
            self._beat = threading.Thread(target=self._heartbeat, name="signalchain-progress", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=1.0)
        with self._lock:
            if self.elapsed() >= self.grace:  # else a quick command: its held lines are dropped
                self._flush()
        if self._bar is not None:
            self._bar.stop()

    # -- what a command calls ------------------------------------------------------------------
    def say(self, what: str) -> None:
        self.what = what
        if self.mode == "bar":
            self._bar.update(self._task, description=f"{self.command}: {what}"[:100])
        elif self.mode == "lines":
            self._line(f"{what}{self._counts()}")

    def item(self, what: str) -> None:
        """The next item starts: `what` is item number done + 1 of total."""
        self.done += 1
        self.what = what
        if self.mode == "bar":
            self._bar.update(self._task, completed=self.done - 1, description=f"{self.command}: {what}"[:100])
        elif self.mode == "lines":
            self._line(f"{what}{self._counts()}")

    def start(self, total: int) -> None:
        self.total, self.done = total, 0
        if self.mode == "bar":
            self._bar.update(self._task, total=total, completed=0)

    def advance(self, n: int = 1, what: str | None = None) -> None:
        self.done += n
        if what is not None:
            self.what = what
        if self.mode == "bar":
            self._bar.update(self._task, completed=self.done, description=f"{self.command}: {self.what}"[:100])
        elif self.mode == "lines":
            now = time.monotonic()
            finished = self.total is not None and self.done >= self.total
            if finished or what is not None or now - self._last_count >= self.every:
                self._last_count = now
                self._line(f"{self.what}{self._counts()}")

    def note(self, text: str) -> None:
        if self.mode == "bar":
            self._bar.console.print(text, markup=False, highlight=False)
        elif self.mode == "lines":
            self._line(text)

    @contextlib.contextmanager
    def status(self, what: str) -> Iterator[None]:
        self.say(what)
        yield

    # -- plain lines ---------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _counts(self) -> str:
        if self.total is None or not self.done:
            return ""
        return f" ({self.done}/{self.total})"

    def _line(self, text: str) -> None:
        with self._lock:
            self._last = time.monotonic()
            self._pending.append(f"[{self.elapsed():7.1f} s] {self.command}: {text}\n")
            if self.elapsed() >= self.grace:
                self._flush()

    def _flush(self) -> None:
        if self._pending:
            stream = self._stream or sys.stderr
            stream.write("".join(self._pending))
            stream.flush()
            self._pending.clear()

    def _heartbeat(self) -> None:
        while not self._stop.wait(min(0.25, self.heartbeat / 4)):
            if time.monotonic() - self._last >= self.heartbeat:
                self._line(f"still {self.what}{self._counts()}")
            elif self._pending and self.elapsed() >= self.grace:
                with self._lock:
                    self._flush()
