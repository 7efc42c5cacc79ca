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
successfully" the method warns about. Pure: records in, findings out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats as _stats

from ..findings import Finding
from ..records.verify import ErrorSeen, Interval, Measure, SeedVerdict, SideRun, VerifyMeasurement, VerifyVerdict
from .base import make

__all__ = ["judge_seed", "improvement_interval", "verdict_of", "judge_verify"]

CHECK = "checks.verify"


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


def judge_seed(before: SideRun, after: SideRun, measure: Measure) -> SeedVerdict:
    """The three tests on one seed."""
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
    return SeedVerdict(before.seed, reproduced, persisting, regressed, gain, measure_ok, failure_gone,
                       control_ok=after.failed is None and not regressed)


def improvement_interval(gains: Sequence[float], level: float = 0.95) -> Interval | None:
    """Mean improvement over seeds and a Student-t interval (n − 1 degrees of freedom).

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
    return Interval(mean, mean - half, mean + half, n, level, f"Student t, {n} seeds ({n - 1} df)")


def verdict_of(m: VerifyMeasurement) -> VerifyVerdict:
    seeds = [judge_seed(b, a, m.measure) for b, a in zip(m.before, m.after)]
    # only seeds where the measure can see the failure (not already at its goal on the failing state)
    interval = improvement_interval([s.improvement for s in seeds if s.improvement is not None
                                     and s.measure_ok is not None])
    reproduced = [s for s in seeds if s.reproduced]
    failure_gone = bool(reproduced) and all(s.failure_gone for s in reproduced)
    if interval is not None and failure_gone:
        failure_gone = interval.mean > 0
    control_ok = all(s.control_ok for s in seeds)
    every_seed = bool(seeds) and len(reproduced) == len(seeds) and len({s.verdict for s in seeds}) == 1
    if not reproduced:
        verdict = "not_reproducible"
    elif not failure_gone:
        verdict = "failure_persists"
    elif not control_ok:
        verdict = "control_regressed"
    elif not every_seed:
        verdict = "not_reproducible"
    else:
        verdict = "fixed"
    return VerifyVerdict(failure_gone, control_ok, every_seed, verdict, seeds, interval)


def _list(errors: Sequence[ErrorSeen]) -> str:
    return ", ".join(sorted({f"{e.id}@{e.stage or '—'}" for e in errors})) or "none"


def _per_seed(m: VerifyMeasurement, v: VerifyVerdict) -> list[dict[str, object]]:
    return [{"seed": s.seed, "before_errors": sorted({f"{e.id}@{e.stage}" for e in b.errors}),
             "after_errors": sorted({f"{e.id}@{e.stage}" for e in a.errors}),
             f"before_{m.measure.name}": b.measure, f"after_{m.measure.name}": a.measure,
             "improvement": s.improvement, "verdict": s.verdict}
            for s, b, a in zip(v.seeds, m.before, m.after)]


def _interval_text(m: VerifyMeasurement, v: VerifyVerdict) -> str:
    i = v.interval
    if i is None:
        return ""
    return (f"; improvement of the {m.measure.name} {i.mean:+.3g} (95% {i.method}: {i.low:+.3g} to {i.high:+.3g})")


def judge_verify(m: VerifyMeasurement) -> list[Finding]:
    """The findings of one verification: errors for each failed test, `verify.fixed` (info) otherwise."""
    v = verdict_of(m)
    out: list[Finding] = []
    seeds = _per_seed(m, v)
    interval = v.interval.__dict__ if v.interval is not None else None
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
    if v.seeds and any(s.reproduced for s in v.seeds) and not v.failure_gone:
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
                        seeds=seeds, interval=interval, measure=m.measure.name,
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
    if not out:
        out.append(make("verify.fixed", "info", None,
                        f"fixed: {m.after_name} removes every error of {m.before_name} "
                        f"({_list([e for b in m.before for e in b.errors])}) on all {len(v.seeds)} seeds, the control "
                        f"({', '.join(m.control) or 'none'}) holds" + _interval_text(m, v), CHECK,
                        "keep the before/after record (--json) with the fix", seeds=seeds, interval=interval,
                        measure=m.measure.name, control=list(m.control)))
    return out
