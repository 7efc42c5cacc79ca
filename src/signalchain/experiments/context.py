"""What every experiment of one doctor run shares: the pipeline, the seed, the budget, the results.

Steps' records are kept by name (`ctx.result("numerics")`), their pictures in `metrics`, their findings
in `findings` (a later judge, the overfit verdict, reads which connections broke). A budget is a named
preset ("economy", "business", "full"); each family declares the knobs it reads, with a value per
preset, next to its steps (`Knob`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..findings import Finding
from ..pipeline import Pipeline
from ._seed import seed_everything
from .capture import GoldenRun, run_golden
from .names import PRESETS  # re-exported: the budget presets, cheapest first (without torch)

__all__ = ["Budget", "BUDGETS", "PRESETS", "Context", "Knob", "KNOBS", "declare_knobs"]



@dataclass(frozen=True)
class Knob:
    """How much of one thing an experiment may do, per preset."""

    economy: Any
    business: Any
    full: Any
    doc: str = ""


#: Every knob a family declared (`declare_knobs`), by name.
KNOBS: dict[str, Knob] = {}


def declare_knobs(knobs: dict[str, Knob]) -> None:
    """Register a family's knobs; one name, one knob across all families."""
    for name, k in knobs.items():
        if KNOBS.get(name, k) != k:
            raise ValueError(f"budget knob {name!r} is declared twice with different values")
        KNOBS[name] = k


class Budget:
    """How much work each experiment may do: a preset, and any knob set by hand (`Budget(perf_steps=4)`)."""

    def __init__(self, preset: str = "business", **values: Any):
        if preset not in PRESETS:
            raise ValueError(f"unknown budget preset {preset!r}; allowed: {', '.join(PRESETS)}")
        unknown = sorted(set(values) - set(_declared())) if values else []
        if unknown:
            raise TypeError(f"unknown budget knob {unknown[0]!r}; known: {', '.join(sorted(KNOBS))}")
        object.__setattr__(self, "preset", preset)
        object.__setattr__(self, "values", dict(values))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("preset", "values"):
            raise AttributeError(name)
        knob = _declared().get(name)
        if knob is None:
            raise AttributeError(f"no budget knob {name!r}")
        return self.values[name] if name in self.values else getattr(knob, self.preset)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Budget is frozen")

    def __repr__(self) -> str:
        return f"Budget({self.preset!r}" + "".join(f", {k}={v!r}" for k, v in self.values.items()) + ")"


def _declared() -> dict[str, Knob]:
    from . import families  # noqa: F401  (importing the families declares their knobs)

    return KNOBS


#: The presets by name (`--budget economy|business|full`).
BUDGETS = {name: Budget(name) for name in PRESETS}


@dataclass
class Context:
    pipeline: Pipeline
    seed: int = 0
    budget: Budget = field(default_factory=Budget)
    progress: Callable[[str], None] | None = None
    findings: list[Finding] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    _golden: GoldenRun | None = None
    _batch: Any = None

    def say(self, what: str) -> None:
        if self.progress is not None:
            self.progress(what)

    def result(self, name: str) -> Any:
        """The record the step `name` ("family.step", or the name it declared) produced; None if it did not run."""
        return self.results.get(name)

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

    def timed(self, name: str) -> _Timer:
        return _Timer(self, name)


class _Timer:
    def __init__(self, ctx: Context, name: str):
        self.ctx, self.name = ctx, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.ctx.timings[self.name] = self.ctx.timings.get(self.name, 0.0) + time.perf_counter() - self.t0
