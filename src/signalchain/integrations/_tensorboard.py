"""`TensorBoardSink`: the scalars and audio of a live session, written to TensorBoard.

Scalars are buffered as plain floats (the session passes values it has already read; nothing here
touches a device) and handed to the `SummaryWriter` in `flush()`, which the session calls every
`every` steps and at close. Audio is written with the model's sample rate, always given: the
writer's default of 44.1 kHz is wrong for MusicGen's 32 kHz. The target is `True` (a writer on
`default_dir`), a folder, or an existing writer (Lightning's `TensorBoardLogger.experiment`), which
is flushed but never closed here: it belongs to the trainer. Without `tensorboard` installed the
sink says so once, as an info finding, and drops everything.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checks.base import make
from ..findings import Finding

__all__ = ["TensorBoardSink", "PREFIX", "tensorboard_available"]

PREFIX = "signalchain/"
CHECK = "integrations.tensorboard"


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
            self.log_dir = Path(where) if where else None
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
        self.writer, self.owned, self.log_dir = SummaryWriter(log_dir=str(where)), True, where
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
        if self.disabled and not self.pending:
            return
        pending, self.pending = self.pending, []
        writer = self._open()
        if writer is None:
            return
        for tag, value, step in pending:
            writer.add_scalar(tag, value, global_step=step)
        writer.flush()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self.writer is not None and self.owned:
                self.writer.close()
            self.writer, self.disabled = None, True


def mono(audio: Any) -> Any:
    """The first example's first channel as a 1-D float tensor in [-1, 1] ([L], [C, L] or [B, C, L] in)."""
    import torch

    t = torch.as_tensor(audio).detach().float().cpu()
    while t.dim() > 1:
        t = t[0]
    return t.clamp(-1.0, 1.0)
