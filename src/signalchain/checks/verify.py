"""Judge a verification: did the fix solve the right problem? (the method's three tests)

1. *Failure gone*: on every seed where the failing state failed, none of its error ids is left in the
   fixed state, and the symptom's own measure improved (and reached its goal where it has one: a
   loss with fewer NaN still has NaN). A fix that hides the symptom fails here: a `nan_to_num` on
   the loss silences the numerics errors but leaves non-finite values in the loss taps.
2. *Control ok*: the fixed state shows no error the failing state lacked, in the control families
   nor in the symptom's own families (a fix that trades one break for another is not a fix).
3. *Every seed*: the failing state failed on every seed, and every seed gives the same verdict.

`verify.not_reproducible` is an error: a failing state that does not fail on some seed (or a verdict
that changes with the seed) cannot confirm a fix; passing it would be the "run that merely restarts
successfully" the method warns about.

Absence is not a pass. A control is evidence only through the steps it judged on the fixed state
(the doctor's step log): a control family that could not run (no caption tapped, no loader) found
nothing because it looked at nothing. An error of the failing state whose step the fixed state
skipped (a missing capability) is not shown gone. Either makes the verdict `verify.inconclusive`
(a warning: nothing is shown wrong, nothing is confirmed), never `verify.fixed`.

Intervals fit their measure: a continuous improvement (the overfit drop) gets a Student t interval
over seeds; a 0/1 outcome per seed (the failure gone or not, and every measure with a goal, whose
test is reaching it) gets an exact binomial (Clopper-Pearson) interval on the rate of seeds where
the fix would fail, which says what so few seeds can show (2 of 2: up to 84 % is still possible).
Pure: records in, findings out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as _stats

from ..findings import Finding
from ..records.verify import (
    ErrorSeen,
    Interval,
    Measure,
    SeedRate,
    SeedVerdict,
    SideRun,
    Steps,
    VerifyMeasurement,
    VerifyVerdict,
)
from .base import make

__all__ = ["judge_seed", "improvement_interval", "failure_rate", "control_evidence", "verdict_of", "judge_verify"]

CHECK = "checks.verify"
LEVEL = 0.95
JUDGED, SKIPPED, CRASHED = "judged", "skipped", "crashed"  # experiments.doctor's step statuses


def _ids(errors: Sequence[ErrorSeen]) -> set[str]:
    return {e.id for e in errors}


def _improvement(measure: Measure, before: float | None, after: float | None) -> float | None:
    if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
        return None
    return (after - before) if measure.higher_is_better else (before - after)


def _at_goal(measure: Measure, value: float | None) -> bool:
    if measure.goal is None or value is None:
        return False
    return value >= measure.goal if measure.higher_is_better else value <= measure.goal


def _downgraded(before: SideRun, after: SideRun) -> list[ErrorSeen]:
    """The failing state's errors that the fixed state still reports at the same stage, as warnings."""
    wanted = {(e.id, e.stage) for e in before.errors}
    return [ErrorSeen(str(f.get("id")), f.get("stage"), str(f.get("message", ""))) for f in after.findings
            if f.get("severity") == "warning" and (f.get("id"), f.get("stage")) in wanted]


def control_evidence(steps: Steps | None) -> tuple[dict[str, list[str]], dict[str, dict[str, str]]]:
    """(family -> steps that judged something, family -> step -> why it did not run) of one step log.

    None (a state that did not return its log) is no evidence at all."""
    ran: dict[str, list[str]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for fam, log in (steps or {}).items():
        ran[fam] = [name for name, e in log.items() if e.get("status") == JUDGED]
        why = {name: str(e.get("why") or e.get("status")) for name, e in log.items()
               if e.get("status") in (SKIPPED, CRASHED)}
        if why:
            skipped[fam] = why
    return ran, skipped


def _unchecked(before: SideRun, after: SideRun) -> list[ErrorSeen]:
    """The failing state's errors found by a step that the fixed state skipped or crashed in: their
    absence there shows nothing. (A step not needed there, or that measured nothing, did look.)"""
    if before.steps is None or after.steps is None:
        return []
    lost: set[str] = set()
    seen: set[str] = set()  # ids of steps that looked on both sides
    for fam, log in before.steps.items():
        there = after.steps.get(fam)
        for name, e in log.items():
            if e.get("status") != JUDGED:
                continue
            status = (there or {}).get(name, {}).get("status")
            (lost if there is None or status in (SKIPPED, CRASHED) else seen).update(e.get("ids", []))
    return [e for e in before.errors if e.id in lost - seen and e.id not in _ids(after.errors)]


def judge_seed(before: SideRun, after: SideRun, measure: Measure, control_needed: bool = True) -> SeedVerdict:
    """The three tests on one seed, and what the fixed state's control actually judged."""
    reproduced = before.failed is None and bool(before.errors)
    persisting = [e for e in after.errors if e.id in _ids(before.errors)] + _downgraded(before, after)
    regressed = ([e for e in after.errors if e.id not in _ids(before.errors)]
                 + [e for e in after.control_errors if e.id not in _ids(before.control_errors)])
    gain = _improvement(measure, before.measure, after.measure)
    measure_ok: bool | None = None
    if gain is not None and not _at_goal(measure, before.measure):  # a measure blind to this failure: errors decide
        reached = measure.goal is None or _at_goal(measure, after.measure)
        measure_ok = gain > 0 and reached
    failure_gone = reproduced and after.failed is None and not persisting and measure_ok is not False
    ran, skipped = control_evidence(after.control_steps)
    return SeedVerdict(before.seed, reproduced, persisting, regressed, gain, measure_ok, failure_gone,
                       control_ok=after.failed is None and not regressed, unchecked=_unchecked(before, after),
                       control_ran=ran, control_skipped=skipped, control_needed=control_needed)


def improvement_interval(gains: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Mean improvement over seeds and a Student-t interval (n − 1 degrees of freedom): for a continuous
    measure (a 0/1 outcome gets `failure_rate`).

    With 3 seeds the t quantile is 4.30: the interval is wide and says the sign, rarely the size.
    A single seed has no interval (None).
    """
    xs = [float(g) for g in gains if g is not None and math.isfinite(g)]
    n = len(xs)
    if n < 2:
        return None
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(_stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    method = f"Student t, {n} seeds ({n - 1} df)"
    return Interval(mean, mean - half, mean + half, n, level, method,
                    f"{mean:+.3g} ({level:.0%} {method}: {mean - half:+.3g} to {mean + half:+.3g})")


def _pct(x: float) -> str:
    return f"{100 * x:.2g}%" if x < 0.995 else "100%"


def failure_rate(passed: int, n: int, level: float = LEVEL) -> SeedRate | None:
    """`passed` of `n` seeds where the failure is gone: the exact binomial (Clopper-Pearson) interval of
    the rate of seeds where it would not be, and a sentence saying what so few seeds can show."""
    if n < 1:
        return None
    ci = _stats.binomtest(n - passed, n).proportion_ci(confidence_level=level, method="exact")
    low, high = float(ci.low), float(ci.high)
    method = "exact binomial (Clopper-Pearson)"
    seeds = "seed" if n == 1 else "seeds"
    if passed == n:
        text = (f"the failure is gone on {passed} of {n} {seeds}; with {n} {seeds} a failure rate up to "
                f"{_pct(high)} is still possible ({level:.0%}, {method})")
    else:
        text = (f"the failure is gone on {passed} of {n} {seeds}: a failure rate of {_pct((n - passed) / n)} "
                f"({level:.0%} {method}: {_pct(low)} to {_pct(high)})")
    return SeedRate(passed, n, low, high, level, method, text)


def verdict_of(m: VerifyMeasurement) -> VerifyVerdict:
    needed = not m.control_waived
    seeds = [judge_seed(b, a, m.measure, needed) for b, a in zip(m.before, m.after)]
    reproduced = [s for s in seeds if s.reproduced]
    interval = None
    if m.measure.goal is None:  # continuous: a t interval on the improvement; a goal makes each seed pass or fail
        # only seeds where the measure can see the failure (not already at its goal on the failing state)
        interval = improvement_interval([s.improvement for s in seeds if s.improvement is not None
                                         and s.measure_ok is not None])
    gone = [s for s in reproduced if s.failure_gone]
    rate = failure_rate(len(gone), len(reproduced))
    failure_gone: bool | None = bool(reproduced) and len(gone) == len(reproduced)
    if interval is not None and failure_gone:
        failure_gone = interval.mean > 0
    if failure_gone and any(s.unchecked for s in reproduced):
        failure_gone = None  # gone where it was looked for; not looked for everywhere
    regressed = not all(s.control_ok for s in seeds)
    control_ok: bool | None = not regressed
    if not regressed and (not needed or not all(s.control_evidenced for s in seeds)):
        control_ok = None
    every_seed = bool(seeds) and len(reproduced) == len(seeds) and len({s.definite for s in seeds}) == 1
    if not reproduced:
        verdict = "not_reproducible"
    elif failure_gone is False:
        verdict = "failure_persists"
    elif control_ok is False:
        verdict = "control_regressed"
    elif not every_seed:
        verdict = "not_reproducible"
    elif failure_gone is None or (control_ok is None and needed):
        verdict = "inconclusive"
    else:
        verdict = "fixed"
    return VerifyVerdict(failure_gone, control_ok, every_seed, verdict, seeds, interval, rate)


def _list(errors: Sequence[ErrorSeen]) -> str:
    return ", ".join(sorted({f"{e.id}@{e.stage or '—'}" for e in errors})) or "none"


def _per_seed(m: VerifyMeasurement, v: VerifyVerdict) -> list[dict[str, object]]:
    return [{"seed": s.seed, "before_errors": sorted({f"{e.id}@{e.stage}" for e in b.errors}),
             "after_errors": sorted({f"{e.id}@{e.stage}" for e in a.errors}),
             f"before_{m.measure.name}": b.measure, f"after_{m.measure.name}": a.measure,
             "improvement": s.improvement, "verdict": s.verdict}
            for s, b, a in zip(v.seeds, m.before, m.after)]


def _interval_text(m: VerifyMeasurement, v: VerifyVerdict) -> str:
    parts = [f"improvement of the {m.measure.name} {v.interval.text}"] if v.interval is not None else []
    parts += [v.rate.text] if v.rate is not None else []
    return "".join(f"; {p}" for p in parts)


def _ran_text(ran: dict[str, list[str]]) -> str:
    return "; ".join(f"{fam} judged {', '.join(steps)}" for fam, steps in ran.items() if steps)


def _skipped_text(skipped: dict[str, dict[str, str]]) -> str:
    return "; ".join(f"{fam}: " + ", ".join(f"{step} ({why})" for step, why in steps.items())
                     for fam, steps in skipped.items())


def _steps_on_every_seed(v: VerifyVerdict) -> dict[str, list[str]]:
    """Control family -> the steps it judged on the fixed state on every seed."""
    fams = dict.fromkeys(f for s in v.seeds for f in s.control_ran)
    first = v.seeds[0].control_ran if v.seeds else {}
    return {f: [st for st in first.get(f, []) if all(st in s.control_ran.get(f, []) for s in v.seeds)] for f in fams}


def _needs(skipped: dict[str, dict[str, str]]) -> list[str]:
    """What the skipped steps lacked, as the step log says it ("no loader" -> loader)."""
    out = [why.removeprefix("no ") for steps in skipped.values() for why in steps.values() if why.startswith("no ")]
    return list(dict.fromkeys(out))


def _inconclusive(m: VerifyMeasurement, v: VerifyVerdict, seeds: list[dict[str, object]]) -> Finding:
    """What could not run and why, what did run, and what would make the verdict possible."""
    blind = [s for s in v.seeds if s.control_needed and not s.control_evidenced]
    skipped: dict[str, dict[str, str]] = {}
    for s in blind:
        for fam, steps in s.control_skipped.items():
            skipped.setdefault(fam, {}).update(steps)
    parts, hints = [], []
    if blind:
        fams = ", ".join(m.control) or "none"
        why = (f": {_skipped_text(skipped)}" if skipped else
               " (the control families judged nothing)" if m.control else "")
        parts.append(f"the control ({fams}) could not run on the fixed state {m.after_name} on seed(s) "
                     f"{', '.join(str(s.seed) for s in blind)}{why}" if m.control else
                     "no control family outside the families under test was run" + why)
        needs = _needs(skipped)
        hints.append(("name a control family that this pipeline can run with --control F (outside the families "
                      f"under test: {', '.join(m.alternatives)})" if m.alternatives else
                      "name a control family with --control F")
                     + (f", or give the pipeline what the control needs ({', '.join(needs)})" if needs else "")
                     + "; --control none skips the control knowingly")
    unchecked = sorted({f"{e.id}@{e.stage or '—'}" for s in v.seeds for e in s.unchecked})
    if unchecked:
        parts.append(f"the steps that found {', '.join(unchecked)} on the failing state did not run on the fixed "
                     "state, so their absence there shows nothing")
        hints.append("make the fixed state offer what the failing one did (the same captions, loader, decode…) so "
                     "that the same checks can look")
    gone = v.rate.text if v.rate is not None else ""
    return make("verify.inconclusive", "warning", None,
                f"inconclusive: {'; and '.join(parts)}" + (f". Measured: {gone}" if gone else "")
                + (f"; improvement of the {m.measure.name} {v.interval.text}" if v.interval is not None else "")
                + ". A fix is confirmed only when the failure is shown gone and an unaffected control shows no "
                "new error", CHECK, "; ".join(hints), seeds=seeds,
                control=list(m.control), control_skipped=skipped, unchecked=unchecked,
                rate=v.rate.__dict__ if v.rate is not None else None,
                interval=v.interval.__dict__ if v.interval is not None else None, alternatives=list(m.alternatives))


def judge_verify(m: VerifyMeasurement) -> list[Finding]:
    """The findings of one verification: errors for each failed test, `verify.fixed` (info) otherwise."""
    v = verdict_of(m)
    out: list[Finding] = []
    seeds = _per_seed(m, v)
    interval = v.interval.__dict__ if v.interval is not None else None
    rate = v.rate.__dict__ if v.rate is not None else None
    missing = [s.seed for s in v.seeds if not s.reproduced]
    if missing:
        failed = [b.seed for b in m.before if b.failed]
        out.append(make("verify.not_reproducible", "error", None,
                        f"the failing state {m.before_name} shows no error of {', '.join(m.families)} on seed(s) "
                        f"{', '.join(map(str, missing))} of {len(v.seeds)}" + (f" (it could not run on {failed})"
                                                                               if failed else ""),
                        CHECK, "check that --before and its faults name the state that fails, and that the "
                        "families (or --symptom) are the ones that see the failure; an intermittent failure needs "
                        "a family that triggers it on every seed", seeds=seeds, missing=missing))
    elif not v.every_seed:
        by = {s.seed: s.verdict for s in v.seeds}
        out.append(make("verify.not_reproducible", "error", None,
                        f"the verdict depends on the seed: {', '.join(f'seed {k}: {x}' for k, x in by.items())}",
                        CHECK, "look at the seeds that differ; a fix that holds on some seeds only has not "
                        "removed the cause", seeds=seeds, verdicts=by))
    bad = [s for s in v.seeds if s.reproduced and not s.failure_gone]
    if v.seeds and any(s.reproduced for s in v.seeds) and v.failure_gone is False:
        persisting = [e for s in bad for e in s.persisting]
        hidden = [s.seed for s in bad if not s.persisting and s.measure_ok is False]
        still = [w for a in m.after if a.seed in hidden for w in a.where]
        stage = persisting[0].stage if persisting else (still[0] if still else None)
        why = (f"still reports {_list(persisting)}" if persisting else
               f"no longer reports the errors, but its {m.measure.title} did not "
               + (f"reach {m.measure.goal:g}" if m.measure.goal is not None else "improve")
               + f" on seed(s) {', '.join(map(str, hidden))}"
               + (f" ({', '.join(dict.fromkeys(still))} still holds them)" if still else "")
               + ": the symptom is hidden, not removed")
        out.append(make("verify.failure_persists", "error", stage,
                        f"the fixed state {m.after_name} {why}" + _interval_text(m, v), CHECK,
                        "the first failing stage is unchanged: fix what makes the value there wrong rather than "
                        "what the failure looks like downstream (a nan_to_num, a clip or a skipped step hides it)",
                        seeds=seeds, interval=interval, rate=rate, measure=m.measure.name,
                        persisting=sorted({f"{e.id}@{e.stage}" for e in persisting}), hidden_on=hidden))
    regressed = [e for s in v.seeds for e in s.regressed]
    if regressed:
        on = [s.seed for s in v.seeds if s.regressed]
        out.append(make("verify.control_regressed", "error", regressed[0].stage,
                        f"the fixed state {m.after_name} breaks what worked: {_list(regressed)} on seed(s) "
                        f"{', '.join(map(str, on))} (control: {', '.join(m.control) or 'none'})", CHECK,
                        "the fix changed more than the failing stage: read the new finding's hint, and diff the "
                        "two states at its stage", seeds=seeds,
                        regressed=sorted({f"{e.id}@{e.stage}" for e in regressed}), control=list(m.control)))
    if not out and v.verdict == "inconclusive":
        out.append(_inconclusive(m, v, seeds))
    if not out:
        ran = _steps_on_every_seed(v)
        control = (f"the control showed no new error ({_ran_text(ran)}, on every seed)" if any(ran.values()) else
                   "no control was run (--control none): test 2 was skipped as asked")
        out.append(make("verify.fixed", "info", None,
                        f"fixed: {m.after_name} removes every error of {m.before_name} "
                        f"({_list([e for b in m.before for e in b.errors])}) on all {len(v.seeds)} seeds; {control}"
                        + _interval_text(m, v), CHECK,
                        "keep the before/after record (--json) with the fix", seeds=seeds, interval=interval,
                        rate=rate, measure=m.measure.name, control=list(m.control), control_judged=ran))
    return out
