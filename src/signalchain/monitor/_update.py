"""The Monitor's judges of the update itself: its relative size, an update that changed nothing,
and the gradient scaler's skips (a mixin: the state lives on `Monitor`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..checks.base import make
from ..experiments.optimisation._train import norm_of
from ..findings import Finding

__all__ = ["SKIP_WINDOW", "UpdateJudges"]

CHECK = "monitor"
SKIP_WINDOW = 8  # steps before a skip rate is judged (a GradScaler skips a few while its scale settles)


class UpdateJudges:
    """Mixed into `Monitor`; reads and writes its fields."""

    model: Any
    scaler: Any
    findings: list[Finding]
    history: dict[str, list[float]]
    steps: int
    skipped: int
    ratio_elements: int
    _scale: float | None
    _before: list[tuple[torch.Tensor, torch.Tensor]] | None
    _updated: bool
    _stepped: int
    _checked: bool
    _stepping: Any
    _rates: list[tuple[float, float | None]] | None
    _scheduled_zero: bool
    _measure_next: bool

    _add: Callable[[Finding], None]

    def _read_rates(self) -> None:
        """Each group's learning rate as the update just used it, and the base rate an LR scheduler keeps
        beside it (`initial_lr`, set by every torch scheduler; None without one)."""
        groups = getattr(self._stepping, "param_groups", None) or []
        self._rates = [(float(g.get("lr", math.nan)), float(g["initial_lr"]) if "initial_lr" in g else None)
                       for g in groups]

    def _zero_rate(self) -> str | None:
        """Why this measured update used a learning rate of 0 in every group: "scheduled" (a scheduler
        runs it from a base rate > 0: a warm-up's first step, by design), "set" (the rate itself is 0),
        or None (some rate was not 0, or the rates were not read)."""
        if not self._rates or any(lr != 0.0 for lr, _ in self._rates):
            return None
        return "scheduled" if all(base is not None and base > 0 for _, base in self._rates) else "set"

    def _read_scale(self) -> None:
        self._scale = float(self.scaler.get_scale())

    def _copy_params(self) -> None:
        """The values of the trainable parameters before the update, up to `ratio_elements` of them."""
        kept, n = [], 0
        with torch.no_grad():
            for q in self.model.parameters():
                if q.requires_grad and n + q.numel() <= self.ratio_elements:
                    kept.append((q, q.detach().clone()))
                    n += q.numel()
        self._before = kept

    def _judge_scale(self) -> None:
        scale = float(self.scaler.get_scale())
        self.history["scale"].append(scale)
        if scale < self._scale:
            self.skipped += 1
            self._updated = False
            self._judge_skips(scale)
        self._scale = scale  # the next step starts from it: one device read per step

    def _judge_update(self, before: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Relative size of this step's update; a step that should have updated but changed nothing."""
        with torch.no_grad():
            now = [q.detach() for q, _ in before]
            delta = torch._foreach_sub(now, [old for _, old in before])
            moved = norm_of(delta)
            size = norm_of([old for _, old in before])
        ratio = moved / size if size > 0 else float("nan")
        self.history["update_ratio"].append(ratio)
        self.history["ratio_steps"].append(float(self.steps))
        grad = self.history["grad_norm"][-1] if self._checked and self.history["grad_norm"] else None
        if not (moved == 0.0 and self._updated and self._stepped and grad is not None and grad > 0
                and not any(f.id == "optim.step_skipped" for f in self.findings)):
            return
        step, zero = self.steps - 1, self._zero_rate()  # `steps` already counts this step: 0-based as `fired`
        if zero == "scheduled" and not self._scheduled_zero:
            # HF's linear, cosine and constant warm-ups (and Lightning's) give the first update lr 0: no
            # skip. A schedule at 0 on a second measured step (ratio_every apart) trains nothing: said then.
            # The next update is measured at once: an empty one says nothing of its size (lr 10 + warm-up).
            self._scheduled_zero = self._measure_next = True
            return
        why = {"set": " at learning rate 0 in every parameter group",
               "scheduled": " at learning rate 0 in every parameter group again: its schedule gave 0 on an earlier "
                            "measured step too"}.get(zero or "", "")
        self._add(make("optim.step_skipped", "warning", "optimizer", f"step {step}: optimizer.step() changed none "
                       f"of {len(before)} parameters although the gradient norm was {grad:.3g}{why}", CHECK,
                       hint="the step ran without effect: zero_grad (or set_to_none) between backward and step, a "
                            "learning rate of 0, parameters missing from its groups",
                       step=step, grad_norm=grad, parameters=len(before),
                       **({"learning_rates": [lr for lr, _ in self._rates or []]} if zero else {})))

    def _judge_skips(self, scale: float) -> None:
        """Skipping most steps, or a scale below 1: the run trains on nothing (said once each)."""
        said = {f.id for f in self.findings}
        if "amp.steps_skipped" not in said and self.steps >= SKIP_WINDOW and self.skipped / self.steps >= 0.5:
            self._add(make("amp.steps_skipped", "error", "optimizer", f"the gradient scaler skipped {self.skipped} of "
                           f"{self.steps} steps; the scale is now {scale:g}", CHECK,
                           hint="run `signalchain doctor --family precision` on the pipeline: it names the op that "
                                "overflows and whether the gradients are finite at scale 1",
                           skipped=self.skipped, steps=self.steps, scale=scale))
        if "amp.scale_collapse" not in said and scale < 1.0:
            self._add(make("amp.scale_collapse", "error", "optimizer", f"the loss scale fell to {scale:g} after "
                           f"{self.skipped} skipped steps of {self.steps}: the gradients are non-finite at any scale",
                           CHECK, hint="find the op that makes the gradient NaN: Monitor(replay=...) locates it",
                           skipped=self.skipped, steps=self.steps, scale=scale))
