"""The TensorBoard scalars of a live session's step, and its audio sample.

Every step: the loss and unclipped gradient norm (written by the verdict), the loss scale (with a
scaler), the updates withheld so far, the update ratio on the steps the Monitor measured it, and the
trainer's own numbers from `end_step(logs=...)`. Every `every` steps, per-codebook CE and perplexity
(the only values read off the device here). Every `sample_every` steps, `sample_fn(model)` in eval
mode without gradients, written as audio at the rate it returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch

from ..findings import Finding, Severity
from ..monitor import Monitor
from ._codebooks import CodebookCE, label_ignore_ids, per_codebook_ce
from ._tensorboard import TensorBoardSink

__all__ = ["StepScalars"]


class StepScalars:
    """The scalars half of `LiveSession` (a mixin: the session sets these attributes)."""

    every: int
    sample_every: int
    sample_fn: Callable[[torch.nn.Module], tuple[Any, int]] | None
    model: torch.nn.Module | None
    monitor: Monitor | None
    rank: int
    skipped_steps: int
    tb: TensorBoardSink
    _output: Any
    _labels: Any
    _ignore_ids: tuple[int, ...] | None = None  # the model's own ignored label values, read once
    _skip_said: bool = False

    def _add(self, finding: Finding) -> None:  # provided by `Reporting`
        raise NotImplementedError

    def scalar(self, tag: str, value: float, step: int) -> None:  # provided by `LiveSession`
        raise NotImplementedError

    def _safely(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:  # provided by `Reporting`
        raise NotImplementedError

    def phase(self, name: str) -> AbstractContextManager[None]:  # provided by `LiveSession`
        raise NotImplementedError

    def _step_scalars(self, step: int, logs: Mapping[str, float] | None) -> None:
        if self.monitor is not None:
            history = self.monitor.history
            if self.monitor.scaler is not None and history["scale"]:
                self.scalar("grad_scale", history["scale"][-1], step)
            if history["ratio_steps"] and history["ratio_steps"][-1] == self.monitor.steps:
                self.scalar("update_ratio", history["update_ratio"][-1], step)
            self.scalar("skipped_steps", self.skipped_steps + self.monitor.skipped, step)
        for key, value in (logs or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.scalar(key, value, step)
        if step % self.every == 0 and self._output is not None:
            self._safely("codebooks", self._codebooks, step)
        if self.sample_every and self.sample_fn is not None and step % self.sample_every == 0 and self.rank == 0:
            self._safely("sample", self._sample, step)

    def _codebooks(self, step: int) -> None:
        if self._ignore_ids is None:
            self._ignore_ids = label_ignore_ids(self.model)
        ce = per_codebook_ce(self._output, self._labels, self._ignore_ids)
        if ce is None:
            return
        if ce.skipped and not self._skip_said:
            self._skip_said = True
            self._add(_skipped_labels(ce, step))
        for k, value in enumerate(ce.values):
            self.scalar(f"ce/codebook_{k}", value, step)
            self.scalar(f"ppl/codebook_{k}", math.exp(min(value, 80.0)) if math.isfinite(value) else value, step)

    def _sample(self, step: int) -> None:
        model, fn = self.model, self.sample_fn
        if model is None or fn is None:
            return
        training = model.training
        try:
            model.eval()
            with torch.no_grad(), self.phase("sample"):  # a long sample is not a stall
                audio, rate = fn(model)
        finally:
            model.train(training)
        self.tb.audio("sample", audio, int(rate), step)


def _skipped_labels(ce: CodebookCE, step: int) -> Finding:
    """Said once: label values neither in [0, V) nor ignored by the model's own convention."""
    return Finding(
        id="targets.unrecognised", severity=Severity.INFO, stage="targets",
        message=f"step {step}: {ce.skipped} of {ce.positions} label positions hold values outside [0, {ce.vocab}) "
                f"that are neither of the ignored ids {list(ce.ignore_ids)} "
                f"(values such as {list(ce.skipped_values)}): "
                "the per-codebook CE on TensorBoard leaves them out",
        evidence={"step": step, "skipped": ce.skipped, "positions": ce.positions, "vocab": ce.vocab,
                  "ignore_ids": list(ce.ignore_ids), "values": list(ce.skipped_values)},
        hint="if your loss ignores these values on purpose, nothing to do; if not, they are labels the model "
             "cannot predict: look at how the labels are built",
        check="integrations.live")
