"""What every experiment of one doctor run shares: the pipeline, the seed, the budget, the results.

Experiments put their measurements in `metrics` (for the report's pictures) and read each other's
findings through `findings`, so a later judge (the overfit verdict) can name which connection broke.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..findings import Finding
from ._seed import seed_everything
from .capture import GoldenRun, run_golden

__all__ = ["Budget", "BUDGETS", "Context"]


@dataclass(frozen=True)
class Budget:
    """How much work each experiment may do (Cockpit-style named presets)."""

    overfit_steps: int = 60
    sweep_lrs: int = 10
    sweep_steps: int = 4
    probe_steps: int = 8
    update_steps: int = 3
    loader_batches: int = 8
    numerics_steps: int = 3  # updates watched by the cheap non-finite trigger (numerics family)
    amp_steps: int = 6  # updates observed under the loss scaler (precision family)
    cond_batches: int = 8  # loader batches traced up to the condition (conditioning family)
    cond_examples: bool = False  # also read every training caption via training_examples() (slow)
    guidance_frames: int = 8  # frames generated per guidance probe (conditioning family)
    gen_prompts: int = 2  # prompts per generate call (generation family)
    gen_frames: int = 50  # frames per generated sample (generation family)
    gen_train_steps: int = 12  # updates of the short training whose checkpoints are compared (generation family)
    gen_data_batches: int = 4  # loader batches measured for repetition-prone data (generation family)
    gen_sweep: bool = True  # sweep sampling settings beyond the one-at-a-time resets (generation family)
    gen_examples: int = 0  # training_examples() searched for a generated copy; 0: the loader's only (slow)
    # timed updates on loader batches (performance family): 1 + 4 repeats of the longest worker period
    # judged (8), so a slow worker among up to 8 and restarts every <= 16 batches both show; economy: 17
    perf_steps: int = 33
    perf_sync_steps: int = 2  # updates whose host reads (syncs) are counted (performance family)


BUDGETS = {
    "economy": Budget(overfit_steps=30, sweep_lrs=7, sweep_steps=3, probe_steps=5, loader_batches=6,
                      numerics_steps=2, amp_steps=3, cond_batches=4,
                      gen_prompts=2, gen_frames=40, gen_train_steps=6, gen_data_batches=3, gen_sweep=False,
                      perf_steps=17, perf_sync_steps=1),
    "business": Budget(),
    "full": Budget(overfit_steps=150, sweep_lrs=16, sweep_steps=6, probe_steps=16, update_steps=5, loader_batches=12,
                   numerics_steps=6, amp_steps=12, cond_batches=16, cond_examples=True, guidance_frames=16,
                   gen_prompts=4, gen_frames=100, gen_train_steps=40, gen_data_batches=8, gen_examples=256,
                   perf_steps=49, perf_sync_steps=3),
}


@dataclass
class Context:
    pipeline: Any
    seed: int = 0
    budget: Budget = field(default_factory=Budget)
    progress: Callable[[str], None] | None = None
    findings: list[Finding] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _golden: GoldenRun | None = None
    _batch: Any = None

    def say(self, what: str) -> None:
        if self.progress is not None:
            self.progress(what)

    def golden(self) -> GoldenRun:
        """One recorded step of a freshly built model on the golden batch (cached)."""
        if self._golden is None:
            self._golden = run_golden(self.pipeline, self.seed)
        return self._golden

    def batch(self) -> Any:
        if self._batch is None:
            seed_everything(self.seed)
            self._batch = self.pipeline.golden_batch(self.seed)
        return self._batch

    def fresh_model(self) -> torch.nn.Module:
        seed_everything(self.seed)
        return self.pipeline.build_model(self.seed)

    def found(self, *ids: str) -> list[Finding]:
        """Findings already made in this run with one of these ids."""
        return [f for f in self.findings if f.id in ids]

    def timed(self, name: str) -> _Timer:
        return _Timer(self, name)

    def attempt(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[Finding]]:
        """Run one experiment; if it raises, return (None, [the finding that says whose crash it is])."""
        from ._crash import crash_finding

        try:
            with self.timed(name):
                return fn(*args, **kwargs), []
        except Exception as exc:
            return None, [crash_finding(name, exc)]


class _Timer:
    def __init__(self, ctx: Context, name: str):
        self.ctx, self.name = ctx, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.ctx.timings[self.name] = self.ctx.timings.get(self.name, 0.0) + time.perf_counter() - self.t0
