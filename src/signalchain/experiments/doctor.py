"""`doctor`: run families of declared steps on a pipeline, merge their findings.

A family is one named diagnosis (data path, optimisation, numerics…): a title and a list of `Step`s.
A step declares what it needs (capabilities), what it measures, which judges read the record and
what it shows; one runner (`run_family`) owns for every step the capability check, progress, timing,
the crash guard, the judges' crash guard (named after the judge function) and the pictures. Families
run in the order their `after=` declares. A symptom — what a user reports — selects the families worth
running. Every family runs on its own: one that crashes becomes a finding and the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks.base import run_check
from ..errors import UsageError
from ..findings import Finding, Severity, check_failed, sort_findings
from ..pipeline import Pipeline, capabilities, missing_capability
from ..records.figures import Figure
from ..trace import Trace
from ._crash import crash_finding
from .context import BUDGETS, Budget, Context, Knob, declare_knobs
from .names import SYMPTOMS

__all__ = [
    "Family",
    "FAMILIES",
    "SYMPTOMS",
    "DoctorResult",
    "Judge",
    "Step",
    "FAMILY",
    "PRIOR",
    "SELF",
    "check_name",
    "family_order",
    "ordered_steps",
    "judge",
    "register",
    "run_doctor",
    "run_family",
    "select_families",
]


class _Input:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: A judge's inputs: the step's own record, the findings this family made so far, every finding so far.
SELF, FAMILY, PRIOR = _Input("SELF"), _Input("FAMILY"), _Input("PRIOR")


@dataclass(frozen=True)
class Judge:
    """A check function and what it reads: SELF, FAMILY, PRIOR, a result's name, or `fn(ctx)`."""

    fn: Callable[..., Iterable[Finding] | None]
    inputs: tuple[Any, ...] = (SELF,)


def judge(fn: Callable[..., Iterable[Finding] | None], *inputs: Any) -> Judge:
    """`judge(judge_update, SELF, trainable)`; no inputs: the step's own record."""
    return Judge(fn, inputs or (SELF,))


@dataclass(frozen=True)
class Step:
    """One measurement of a family and what is judged and shown of it.

    name: the record is `ctx.result("family.name")` (and `ctx.result(result)` when given); the timing
        key is `timing` or "family.name" ("" = not timed); a crash in `measure` is the finding
        `crash_finding(timing key)` unless `isolated` is False (then it ends the family, as a crash
        outside any step does).
    when: run only if `when(ctx)`; needs: capabilities ("a|b": either), checked after `when`; a
        missing one skips the step, with the capability finding when `needed_by` names the check.
    measure: `fn(ctx, *reads) -> record` (`reads` resolve like a judge's inputs); None (or an empty
        dict/list) skips judges and pictures. Without a measure the record is the result the first
        of `reads` names (SELF for the judges and `show`).
    judges: run in order, each guarded by `run_check` under the judge function's name.
    show: `fn(record) -> {metric key: Figure or data}`; stop: after this step, end the family when
        `stop(record)`. after: steps of the family that run before this one; otherwise steps run in
        the order they are declared.
    """

    name: str
    measure: Callable[..., Any] | None = None
    reads: tuple[Any, ...] = ()
    judges: tuple[Judge | Callable[..., Any], ...] = ()
    show: Callable[[Any], Mapping[str, Any]] | None = None
    needs: tuple[str, ...] = ()
    needed_by: str | None = None
    when: Callable[[Context], bool] | None = None
    say: str | None = None
    timing: str | None = None
    isolated: bool = True
    result: str | None = None
    stop: Callable[[Any], bool] | None = None
    empty_ok: bool = False  # judge and show a None record too (the judges say what None means)
    after: tuple[str, ...] = ()  # steps of this family that must run first (else: the order declared)


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    steps: tuple[Step, ...]
    after: tuple[str, ...] = ()  # families that run first (their findings and records are read here)
    needs: tuple[str, ...] = ()  # capabilities without which no step runs
    needed_by: str = ""
    knobs: Mapping[str, Knob] = field(default_factory=dict)


FAMILIES: dict[str, Family] = {}



def register(fam: Family) -> Family:
    """Add a family (and declare its budget knobs)."""
    declare_knobs(dict(fam.knobs))
    FAMILIES[fam.name] = fam
    return fam


def family_order() -> list[str]:
    """Every registered family, each after the ones its `after=` names (ties: by name)."""
    from . import families as _registered  # noqa: F401  (importing registers every family)

    return _resolve(sorted(FAMILIES), {n: f.after for n, f in FAMILIES.items()})


@dataclass
class DoctorResult:
    findings: list[Finding]
    families: list[str]
    unavailable: list[str]
    metrics: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    trace: Trace | None = None
    seconds: float = 0.0
    steps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # family -> run_family's log


def select_families(families: Sequence[str] = (), symptom: str | None = None) -> tuple[list[str], list[str]]:
    """The families to run (in a fixed order) and the requested ones that do not exist yet."""
    order = family_order()
    if symptom is not None and symptom not in SYMPTOMS:
        raise UsageError(f"unknown symptom {symptom!r}; allowed: {', '.join(SYMPTOMS)}")
    wanted = list(families) + (list(SYMPTOMS[symptom]) if symptom else [])
    if not wanted:
        wanted = list(FAMILIES)
    known = set(FAMILIES) | {f for fams in SYMPTOMS.values() for f in fams}
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise UsageError(f"unknown family {unknown[0]!r}; allowed: {', '.join(sorted(known))}")
    run = [f for f in order if f in wanted]
    missing = [f for f in dict.fromkeys(wanted) if f not in FAMILIES]
    return run, missing


def check_name(fn: Callable[..., Any]) -> str:
    """A judge's name in findings: its module (without the package) and its name."""
    module = getattr(fn, "__module__", "") or ""
    return f"{module.removeprefix('signalchain.')}.{getattr(fn, '__name__', type(fn).__name__)}"


def _gap(pipeline: Pipeline, needs: Iterable[str]) -> str | None:
    """The first capability of `needs` the pipeline lacks ("a|b": either will do; the first is named)."""
    caps = capabilities(pipeline)
    for need in needs:
        options = need.split("|")
        if not any(all(c in caps for c in o.split("+")) for o in options):
            return next(c for c in options[0].split("+") if c not in caps)
    return None


def _nothing(record: Any) -> bool:
    return record is None or (isinstance(record, (dict, list)) and not record)


def _value(ctx: Context, spec: Any, record: Any, mine: list[Finding]) -> Any:
    if spec is SELF:
        return record
    if spec is FAMILY:
        return list(mine)
    if spec is PRIOR:
        return ctx.findings + mine
    if isinstance(spec, str):
        return ctx.result(spec)
    return spec(ctx)


#: `DoctorResult.steps` statuses. Only JUDGED is evidence: a judge read a real record (and did not
#: answer that it could not judge). The others say why a step is not evidence.
JUDGED, MEASURED, SKIPPED, NOT_NEEDED, EMPTY, CRASHED = "judged", "measured", "skipped", "not needed", "empty", \
    "crashed"
#: what a judge answers when it could not judge (a stage not tapped; nothing compiled to watch)
_CANNOT = frozenset({"pipeline.capability_missing", "perf.not_compiled"})


def _note(log: dict[str, dict[str, Any]] | None, step: Step, status: str, why: str = "",
          checks: Sequence[str] = (), ids: Sequence[str] = ()) -> None:
    if log is not None:
        log[step.name] = {"status": status, "why": why, "checks": list(checks), "ids": sorted(set(ids))}


def run_family(fam: Family, ctx: Context, log: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """Run one family's steps; return their findings (a crash outside an isolated step raises).

    `log`, when given, gets one entry per step that did something or was skipped for a reason
    (`{"status", "why", "checks", "ids"}`, statuses above): what the family actually looked at."""
    out: list[Finding] = []
    gap = _gap(ctx.pipeline, fam.needs)
    if gap is not None:
        for step in fam.steps:
            _note(log, step, SKIPPED, f"no {gap}")
        return [missing_capability(ctx.pipeline, gap, fam.needed_by)]  # type: ignore[list-item]
    for step in ordered_steps(fam):
        if step.when is not None and not step.when(ctx):
            if step.measure is not None or step.judges:
                _note(log, step, NOT_NEEDED)
            continue
        gap = _gap(ctx.pipeline, step.needs)
        if gap is not None:
            if step.needed_by:
                out.append(missing_capability(ctx.pipeline, gap, step.needed_by))  # type: ignore[arg-type]
            _note(log, step, SKIPPED, f"no {gap}")
            continue
        if step.say or step.measure is not None:  # every measurement is news to a progress line
            ctx.say(step.say or f"{fam.name}: {step.name}")
        record = ctx.result(step.reads[0]) if step.measure is None and step.reads else None
        if step.measure is not None:
            key = f"{fam.name}.{step.name}" if step.timing is None else step.timing
            args = [_value(ctx, x, None, out) for x in step.reads]
            try:
                if key:
                    with ctx.timed(key):
                        record = step.measure(ctx, *args)
                else:
                    record = step.measure(ctx, *args)
            except Exception as exc:
                if not step.isolated:
                    _note(log, step, CRASHED, f"{type(exc).__name__}: {exc}"[:200])
                    raise
                out.append(crash_finding(key or f"{fam.name}.{step.name}", exc))
                _note(log, step, CRASHED, f"{type(exc).__name__}: {exc}"[:200])
                continue
            ctx.results[f"{fam.name}.{step.name}"] = record
            if step.result:
                ctx.results[step.result] = record
            if _nothing(record) and not step.empty_ok:
                _note(log, step, EMPTY, "nothing to measure")
                continue
        elif step.reads and _nothing(record) and not step.empty_ok and step.judges:
            _note(log, step, EMPTY, f"{step.reads[0]} holds nothing")  # judges below say what None means
        mine: list[Finding] = []
        names = []
        for j in step.judges:
            j = j if isinstance(j, Judge) else Judge(j)
            names.append(check_name(j.fn))
            mine += run_check(names[-1], j.fn, *[_value(ctx, x, record, out + mine) for x in j.inputs])
        out += mine
        cannot = [f for f in mine if f.id in _CANNOT]
        if cannot and len(cannot) == len(mine):
            _note(log, step, SKIPPED, cannot[0].message, names)
        elif step.judges and not (log is not None and log.get(step.name, {}).get("status") == EMPTY):
            _note(log, step, JUDGED, "", names, [f.id for f in mine if f.id not in _CANNOT])
        elif step.measure is not None and not step.judges:
            _note(log, step, MEASURED)
        if step.show is not None:
            try:  # the pictures never sink the findings
                shown = dict(step.show(record))
            except Exception as exc:
                out.append(check_failed(check_name(step.show), exc))
                shown = {}
            for metric, fig in shown.items():
                ctx.metrics[metric] = fig.to_dict() if isinstance(fig, Figure) else fig
        if step.stop is not None and step.stop(record):
            break
    return out


def _resolve(names: Sequence[str], after: Mapping[str, Sequence[str]]) -> list[str]:
    """`names` so that each comes after the ones `after` names (ties: the order given)."""
    done: list[str] = []
    left = list(names)
    while left:
        ready = [n for n in left if all(a in done or a not in names for a in after.get(n, ()))]
        if not ready:
            raise RuntimeError(f"steps or families wait on each other: {', '.join(left)}")
        done.append(ready[0])
        left.remove(ready[0])
    return done


def ordered_steps(fam: Family) -> list[Step]:
    by_name = {s.name: s for s in fam.steps}
    return [by_name[n] for n in _resolve([s.name for s in fam.steps], {s.name: s.after for s in fam.steps})]


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (id, stage): the most severe, then the first."""
    best: dict[tuple[str, str | None], Finding] = {}
    for f in findings:
        key = (f.id, f.stage)
        if key not in best or f.severity.rank < best[key].severity.rank:
            best[key] = f
    return sort_findings(best.values())


def run_doctor(pipeline: Pipeline, families: Sequence[str] = (), symptom: str | None = None, seed: int = 0,
               budget: str | Budget = "business", progress: Callable[[str], None] | None = None) -> DoctorResult:
    """Run the selected families on `pipeline` and return their merged findings and measurements."""
    names, missing = select_families(families, symptom)
    ctx = Context(pipeline=pipeline, seed=seed, budget=BUDGETS[budget] if isinstance(budget, str) else budget,
                  progress=progress)
    t0 = time.perf_counter()
    flush = torch.set_flush_denormal(True)  # diverging runs make denormals, which are very slow on CPUs
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        ctx.say(name)
        with ctx.timed(name):
            try:
                ctx.findings.extend(run_family(FAMILIES[name], ctx, steps.setdefault(name, {})))
            except Exception as exc:
                ctx.findings.append(crash_finding(name, exc))
    if flush:
        torch.set_flush_denormal(False)
    notes = [Finding("doctor.family_unavailable", Severity.INFO, None,
                     f"the {m} family is not available in this version of signalchain", {"family": m},
                     check="doctor") for m in missing]
    trace = ctx._golden.trace if ctx._golden is not None else None
    return DoctorResult(findings=_dedupe(ctx.findings) + notes, families=names, unavailable=missing,
                        metrics=ctx.metrics, timings=ctx.timings, trace=trace, seconds=time.perf_counter() - t0,
                        steps=steps)
