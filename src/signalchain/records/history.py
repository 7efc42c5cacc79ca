"""Plain records of a finished run's logs (no torch): the history readers fill them, the history
judges read them, the history page draws them.

A `RunHistory` is what one run left behind: its logged metrics as `Series` (parallel numpy arrays
in the order the log holds them — a resumed run may log a step twice), the checkpoints found beside
the log, what the log says was configured, and one `ReadNote` per thing a reader skipped (a run
that died mid-write is the normal case, so a note is not an error).

Readers keep metric names as logged (`loss`, `eval_loss`, `train/ce_q1`, `val_loss_epoch`); a
`Series.role` says what the judges may take it for (`ROLES`), and a series without a role is shown,
never judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ROLES", "AXES", "Series", "Checkpoint", "ReadNote", "RunHistory"]

#: What a series may be taken for. `*_codebook_loss` series carry `Series.codebook` (0-based).
ROLES = (
    "train_loss",  # the training objective (cross-entropy in nats for the codec-token models)
    "valid_loss",  # the same objective on held-out data
    "train_codebook_loss",  # the training cross-entropy of one codebook
    "valid_codebook_loss",
    "grad_norm",  # the global gradient norm before clipping
    "lr",  # the learning rate of the (first) param group
    "loss_scale",  # the AMP loss scale
    "step_time",  # seconds per optimiser step
    "throughput",  # samples (or steps) per second
    "epoch",  # the epoch counter as logged
)

#: The x axis a run's series are on: optimiser steps, or epochs when the log has only those.
AXES = ("step", "epoch")


@dataclass
class Series:
    """One logged metric: `values[i]` was logged at `steps[i]` (and at `wall[i]` seconds since the Unix
    epoch, `epochs[i]`, where the log says). Non-finite values are kept as logged."""

    name: str
    steps: np.ndarray  # int64 [N]; on an "epoch" axis, the epoch index
    values: np.ndarray  # float64 [N]
    wall: np.ndarray | None = None  # float64 [N], or None when the log has no timestamps
    epochs: np.ndarray | None = None  # float64 [N], or None
    role: str | None = None  # one of ROLES, or None: shown, never judged
    codebook: int | None = None  # for the *_codebook_loss roles
    source: str = ""  # the file the points came from

    def __post_init__(self) -> None:
        self.steps = np.asarray(self.steps, dtype=np.int64).reshape(-1)
        self.values = np.asarray(self.values, dtype=np.float64).reshape(-1)
        n = len(self.steps)
        if len(self.values) != n:
            raise ValueError(f"series {self.name!r}: {n} steps but {len(self.values)} values")
        for attr in ("wall", "epochs"):
            arr = getattr(self, attr)
            if arr is not None:
                arr = np.asarray(arr, dtype=np.float64).reshape(-1)
                if len(arr) != n:
                    raise ValueError(f"series {self.name!r}: {n} steps but {len(arr)} {attr}")
                setattr(self, attr, arr)
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"series {self.name!r}: role {self.role!r} is not one of {ROLES}")

    def __len__(self) -> int:
        return len(self.steps)

    def finite(self) -> np.ndarray:
        """bool [N]: which values are finite."""
        return np.isfinite(self.values)


@dataclass
class Checkpoint:
    """A checkpoint found beside the log: `step` from its name or its own state file."""

    step: int
    path: str
    complete: bool = True  # False: the folder lacks the weights (a save that died mid-write)
    files: list[str] = field(default_factory=list)  # the names inside, sorted


@dataclass
class ReadNote:
    """One thing a reader could not use: the file, the line (or record) where known, and why."""

    path: str
    message: str
    line: int | None = None

    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else self.path


@dataclass
class RunHistory:
    """Everything one finished (or dead) run left behind, as read."""

    root: str  # the folder or file the user named
    format: str  # "hf-trainer", "tensorboard", "lightning-csv", "audiocraft", "wandb-csv", "wandb-offline"
    axis: str = "step"  # one of AXES
    series: dict[str, Series] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # sorted by step
    notes: list[ReadNote] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # what the run's files say was set (e.g. "learning_rate")
    sources: list[str] = field(default_factory=list)  # every file read

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise ValueError(f"axis {self.axis!r} is not one of {AXES}")

    def add(self, series: Series) -> None:
        self.series[series.name] = series

    def by_role(self, role: str) -> list[Series]:
        """The series taken for `role`, codebooks in order."""
        found = [s for s in self.series.values() if s.role == role]
        return sorted(found, key=lambda s: (s.codebook if s.codebook is not None else -1, s.name))

    def first(self, role: str) -> Series | None:
        """The one series for a scalar role (the first by name when a log has several)."""
        found = self.by_role(role)
        return found[0] if found else None

    def points(self) -> int:
        return sum(len(s) for s in self.series.values())
