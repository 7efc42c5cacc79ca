"""Judge a bisect's outcome: the first bad item, or why there is none (flaky end, skips, ambiguity).

Commits and checkpoints alike: the outcome (`records/bisect.py`) says which; the words follow its
`noun`. No I/O here: the outcome already holds the labels, the numbers and the diff stat.
"""

from __future__ import annotations

from typing import Any

from ..findings import Finding, Severity
from ..golden.compare import StageDiff
from ..records.bisect import BisectOutcome, BisectProbe
from .golden import _summary

__all__ = ["judge_bisect"]

CHECK = "checks.bisect"


def _numbers(detail: dict[str, Any]) -> str:
    """The numbers of a first divergence (a `StageDiff.to_dict()`), in words."""
    if not detail:
        return "no detail"
    inner = dict(detail.get("detail") or {})
    text = _summary(StageDiff(str(detail.get("stage")), str(detail.get("kind")), False, inner))
    if "first_index" in inner and "golden_value" in inner:
        text += f"; first at {inner['first_index']}: {inner['golden_value']!r} → {inner.get('new_value')!r}"
    return text


def _label(p: BisectProbe) -> str:
    subject = p.extra.get("subject")
    return f"{p.item} ({subject!r})" if subject else p.item


def _culprit(o: BisectOutcome) -> Finding:
    fb = dict(o.first_bad or {})
    probe = next((p for p in o.probes if p.item == fb.get("item")), None)
    numbers = _numbers(probe.detail) if probe else "no detail"
    subject = f" ({fb['subject']!r})" if fb.get("subject") else ""
    evidence = {**fb, "runs": o.runs, "cached": o.cached, "items": o.n_items, "last_good": o.last_good}
    what = "golden runs" if o.mode == "commits" else "probes"
    return Finding(
        "bisect.first_bad_commit" if o.mode == "commits" else "bisect.first_bad_checkpoint",
        Severity.ERROR, fb.get("stage"),
        f"first bad {o.noun} {fb.get('item')}{subject}: the golden batch diverges at stage {fb.get('stage')!r} "
        f"({numbers}); found in {o.runs + o.cached} {what} over {o.n_items} {o.noun}s "
        f"({o.runs} run, {o.cached} from cache)",
        evidence,
        hint=(f"read what {fb.get('item')} changed on the way to {fb.get('stage')!r}"
              + (f" (`git show {fb.get('item')}`)" if o.mode == "commits" else "")
              + f"; {o.last_good} before it still matches the golden up to that stage"),
        check=CHECK,
    )


def _flaky(o: BisectOutcome) -> Finding:
    end = "good" if o.status == "flaky_good" else "bad"
    p = o.probe_of(f"{end} end")
    item = p.item if p else (o.good if end == "good" else o.bad)
    if end == "good":
        shown = f"diverges at {p.first_divergence!r} ({_numbers(p.detail)})" if p and p.detail else (
            p.reason if p else "no result")
        message = (f"the good end {item} does not reproduce the golden when re-run: it {shown}; "
                   "nothing was bisected")
        hint = "capture the golden at the good end again, or give a --good whose run matches it"
    else:
        shown = p.reason if p else "no result"
        message = (f"the bad end {item} matches the golden when re-run ({shown}): the failure does not reproduce "
                   "on the golden batch; nothing was bisected")
        hint = ("check the tolerances (--rtol/--atol/--tol) and the seed, or whether the failure needs more than "
                "the golden step to appear (a later training step, another batch)")
    evidence = {"end": end, "item": item, "reason": shown, "first_divergence": p.first_divergence if p else None,
                "detail": p.detail if p else {}, **(p.extra if p else {})}
    return Finding("bisect.flaky", Severity.WARNING, p.first_divergence if p else None, message, evidence,
                   hint=hint, check=CHECK)


def _unrunnable(o: BisectOutcome) -> Finding:
    ends = [p for p in o.probes if p.role and p.verdict == "skip"]
    said = "; ".join(f"the {p.role} {p.item}: {p.reason}" for p in ends)
    return Finding(
        "bisect.unrunnable_end", Severity.WARNING, None,
        f"cannot bisect: {said or 'an end could not run'}",
        {"ends": [{"role": p.role, "item": p.item, "reason": p.reason, **p.extra} for p in ends]},
        hint="pick ends the pipeline runs at (both must load and run the golden batch), or pass --pipeline",
        check=CHECK,
    )


def _ambiguous(o: BisectOutcome) -> Finding:
    return Finding(
        "bisect.ambiguous", Severity.WARNING, o.symptom,
        f"the first bad {o.noun} is one of {len(o.candidates)}: {', '.join(o.candidates)} (every {o.noun} "
        f"between {o.last_good} and the first bad one was skipped)",
        {"candidates": o.candidates, "last_good": o.last_good, "symptom": o.symptom, "runs": o.runs,
         "cached": o.cached},
        hint=f"make the skipped {o.noun}s runnable (see the bisect.skipped findings) or inspect each candidate",
        check=CHECK,
    )


def _skipped(o: BisectOutcome, p: BisectProbe) -> Finding:
    return Finding(
        "bisect.skipped", Severity.INFO, None,
        f"skipped {o.noun} {_label(p)}: {p.reason}",
        {"item": p.item, "reason": p.reason, "index": p.index, **p.extra},
        hint=f"a {o.noun} that cannot run is stepped over, as `git bisect skip` does",
        check=CHECK,
    )


def judge_bisect(outcome: BisectOutcome) -> list[Finding]:
    """The findings of one bisect, the verdict first."""
    out: list[Finding] = []
    if outcome.status == "found" and outcome.first_bad:
        out.append(_culprit(outcome))
    elif outcome.status in ("flaky_good", "flaky_bad"):
        out.append(_flaky(outcome))
    elif outcome.status == "unrunnable_end":
        out.append(_unrunnable(outcome))
    elif outcome.status == "ambiguous":
        out.append(_ambiguous(outcome))
    ends = outcome.status == "unrunnable_end"
    out += [_skipped(outcome, p) for p in outcome.skipped if not (ends and p.role)]
    return out
