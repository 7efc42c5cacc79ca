"""`verify`: run the doctor's families on a failing state and a fixed state, seed by seed.

A *state* is anything with `name` and `evaluate(seed, families, golden=True) -> (findings, metrics)`:
the doctor's findings and figure dicts for those families on that seed (with `golden`, also the golden
step's loss taps and audio; the control runs skip them). `PipelineState` runs the doctor in this
process on a `Pipeline`; a state backed by a subprocess (a commit checked out elsewhere, whose
`signalchain doctor --json` is read back) fits the same interface, because everything read here
comes from what a doctor report holds: error findings, the overfit figure, the `verify.loss` table.

The symptom measure is read from those outputs (`MEASURES`): the overfit drop for `flat-loss`, the
non-finite loss values of the golden step for `nan`/`unstable` (read from the step's own taps, not
from the numerics trigger, which a `nan_to_num` on the loss silences), else the number of errors.

Control (`default_control`): families outside the symptom's set that are cheap on the reference
(conditioning ≈ 3 s, numerics ≈ 0.5 s, audio ≈ 1 s a seed) and see the two things a fix most often
breaks beside what it fixes: the caption path and finite values. A control family that already
fails on the failing state still works as a control: only errors the failing state lacks count.

Each evaluation also returns the doctor's step log (`STEPS`: which steps judged something, which
were skipped and why), so that the judge can tell a control that found nothing from a control that
could not run (no caption tapped, no loader): the second is no evidence, and the verdict says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..errors import UsageError
from ..findings import Finding, Severity, jsonable
from ..pipeline import Pipeline
from ..records.figures import Audio, Table
from ..records.verify import ErrorSeen, Measure, SideRun, VerifyMeasurement
from .context import Budget
from .doctor import family_order, run_doctor, select_families

__all__ = ["State", "PipelineState", "MEASURES", "CONTROL_CANDIDATES", "STEPS", "choose_measure", "default_control",
           "read_measure", "failing_stages", "run_verify"]

#: Cheap families that see what a fix breaks most often beside its target, in order of preference.
CONTROL_CANDIDATES = ("conditioning", "numerics", "audio")

MEASURES = {
    "overfit_drop": Measure("overfit_drop", "overfit drop (1 − final/initial loss on the golden batch)", True,
                            figure="overfit"),
    "loss_nonfinite": Measure("loss_nonfinite", "non-finite values in the loss taps of the golden step", False,
                              0.0, figure="verify.loss"),
    "errors": Measure("errors", "error findings of the symptom's families", False, 0.0),
}

_OVERFIT_SERIES = "loss on the golden batch"  # families/optimisation.py's overfit figure
#: The metrics key under which a state returns the doctor's step log (`DoctorResult.steps`); a state
#: that does not return it has not shown that its families ran.
STEPS = "verify.steps"


class State(Protocol):
    """One side of a verification: the failing code or the fixed one."""

    name: str

    def evaluate(self, seed: int, families: Sequence[str], golden: bool = True) -> tuple[list[Finding], dict[str, Any]]:
        """The doctor's findings and figure dicts for `families` on `seed`; with `golden`, also the golden
        step's `verify.loss` table and `verify.audio.*` players (`golden_figures`)."""
        ...


class PipelineState:
    """A state that is a `Pipeline` object in this process (a path spec, a module, the reference + faults)."""

    def __init__(self, pipeline: Pipeline, name: str, budget: str | Budget = "economy",
                 progress: Callable[[str], None] | None = None):
        self.pipeline, self.name, self.budget, self.progress = pipeline, name, budget, progress

    def evaluate(self, seed: int, families: Sequence[str], golden: bool = True) -> tuple[list[Finding], dict[str, Any]]:
        say = (lambda what: self.progress(f"{self.name} · seed {seed} · {what}")) if self.progress else None
        result = run_doctor(self.pipeline, families, seed=seed, budget=self.budget, progress=say)
        metrics = dict(result.metrics)
        metrics[STEPS] = result.steps  # what each family looked at: a control that ran nothing is no pass
        if not golden:
            return list(result.findings), metrics
        trace = result.trace
        if trace is None:  # no family recorded the golden step: record it (one step) for the loss taps and audio
            from .capture import run_golden

            try:
                trace = run_golden(self.pipeline, seed).trace
            except Exception:  # the doctor already said what crashed; the measure will be missing
                trace = None
        if trace is not None:
            metrics.update(golden_figures(trace))
        return list(result.findings), metrics


def golden_figures(trace: Any) -> dict[str, Any]:
    """The golden step's loss taps (non-finite counts) and its audio stages (example 0), as figure dicts."""
    rows = []
    for rec in trace.records:
        if rec.name != "loss" and not rec.name.startswith("loss."):
            continue
        s = rec.summary
        if "finite" in s:  # a scalar
            bad = 0 if s["finite"] else 1
            nan = bad if str(s.get("value")) == "nan" else 0
            rows.append([rec.name, nan, bad - nan, 1])
        elif "nan_count" in s:
            rows.append([rec.name, int(s["nan_count"]), int(s["inf_count"]), int(s.get("numel", 0))])
    out: dict[str, Any] = {"verify.loss": Table("Non-finite values in the loss taps (golden step)",
                                                ["stage", "NaN", "inf", "of"], rows).to_dict()}
    for rec in trace.records:
        if rec.kind == "audio" and rec.has_value and rec.sample_rate:
            clip = rec.value[0] if getattr(rec.value, "ndim", 0) >= 2 else rec.value  # example 0: [C, T]
            out[f"verify.audio.{rec.name}"] = Audio(f"{rec.name} (golden batch, example 0)", rec.sample_rate,
                                                    [{"label": rec.name, "audio": clip}]).to_dict()
    return out


def choose_measure(symptom: str | None, families: Sequence[str]) -> Measure:
    """The symptom's own number: what a user reporting it watches."""
    if symptom == "flat-loss" or (symptom is None and "optimisation" in families):
        return MEASURES["overfit_drop"]
    if symptom in ("nan", "unstable") or (symptom is None and "numerics" in families):
        return MEASURES["loss_nonfinite"]
    return MEASURES["errors"]


def read_measure(measure: Measure, findings: Sequence[Finding], metrics: Mapping[str, Any]) -> float | None:
    """The measure's value in one doctor output (None when that output does not hold it)."""
    if measure.name == "errors":
        return float(sum(f.severity is Severity.ERROR for f in findings))
    if measure.name == "overfit_drop":
        fig = metrics.get("overfit") or {}
        ys = [float(y) for y in (fig.get("series", {}).get(_OVERFIT_SERIES) or [[], []])[1]]
        if len(ys) < 2 or not math.isfinite(ys[0]) or ys[0] <= 0:
            return None
        tail = ys[-3:]  # the last few steps: one noisy step does not decide
        if not all(math.isfinite(y) for y in tail):
            return 0.0  # a run that diverged has not dropped
        return 1.0 - min(tail) / ys[0]
    if measure.name == "loss_nonfinite":
        table = metrics.get("verify.loss")
        if not table or not table.get("rows"):
            return None
        return float(sum(int(r[1]) + int(r[2]) for r in table["rows"]))
    raise ValueError(f"unknown measure {measure.name!r}; known: {', '.join(MEASURES)}")


def failing_stages(measure: Measure, metrics: Mapping[str, Any]) -> list[str]:
    """The stages where the measure shows the failure (the loss taps that hold non-finite values)."""
    if measure.name != "loss_nonfinite":
        return []
    rows = (metrics.get("verify.loss") or {}).get("rows") or []
    return [str(r[0]) for r in rows if int(r[1]) + int(r[2]) > 0]


def default_control(families: Sequence[str]) -> tuple[list[str], str]:
    """Up to two cheap families outside `families`, and a note saying why."""
    picked = [f for f in CONTROL_CANDIDATES if f not in families][:2]
    note = (f"control: {', '.join(picked)} (cheap families outside the symptom's set that see the caption path "
            "and non-finite values; only errors the failing state lacks count as a regression)"
            if picked else "control: none (every cheap family is in the symptom's set; name one with --control)")
    return picked, note


def _errors(findings: Sequence[Finding]) -> list[ErrorSeen]:
    return [ErrorSeen(f.id, f.stage, f.message) for f in findings if f.severity is Severity.ERROR]


def _side(state: State, seed: int, families: Sequence[str], control: Sequence[str], measure: Measure,
          keep_audio: bool) -> SideRun:
    t0 = time.perf_counter()
    try:
        findings, metrics = state.evaluate(seed, families)
        control_findings, control_metrics = state.evaluate(seed, control, golden=False) if control else ([], {})
    except Exception as exc:  # the state itself could not run (not a crash inside the pipeline: the doctor keeps those)
        return SideRun(seed, [], [], None, time.perf_counter() - t0, failed=f"{type(exc).__name__}: {exc}")
    metrics = dict(metrics)
    steps, control_steps = metrics.pop(STEPS, None), control_metrics.get(STEPS) if control else {}
    value = read_measure(measure, findings, metrics)
    notes = [] if value is not None else [f"no {measure.name} in this run's output"]
    if not keep_audio:
        metrics = {k: v for k, v in metrics.items() if not (isinstance(v, dict) and v.get("kind") == "audio")}
    return SideRun(seed, _errors(findings), _errors(control_findings), value, time.perf_counter() - t0, notes,
                   [jsonable(f.to_dict()) for f in findings], metrics, where=failing_stages(measure, metrics),
                   steps=steps, control_steps=control_steps)


def run_verify(before: State, after: State, *, symptom: str | None = None, families: Sequence[str] = (),
               control: Sequence[str] | None = None, seeds: Sequence[int] = (0, 1, 2), budget: str = "economy",
               progress: Callable[[str], None] | None = None) -> VerifyMeasurement:
    """Evaluate both states on every seed: the symptom's families, then the control families."""
    if not families and symptom is None:
        raise UsageError("verify needs --symptom or --family: which failure is the fix meant to remove?")
    names, _missing = select_families(families, symptom)
    waived = control is not None and not control  # an empty control, asked for: test 2 knowingly skipped
    if control is None:
        control, note = default_control(names)
    else:
        control = select_families(control)[0] if control else []  # (no name would select every family)
        note = f"control: {', '.join(control)} (named with --control)" if control else "control: none"
    overlap = sorted(set(control) & set(names))
    if overlap:
        raise UsageError(f"control family {overlap[0]!r} is also a family under test; a control must be "
                         f"outside the symptom's families ({', '.join(names)})")
    measure = choose_measure(symptom, names)
    others = [f for f in family_order() if f not in names and f not in control]
    out = VerifyMeasurement(before.name, after.name, symptom, names, list(control), measure, list(seeds), [], [],
                            budget=budget if isinstance(budget, str) else repr(budget), control_note=note,
                            control_waived=waived, alternatives=others)
    for i, seed in enumerate(seeds):
        for side, state in (("before", before), ("after", after)):
            if progress is not None:
                progress(f"{side} · seed {seed}")
            getattr(out, side).append(_side(state, seed, names, control, measure, keep_audio=i == 0))
    return out

