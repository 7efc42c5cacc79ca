"""`doctor`: run families of experiments and checks on a pipeline, merge their findings.

A family is one named diagnosis (data path, optimisation, numerics…). A symptom — what a user
reports — selects the families worth running. Every family runs on its own: one that crashes
becomes a finding and the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UsageError
from ..findings import Finding, Severity, sort_findings
from ..trace import Trace
from ._crash import crash_finding
from .context import BUDGETS, Budget, Context

__all__ = ["Family", "FAMILIES", "ORDER", "SYMPTOMS", "DoctorResult", "family", "run_doctor", "select_families"]


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    run: Callable[[Context], list[Finding]]
    order: int = 100  # families run in this order: later ones may read earlier findings


#: Where each family runs. Data before optimisation (whose overfit verdict reads data findings).
ORDER = {"audio": 10, "data": 20, "numerics": 30, "optimisation": 40, "precision": 50, "conditioning": 60,
         "generation": 70, "output": 80, "splits": 90, "performance": 100}


FAMILIES: dict[str, Family] = {}

#: What a user reports → the families worth running (DESIGN §5). Families not built yet are named
#: anyway; the doctor says which of them it could not run.
SYMPTOMS: dict[str, tuple[str, ...]] = {
    "flat-loss": ("data", "optimisation", "precision"),  # a scaler skipping every step is a flat loss
    "unstable": ("optimisation", "numerics", "precision"),
    "nan": ("numerics", "precision", "audio", "data"),  # an empty loss mask makes a mean of nothing
    "silent": ("audio", "data", "output"),
    "repetitive": ("generation", "data"),
    "ignores-caption": ("conditioning", "data", "optimisation"),  # gradients must reach the condition path
    "too-good-validation": ("splits", "data"),  # targets visible in the model's inputs look too good too
    "slow": ("performance",),
}


def family(name: str, title: str) -> Callable[[Callable[[Context], list[Finding]]], Callable[[Context], list[Finding]]]:
    """Register a family: `fn(ctx) -> findings`. Families run in `ORDER`, unknown names last."""

    def deco(fn: Callable[[Context], list[Finding]]) -> Callable[[Context], list[Finding]]:
        FAMILIES[name] = Family(name, title, fn, ORDER.get(name, 1000))
        return fn

    return deco


@dataclass
class DoctorResult:
    findings: list[Finding]
    families: list[str]
    unavailable: list[str]
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    trace: Trace | None = None
    seconds: float = 0.0


def select_families(families: Sequence[str] = (), symptom: str | None = None) -> tuple[list[str], list[str]]:
    """The families to run (in a fixed order) and the requested ones that do not exist yet."""
    from . import families as _registered  # noqa: F401  (importing registers every family)

    if symptom is not None and symptom not in SYMPTOMS:
        raise UsageError(f"unknown symptom {symptom!r}; allowed: {', '.join(SYMPTOMS)}")
    wanted = list(families) + (list(SYMPTOMS[symptom]) if symptom else [])
    if not wanted:
        wanted = list(FAMILIES)
    known = set(FAMILIES) | {f for fams in SYMPTOMS.values() for f in fams}
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise UsageError(f"unknown family {unknown[0]!r}; allowed: {', '.join(sorted(known))}")
    run = sorted((f for f in FAMILIES if f in wanted), key=lambda f: FAMILIES[f].order)
    missing = [f for f in dict.fromkeys(wanted) if f not in FAMILIES]
    return run, missing


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (id, stage): the most severe, then the first."""
    best: dict[tuple[str, str | None], Finding] = {}
    for f in findings:
        key = (f.id, f.stage)
        if key not in best or f.severity.rank < best[key].severity.rank:
            best[key] = f
    return sort_findings(best.values())


def run_doctor(pipeline: Any, families: Sequence[str] = (), symptom: str | None = None, seed: int = 0,
               budget: str | Budget = "business", progress: Callable[[str], None] | None = None) -> DoctorResult:
    """Run the selected families on `pipeline` and return their merged findings and measurements."""
    names, missing = select_families(families, symptom)
    ctx = Context(pipeline=pipeline, seed=seed, budget=BUDGETS[budget] if isinstance(budget, str) else budget,
                  progress=progress)
    t0 = time.perf_counter()
    flush = torch.set_flush_denormal(True)  # diverging runs make denormals, which are very slow on CPUs
    for name in names:
        ctx.say(name)
        with ctx.timed(name):
            try:
                ctx.findings.extend(FAMILIES[name].run(ctx))
            except Exception as exc:
                ctx.findings.append(crash_finding(name, exc))
    if flush:
        torch.set_flush_denormal(False)
    notes = [Finding("doctor.family_unavailable", Severity.INFO, None,
                     f"the {m} family is not available in this version of signalchain", {"family": m},
                     check="doctor") for m in missing]
    trace = ctx._golden.trace if ctx._golden is not None else None
    return DoctorResult(findings=_dedupe(ctx.findings) + notes, families=names, unavailable=missing,
                        metrics=ctx.metrics, timings=ctx.timings, trace=trace, seconds=time.perf_counter() - t0)
