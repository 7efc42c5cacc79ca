"""The stall watchdog: a daemon thread that notices when no training step completes in time.

    with signalchain.watchdog(timeout=30.0) as wd:
        for step, batch in enumerate(loader):
            ...
            wd.beat(step)

`beat` costs three attribute writes (the time, the step, the calling thread); the watchdog thread
sleeps on `Event.wait(poll)` and reads them. When `timeout` passes without a beat (`first_timeout`
before the first one: compilation and warm-up are slow), it takes every thread's Python stack,
names the phase the watched thread is in (`_stacks.py`), and makes one `perf.stall` finding per
stall episode (`checks/stall.py`); the next beat re-arms it. Stall hooks (the rank watch of
torch.distributed plugs in here) get the state as a dict and may add findings.

Nothing here may break or stall the run: the watchdog thread catches everything it does (a crash
becomes `internal.check_failed`), hooks run on a thread of their own with a time limit, and `stop()`
joins with a timeout. Uses no torch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .._atomic import write_text_atomic
from ..checks.stall import ESCALATE, judge_stall
from ..findings import Finding, check_failed
from ..records.stall import StallRecord
from . import _stacks

__all__ = ["Watchdog", "watchdog", "PHASES", "LOADER", "FORWARD", "BACKWARD", "OPTIMIZER", "COLLECTIVE",
           "CHECKPOINT", "COMPILE", "STEP", "IDLE"]

LOADER, FORWARD, BACKWARD, OPTIMIZER = "loader", "forward", "backward", "optimizer"
COLLECTIVE, CHECKPOINT, COMPILE = "collective", "checkpoint", "compile"
STEP = "step"  # inside a step, where unknown
IDLE = "idle"  # the loop waits on purpose (evaluation you do not watch, a pause): no stall is reported
PHASES = (LOADER, FORWARD, BACKWARD, OPTIMIZER, COLLECTIVE, CHECKPOINT, COMPILE, STEP, IDLE)

STACK_DEPTH = 40  # innermost frames kept per thread in evidence (the dump file keeps them all)
_CHECK = "monitor.watchdog"
_THREAD_PREFIX = "signalchain-watchdog-"

Hook = Callable[[dict], "list[Finding]"]


class _Episode:
    """The stall in progress: where its finding sits in `findings`, and the record it was judged from."""

    __slots__ = ("index", "record", "escalated")

    def __init__(self, index: int, record: StallRecord) -> None:
        self.index, self.record, self.escalated = index, record, False


class _Phase:
    """`with wd.phase(name):` sets the explicit phase and restores the outer one on exit."""

    __slots__ = ("_wd", "_name", "_outer")

    def __init__(self, wd: Watchdog, name: str) -> None:
        self._wd, self._name, self._outer = wd, name, None

    def __enter__(self) -> _Phase:
        self._outer = self._wd._phase
        self._wd._phase = self._name
        return self

    def __exit__(self, *exc: object) -> None:
        self._wd._phase = self._outer


class Watchdog:
    """Watches one thread's training loop (the one that started it, or the last to `beat`).

    - `timeout`: seconds a step may take; `first_timeout`: before the first beat (default `timeout`).
    - `poll`: how often the thread looks (default min(timeout / 4, 1 s)).
    - `on_finding(finding)`: called on the watchdog's threads with each new finding, and once more
      with a stall's finding when it turns `error` (3 × the timeout); a raising callback is a finding.
    - `stall_hooks`: `fn(state) -> list[Finding]`, once per stall, each on its own thread for at most
      `hook_timeout` seconds (default max(timeout, 5 s)); `state` has the keys of `snapshot()`.
    - `collective_probe`: `fn() -> str | None`, the collective this process waits in (the rank
      watch reads torch's flight recorder): a rank hung in DDP's gradient all-reduce shows only
      `backward` in its Python stack, and is then named as inside that collective.
    - `dump_dir`: where every thread's stack is written as `stall-<pid>-<n>.txt` on each stall.

    `findings` (safe to read from any thread) holds one `perf.stall` per stall episode, replaced by its
    newer judgement when the stall turns into a hang or ends (`lasted_s` in evidence); `stalls` counts them.
    """

    def __init__(self, timeout: float, *, first_timeout: float | None = None, poll: float | None = None,
                 on_finding: Callable[[Finding], None] | None = None, stall_hooks: Sequence[Hook] = (),
                 dump_dir: str | Path | None = None, name: str = "train",
                 hook_timeout: float | None = None,
                 collective_probe: Callable[[], str | None] | None = None) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if first_timeout is not None and not first_timeout > 0:
            raise ValueError(f"first_timeout must be positive seconds or None, got {first_timeout!r}")
        self.timeout = float(timeout)
        self.first_timeout = float(first_timeout) if first_timeout is not None else self.timeout
        self.poll = float(poll) if poll is not None else min(min(self.timeout, self.first_timeout) / 4, 1.0)
        # A hook gets at least as long as a step may take, and never less than a few seconds.
        self.hook_timeout = float(hook_timeout) if hook_timeout is not None else max(self.timeout, 5.0)
        self.on_finding = on_finding
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.name = name
        self.findings: list[Finding] = []
        self.stalls = 0
        self._hooks: list[Hook] = list(stall_hooks)
        self.collective_probe = collective_probe  # "the collective this process waits in", or None
        self._lock = threading.Lock()  # only the watchdog's side takes it, never `beat`
        self._seen: set[tuple[str, str | None, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Written by the watched thread, read by the watchdog thread (plain attributes: no lock).
        self._t = time.monotonic()
        self._step: int | None = None
        self._tid = threading.get_ident()
        self._phase: str | None = None
        self._started_at = self._t  # `_t` still equal to it: no step has completed yet
        # Watchdog-thread state.
        self._fired_t: float | None = None  # the beat time the last stall counted from
        self._episode: _Episode | None = None  # the stall in progress
        self._resume = 0.0  # the last time the loop was seen idle

    # ---- the watched thread's side: cheap, never raises -------------------------------------
    def beat(self, step: int | None = None) -> None:
        """A step completed."""
        self._t = time.monotonic()
        self._step = step
        self._tid = threading.get_ident()

    def phase(self, name: str) -> _Phase:
        """`with wd.phase("forward"):` names what the code inside is doing (nestable)."""
        return _Phase(self, name)

    def set_phase(self, name: str | None) -> None:
        """Name the current phase (None: unknown) until the next call."""
        self._phase = name

    def add_hook(self, fn: Hook) -> None:
        """Call `fn(state)` on each stall; it may return findings (see `snapshot` for the keys)."""
        self._hooks.append(fn)

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> Watchdog:
        """Start watching the calling thread (the clock starts now). Starting twice is a no-op."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._t, self._step, self._tid = time.monotonic(), None, threading.get_ident()
        self._started_at, self._fired_t, self._episode, self._resume = self._t, None, None, 0.0
        self._thread = threading.Thread(target=self._run, name=f"{_THREAD_PREFIX}{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread and wait for it (at most `timeout`, default a few polls)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout if timeout is not None else max(4 * self.poll, 2.0))
            if not thread.is_alive() and self._episode is not None and self._t != self._fired_t:
                try:  # the last stall ended with a beat the thread did not see: record how long it was
                    self._resolve(self._t)
                except Exception as exc:
                    self._add(check_failed(_CHECK, exc))

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    # ---- the watchdog thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self._check(time.monotonic())
            except Exception as exc:  # a bug here must never reach the run
                self._add(check_failed(_CHECK, exc))

    def _check(self, now: float) -> None:
        t = self._t
        if self._episode is not None and t != self._fired_t:
            self._resolve(t)  # a beat came: the stall is over and the watchdog is re-armed
        if self._phase == IDLE:
            self._resume = now  # waiting on purpose: the clock restarts when the loop comes back
            return
        since = now - max(t, self._resume)
        first = t == self._started_at
        limit = self.first_timeout if first else self.timeout
        if self._episode is None:
            if t != self._fired_t and since >= limit:
                self._fire(t, since, limit, first)
        elif not self._episode.escalated and since >= ESCALATE * limit and self._alive(self._tid):
            self._escalate(since)

    def _fire(self, t: float, since: float, limit: float, first: bool) -> None:
        self._fired_t = t
        tid = self._tid
        stacks = _stacks.thread_stacks(exclude=self._own_threads())
        if tid not in stacks:
            return  # the watched thread has ended: nothing is stalled (the loop finished without stop())
        self.stalls += 1
        name, frames = stacks[tid]
        record = self._record(since, limit, first, name, frames, stacks)
        if self.dump_dir is not None:
            record.dump_path = self._dump(record, stacks)
        finding = judge_stall(record)[0]
        with self._lock:
            self.findings.append(finding)
            self._episode = _Episode(len(self.findings) - 1, record)
        self._notify(finding)
        self._run_hooks(self._state(record))

    @staticmethod
    def _alive(ident: int) -> bool:
        return any(t.ident == ident for t in threading.enumerate())

    def _record(self, since: float, limit: float, first: bool, thread: str, frames: list[Any],
                stacks: dict[int, tuple[str, list[Any]]]) -> StallRecord:
        explicit = self._phase
        stack, detail = _stacks.stack_phase(frames)
        phase, source = _stacks.resolve_phase(explicit, stack)
        pending = self._pending() if phase != COLLECTIVE and phase not in (LOADER, CHECKPOINT, COMPILE) else None
        if pending:  # waiting in a collective issued outside Python (DDP's all-reduce inside backward)
            phase, stack, source, detail = COLLECTIVE, COLLECTIVE, "flight recorder", pending
        labels: dict[str, list[str]] = {}
        for ident, (tname, fs) in stacks.items():
            key = tname if tname not in labels else f"{tname} (0x{ident:x})"
            labels[key] = [_stacks.format_frame(f) for f in fs[-STACK_DEPTH:]]
        return StallRecord(since_s=since, timeout=limit, step=self._step, phase=phase, phase_source=source,
                           explicit_phase=explicit, stack_phase=stack,
                           collective=detail if phase == COLLECTIVE and stack == COLLECTIVE else None,
                           loader_workers=detail == "workers" if phase == LOADER and stack == LOADER else None,
                           site=_stacks.user_site(frames), where=_stacks.format_frame(frames[-1]) if frames else None,
                           thread=thread, pid=os.getpid(), name=self.name, stacks=labels, first_step=first,
                           episode=self.stalls)

    def _pending(self) -> str | None:
        try:
            return self.collective_probe() if self.collective_probe is not None else None
        except Exception:
            return None

    def _dump(self, record: StallRecord, stacks: dict[int, tuple[str, list[Any]]]) -> str | None:
        assert self.dump_dir is not None
        path = self.dump_dir / f"stall-{record.pid}-{record.episode}.txt"
        header = (f"signalchain watchdog {self.name!r}: stall {record.episode} of pid {record.pid}, thread "
                  f"{record.thread!r}, step {record.step}, phase {record.phase}, {record.since_s:.1f} s "
                  f"since the last beat (timeout {record.timeout:g} s); user site {record.site}")
        try:
            write_text_atomic(path, _stacks.format_dump(header, stacks))
        except OSError as exc:  # a full or read-only disk costs the dump, not the finding
            self._add(check_failed(_CHECK, exc))
            return None
        return str(path)

    def _replace(self, record: StallRecord, notify: bool) -> None:
        episode = self._episode
        assert episode is not None
        finding = judge_stall(record)[0]
        with self._lock:
            self.findings[episode.index] = finding  # frozen findings: the list holds the newest judgement
        if notify:
            self._notify(finding)

    def _escalate(self, since: float) -> None:
        assert self._episode is not None
        self._episode.escalated = True
        self._episode.record.since_s = since
        self._replace(self._episode.record, notify=True)  # warning -> error: the user hears of it again

    def _resolve(self, t: float) -> None:
        assert self._episode is not None and self._fired_t is not None
        self._episode.record.lasted_s = t - max(self._fired_t, self._resume)
        try:
            self._replace(self._episode.record, notify=False)
        finally:
            self._episode = None

    def _state(self, record: StallRecord) -> dict[str, Any]:
        return {"step": record.step, "phase": record.phase, "since_s": record.since_s, "site": record.site,
                "where": record.where, "stacks": record.stacks, "pid": record.pid, "thread": record.thread}

    def snapshot(self) -> dict[str, Any]:
        """The state a stall hook receives, taken now (for a caller that wants it without a stall)."""
        now = time.monotonic()
        t = self._t
        stacks = _stacks.thread_stacks(exclude=self._own_threads())
        name, frames = stacks.get(self._tid, ("?", []))
        first = t == self._started_at
        record = self._record(now - t, self.first_timeout if first else self.timeout, first, name, frames, stacks)
        return self._state(record)

    @staticmethod
    def _own_threads() -> tuple[int, ...]:
        """Every watchdog's threads and their hook threads: machinery, not the run's stacks."""
        return tuple(t.ident for t in threading.enumerate()
                     if t.ident is not None and t.name.startswith(_THREAD_PREFIX))

    # ---- findings and hooks -----------------------------------------------------------------
    def _add(self, finding: Finding) -> bool:
        key = (finding.id, finding.stage, finding.message)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            self.findings.append(finding)
        self._notify(finding)
        return True

    def _notify(self, finding: Finding) -> None:
        if self.on_finding is None:
            return
        try:
            self.on_finding(finding)
        except Exception as exc:  # the user's callback failing is a finding, not a dead watchdog
            bad = check_failed(f"{_CHECK}.on_finding", exc)
            with self._lock:
                if (bad.id, bad.stage, bad.message) not in self._seen:
                    self._seen.add((bad.id, bad.stage, bad.message))
                    self.findings.append(bad)

    def _run_hooks(self, state: dict[str, Any]) -> None:
        for hook in list(self._hooks):
            label = getattr(hook, "__qualname__", None) or type(hook).__name__
            done = threading.Event()

            def call(hook: Hook = hook, label: str = label, done: threading.Event = done) -> None:
                try:
                    for f in hook(dict(state)) or []:
                        self._add(f)
                except Exception as exc:
                    self._add(check_failed(f"{_CHECK}.hook {label}", exc))
                finally:
                    done.set()

            # Its own thread: a hook that blocks (a dead peer's store) must not take the watchdog with it.
            threading.Thread(target=call, name=f"{_THREAD_PREFIX}hook-{label}", daemon=True).start()
            deadline = time.monotonic() + self.hook_timeout
            while not done.wait(min(self.poll, 0.1)):
                if self._stop.is_set() or time.monotonic() >= deadline:
                    if not self._stop.is_set():
                        self._add(check_failed(f"{_CHECK}.hook {label}", TimeoutError(
                            f"stall hook {label} ran past {self.hook_timeout:g} s; its findings come when it returns")))
                    break


def watchdog(timeout: float = 300.0, **kw: Any) -> Watchdog:
    """A started `Watchdog` over the calling thread; use it as a context manager to stop it.

    `timeout`: seconds a step may take; the rest as `Watchdog`."""
    return Watchdog(timeout, **kw).start()
