"""The stability half of a live session: each step's loss, gradient norm, update ratio and loss scale
(as the Monitor recorded them) handed to `checks.instability_live`, which judges them against the
run's own history. Only numbers already on the host are read: no device work is added to a step.

The gradient norm is passed only when it is the unclipped one (HF clips before the Monitor sees it;
there, HF's own pre-clip norm comes in through `judge_grad_norm` on the steps it logs);
the learning rate is read before the update (a scheduler steps right after it), for the update ratio
per unit learning rate.
"""

from __future__ import annotations

from typing import Any

from ..checks.instability_live import InstabilityJudge
from ..findings import Finding
from ..monitor import Monitor

__all__ = ["LiveStability"]


def _lr_of(optimizer: Any) -> float | None:
    """The largest learning rate of the optimizer's groups (the update ratio is over all of them)."""
    groups = getattr(optimizer, "param_groups", None) or []
    rates = [float(g["lr"]) for g in groups if isinstance(g, dict) and isinstance(g.get("lr"), (int, float))]
    return max(rates) if rates else None


class LiveStability:
    """The stability half of `LiveSession` (a mixin: the session sets these attributes)."""

    monitor: Monitor | None
    unclipped_at: int | None
    _stability: InstabilityJudge | None = None
    _stability_lr: float | None = None
    _stability_seen: tuple[int, int, int] = (0, 0, 0)  # history lengths judged: loss, update ratio, scale
    _stability_of: Monitor | None = None  # the Monitor judged (a second fit attaches a new one: start over)

    def _add(self, finding: Finding) -> None:  # provided by `Reporting`
        raise NotImplementedError

    def _safely(self, where: str, fn: Any, *args: Any) -> Any:  # provided by `Reporting`
        raise NotImplementedError

    def judge_grad_norm(self, step: int, norm: float) -> None:
        """The unclipped gradient norm of a step whose Monitor norm was clipped (HF logs its pre-clip norm)."""
        self._safely("stability", self._stability_grad, step, norm)

    def _stability_grad(self, step: int, norm: float) -> None:
        if self._stability is not None and self._stability_of is self.monitor:
            for finding in self._stability.step(step, grad_norm=float(norm), lr=self._stability_lr):
                self._add(finding)

    def _stability_before(self) -> None:
        """Before the update: the learning rate this step uses."""
        if self.monitor is not None:
            self._stability_lr = _lr_of(self.monitor.optimizer)

    def _stability_end(self, step: int) -> None:
        """After the update: judge what this step added to the Monitor's history."""
        monitor = self.monitor
        if monitor is None:
            return
        if self._stability is None or self._stability_of is not monitor:
            self._stability, self._stability_of, self._stability_seen = InstabilityJudge(), monitor, (0, 0, 0)
        h, (n_loss, n_ratio, n_scale) = monitor.history, self._stability_seen
        loss = grad = ratio = scale = None
        if len(h["loss"]) > n_loss:
            loss = h["loss"][-1]
            if self.unclipped_at == step and len(h["grad_norm"]) == len(h["loss"]):
                grad = h["grad_norm"][-1]
        if len(h["update_ratio"]) > n_ratio and h["ratio_steps"][-1] == monitor.steps:
            ratio = h["update_ratio"][-1]
        if monitor.scaler is not None and len(h["scale"]) > n_scale:
            scale = h["scale"][-1]
        self._stability_seen = (len(h["loss"]), len(h["update_ratio"]), len(h["scale"]))
        for finding in self._stability.step(step, loss=loss, grad_norm=grad, update_ratio=ratio,
                                            lr=self._stability_lr, scale=scale):
            self._add(finding)
