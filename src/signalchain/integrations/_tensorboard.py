"""`TensorBoardSink`: the scalars and audio of a live session, written to TensorBoard.

Scalars are buffered as plain floats (the session passes values it has already read; nothing here
touches a device) and handed to the `SummaryWriter` in `flush()`, which the session calls every
`every` steps and at close, on a writer thread of its own. Audio is written with the model's sample
rate, always given: the writer's default of 44.1 kHz is wrong for MusicGen's 32 kHz. The target is `True` (a writer on
`default_dir`), a folder, or an existing writer (Lightning's `TensorBoardLogger.experiment`), which
is flushed but never closed here: it belongs to the trainer. Without `tensorboard` installed the
sink says so once, as an info finding, and drops everything.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from ..checks.base import make
from ..findings import Finding, check_failed

__all__ = ["TensorBoardSink", "PREFIX", "tensorboard_available"]

PREFIX = "signalchain/"
CHECK = "integrations.tensorboard"
CLOSE_TIMEOUT = 30.0  # seconds close() waits for the last scalars to be written


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardSink:
    """Buffer scalars, write them (and audio) under `signalchain/` tags."""

    def __init__(self, target: bool | str | Path | Any, default_dir: Path | None,
                 on_finding: Callable[[Finding], None]) -> None:
        self.target, self.default_dir, self.on_finding = target, default_dir, on_finding
        self.writer: Any = None
        self.owned = False  # a writer made here is closed here
        self.disabled = target is False or target is None
        self.pending: list[tuple[str, float, int]] = []
        self.log_dir: Path | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[None] | None = None
        self._failed = False

    def retarget(self, target: bool | str | Path | Any) -> None:
        """Point the sink elsewhere before anything was written (a trainer's own log dir or writer)."""
        if self.writer is None and not self.disabled:
            self.target = target

    def _open(self) -> Any:
        if self.writer is not None or self.disabled:
            return self.writer
        if hasattr(self.target, "add_scalar"):  # a writer that is not ours
            self.writer = self.target
            where = getattr(self.target, "log_dir", None) or getattr(self.target, "logdir", None)
            # a stand-in writer (Lightning's on ranks > 0) answers every attribute with a method
            self.log_dir = Path(where) if isinstance(where, (str, os.PathLike)) else None
            return self.writer
        if not tensorboard_available():
            self.disabled = True
            self.on_finding(make("tensorboard.unavailable", "info", None,
                                 "tensorboard is not installed: no scalars or audio are written to TensorBoard "
                                 "(findings still go to the log and findings.json)", CHECK,
                                 hint="pip install 'signalchain[hf]' or 'signalchain[lightning]' (or tensorboard)"))
            return None
        from torch.utils.tensorboard import SummaryWriter

        where = Path(self.target) if isinstance(self.target, (str, Path)) else self.default_dir
        if where is None:
            self.disabled = True
            return None
        where.mkdir(parents=True, exist_ok=True)
        # a long queue: the default of 10 events makes add_event wait for the disk
        self.writer, self.owned, self.log_dir = SummaryWriter(log_dir=str(where), max_queue=1000), True, where
        return self.writer

    def scalar(self, tag: str, value: float, step: int) -> None:
        if not self.disabled:
            self.pending.append((PREFIX + tag, float(value), int(step)))

    def audio(self, tag: str, audio: Any, sample_rate: int, step: int) -> None:
        """One clip, mono, at `sample_rate` (required: never the writer's default)."""
        writer = self._open()
        if writer is None:
            return
        writer.add_audio(PREFIX + tag, mono(audio), global_step=int(step), sample_rate=int(sample_rate))

    def flush(self) -> None:
        """Hand the buffered scalars to the writer, off the training thread (building and queueing
        TensorBoard events costs ~0.1 ms each: a few per step would show on a small model's step)."""
        if self.disabled and not self.pending:
            return
        pending, self.pending = self.pending, []
        writer = self._open()
        if writer is None:
            return
        self._collect(None)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="signalchain-tensorboard")
        self._future = self._pool.submit(_write_scalars, writer, pending)

    def _collect(self, timeout: float | None) -> bool:
        """The previous batch's outcome (a failure becomes a finding, once); False if still running."""
        future, self._future = self._future, None
        if future is None:
            return True
        if timeout is None and not future.done():
            self._future = future  # still writing: looked at next time
            return False
        try:
            future.result(timeout=timeout)
        except FutureTimeout:
            return False
        except Exception as exc:
            if not self._failed:
                self._failed = True
                self.on_finding(check_failed(CHECK, exc))
        return True

    def close(self) -> None:
        """Write what is left and wait for it (at most `CLOSE_TIMEOUT` s: a stuck disk must not hang the
        end of training); a writer of the trainer's is flushed, never closed."""
        finished = True
        try:
            self.flush()
            finished = self._collect(CLOSE_TIMEOUT)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
            if self.writer is not None and finished:
                self.writer.flush()
                if self.owned:
                    self.writer.close()
            self.writer, self.disabled = None, True


def _write_scalars(writer: Any, pending: list[tuple[str, float, int]]) -> None:
    for tag, value, step in pending:
        writer.add_scalar(tag, value, global_step=step)
    writer.flush()


def mono(audio: Any) -> Any:
    """The first example's first channel as a 1-D float tensor in [-1, 1] ([L], [C, L] or [B, C, L] in)."""
    import torch

    t = torch.as_tensor(audio).detach().float().cpu()
    while t.dim() > 1:
        t = t[0]
    return t.clamp(-1.0, 1.0)
