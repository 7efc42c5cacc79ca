"""LR schedulers a trainer was configured with, against how often they stepped (live runs).

Lightning steps the schedulers of `configure_optimizers` itself only in automatic optimisation; with
`automatic_optimization = False` the training step must call `self.lr_schedulers().step()`, and a
run without it keeps its first learning rate for good (the warm-up's lr/10, say) with no warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...findings import Finding
from ..base import make

__all__ = ["ScheduleState", "judge_schedulers", "STEPS_BEFORE"]

CHECK = "checks.schedulers"
STEPS_BEFORE = 20  # optimizer steps (or epochs x 10) after which a scheduler that never stepped is read


@dataclass(frozen=True)
class ScheduleState:
    name: str  # the scheduler's class
    interval: str  # "step" or "epoch", as configured
    frequency: int
    stepped: int  # its step() calls after the constructor's (last_epoch)
    lr: float | None = None  # the rate it set last (its first group's)


def judge_schedulers(states: Sequence[ScheduleState], optimizer_steps: int, epochs: int,
                     manual: bool = False) -> list[Finding]:
    out: list[Finding] = []
    for s in states:
        due = optimizer_steps // max(s.frequency, 1) if s.interval == "step" else epochs // max(s.frequency, 1)
        if s.stepped > 0 or due < (STEPS_BEFORE if s.interval == "step" else 2):
            continue
        why = (" with `automatic_optimization = False`: Lightning does not step schedulers in manual optimisation"
               if manual else "")
        lr = f" (the rate stays at {s.lr:.3g})" if s.lr is not None else ""
        out.append(make("optim.scheduler_not_stepped", "warning", "optimizer",
                        f"the configured {s.name} (interval {s.interval!r}) has not stepped once in {due} "
                        f"{'optimizer steps' if s.interval == 'step' else 'epochs'}{why}: the schedule never "
                        f"applies{lr}", CHECK,
                        hint="call `sch = self.lr_schedulers(); sch.step()` after `opt.step()` in training_step (or "
                             "at epoch end for interval 'epoch'); in automatic optimisation check the scheduler dict "
                             "returned by configure_optimizers", scheduler=s.name, interval=s.interval,
                        stepped=s.stepped, due=due, manual=manual, lr=s.lr))
    return out
