"""What both trainer callbacks share: their options, the session they own, the guard on their hooks.

The HF and Lightning callbacks differ only in how their trainer's hooks map onto a `LiveSession`;
this mixin holds the rest, so that the two cannot drift apart.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..findings import Finding
from ._live import LiveSession

__all__ = ["SessionOwner"]

FLIGHT_RECORDER_ENTRIES = "2000"  # collectives torch's flight recorder keeps per process (a ring)


class SessionOwner:
    """The options of a `LiveSession` (see it for their meaning) and the session of the current run."""

    label = "callback"  # how internal failures name the hook: "hf.on_log", "lightning.on_train_start"

    def _configure(self, *, out_dir: str | Path | None, tensorboard: bool | str | Any, every: int, ratio_every: int,
                   sample_every: int, sample_fn: Callable[[torch.nn.Module], tuple[Any, int]] | None, golden: bool,
                   skip_nonfinite: bool, strict: bool, watchdog_timeout: float | None, first_timeout: float | None,
                   distributed: bool | None, logger: logging.Logger | None) -> None:
        self.out_dir, self.tensorboard = out_dir, tensorboard
        self.options = dict(every=every, ratio_every=ratio_every, sample_every=sample_every, sample_fn=sample_fn,
                            golden=golden, skip_nonfinite=skip_nonfinite, strict=strict,
                            watchdog_timeout=watchdog_timeout, first_timeout=first_timeout,
                            distributed=distributed, logger=logger)
        if distributed is not False:
            # the flight recorder names the collective a hung rank waits in; torch reads the variable when
            # the process group is made, which the trainer does later (in train()/fit()); the user's wins
            os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
        self.session: LiveSession | None = None

    @property
    def findings(self) -> list[Finding]:
        return self.session.findings if self.session is not None else []

    def _open(self, out_dir: Path, tensorboard: bool | str | Any, source: str) -> LiveSession:
        if self.session is not None:  # a second train()/fit() with the same callback: a fresh session
            self.session.close()
        self.session = LiveSession(out_dir=out_dir, tensorboard=tensorboard, **self.options)
        self.session.source = source
        return self.session

    def _guarded(self, where: str, fn: Callable[..., Any], *a: Any) -> None:
        """Never break the trainer: a failure here is a finding (raised only when strict)."""
        try:
            fn(*a)
        except Exception as exc:
            if self.options["strict"] or self.session is None:
                raise
            self.session._internal(f"{self.label}.{where}", exc)

    def close(self) -> list[Finding]:
        """End the session (also after a run that raised): findings written, TensorBoard flushed, the
        optimizer's step restored. Idempotent."""
        return self.session.close() if self.session is not None else []
