"""Plain records of a verification: two states of a pipeline (the failing one and the fixed one), each
run on the same seeds, and what the judge concluded. No torch; every field is JSON-able as it is.

`signalchain verify` (the method's "confirm that the fix solved the right problem") fills a
`VerifyMeasurement` in `experiments/verify.py`; `checks/verify.py` turns it into a `VerifyVerdict`
and findings; `report/verify_page.py` draws both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Measure", "ErrorSeen", "SideRun", "VerifyMeasurement", "SeedVerdict", "Interval", "SeedRate",
           "VerifyVerdict", "Steps"]

#: What the doctor's families did on one run: family -> step -> {"status", "why", "checks", "ids"}
#: (`experiments.doctor.run_family`'s log; status "judged" is evidence, "skipped" says why not).
Steps = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Measure:
    """The symptom's own number: its name, which way is better, and the value a fixed state must reach.

    goal None: any improvement counts; a goal (0 non-finite loss values) must be met on every seed,
    because half as many NaN is still a NaN.
    """

    name: str
    title: str
    higher_is_better: bool
    goal: float | None = None
    figure: str = ""  # the metrics key of the figure that shows it (drawn first on the page)


@dataclass(frozen=True)
class ErrorSeen:
    """One error finding of one run: its id, stage and message (for the table)."""

    id: str
    stage: str | None
    message: str = ""


@dataclass
class SideRun:
    """One state on one seed: the errors of the symptom's families and of the control families, the
    symptom measure (None when the run could not give it, say why in `notes`), and the time taken.

    `findings` and `metrics` keep the doctor's output of the symptom families (metrics: the figure
    dicts, for the page's curves and players).
    """

    seed: int
    errors: list[ErrorSeen]
    control_errors: list[ErrorSeen]
    measure: float | None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None  # the state could not be evaluated at all (an exception, a subprocess error)
    where: list[str] = field(default_factory=list)  # stages where the measure still shows the failure (NaN loss taps)
    steps: Steps | None = None  # what the symptom's families did (None: the state did not say)
    control_steps: Steps | None = None  # what the control families did (None: the state did not say)

    def summary(self) -> dict[str, Any]:
        """Everything but the bulky findings and figures (the JSON report's per-seed entry)."""
        return {"seed": self.seed, "errors": [asdict(e) for e in self.errors],
                "control_errors": [asdict(e) for e in self.control_errors], "measure": self.measure,
                "seconds": round(self.seconds, 2), "notes": list(self.notes), "failed": self.failed,
                "where": list(self.where), "steps": _compact(self.steps), "control_steps": _compact(self.control_steps)}


def _compact(steps: Steps | None) -> dict[str, dict[str, str]] | None:
    """family -> step -> "judged" / "skipped: no loader" / …: the JSON report's view of a step log."""
    if steps is None:
        return None
    return {fam: {name: e.get("status", "?") + (f": {e['why']}" if e.get("why") else "") for name, e in log.items()}
            for fam, log in steps.items()}


@dataclass
class VerifyMeasurement:
    """Both states over the same seeds (`before[i]` and `after[i]` ran on `seeds[i]`)."""

    before_name: str
    after_name: str
    symptom: str | None
    families: list[str]
    control: list[str]
    measure: Measure
    seeds: list[int]
    before: list[SideRun]
    after: list[SideRun]
    budget: str = "economy"
    control_note: str = ""  # why these control families
    control_waived: bool = False  # the user asked for no control (--control none): test 2 is knowingly skipped
    alternatives: list[str] = field(default_factory=list)  # families outside the symptom's set and the control


@dataclass
class SeedVerdict:
    """The three tests on one seed."""

    seed: int
    reproduced: bool  # the failing state showed an error of the symptom's families
    persisting: list[ErrorSeen]  # errors of the failing state whose id the fixed state still shows
    regressed: list[ErrorSeen]  # errors the fixed state shows that the failing state did not (control or symptom)
    improvement: float | None  # after − before of the measure, signed so that > 0 is better
    measure_ok: bool | None  # improved (and reached the goal); None: no measure on this seed
    failure_gone: bool
    control_ok: bool
    # the failing state's errors whose steps the fixed state skipped (a missing capability): their absence there
    # is no evidence that they are gone
    unchecked: list[ErrorSeen] = field(default_factory=list)
    control_ran: dict[str, list[str]] = field(default_factory=dict)  # control family -> steps judged (fixed state)
    control_skipped: dict[str, dict[str, str]] = field(default_factory=dict)  # family -> step -> why not
    control_needed: bool = True  # False: the user waived the control (--control none)

    @property
    def control_evidenced(self) -> bool:
        """Some control family judged something on the fixed state."""
        return any(self.control_ran.values())

    @property
    def definite(self) -> str:
        """The verdict on what was measured, as if what could not run had passed (for "every seed agrees")."""
        if not self.reproduced:
            return "not_reproducible"
        if not self.failure_gone:
            return "failure_persists"
        return "fixed" if self.control_ok else "control_regressed"

    @property
    def verdict(self) -> str:
        """`definite`, except "inconclusive" where "fixed" would rest on evidence that is missing."""
        v = self.definite
        if v == "fixed" and (self.unchecked or (self.control_needed and not self.control_evidenced)):
            return "inconclusive"
        return v


@dataclass(frozen=True)
class Interval:
    """Mean of a continuous improvement over seeds and a two-sided interval around it (`method` says which)."""

    mean: float
    low: float
    high: float
    n: int
    level: float
    method: str
    text: str = ""  # the sentence the reports print


@dataclass(frozen=True)
class SeedRate:
    """A 0/1 outcome per seed (the failure gone or not): `passed` of `n` seeds, and the interval of the
    rate of seeds on which it would fail (`low` … `high`, exact binomial) that so few seeds leave open."""

    passed: int
    n: int
    low: float
    high: float
    level: float
    method: str
    text: str


@dataclass
class VerifyVerdict:
    """The judge's answer: the three tests, the verdict and the per-seed details."""

    failure_gone: bool | None  # None: not established (a step that found the failure did not run on the fix)
    control_ok: bool | None  # None: no control judged anything (or none was asked for: `control_waived`)
    every_seed: bool
    verdict: str  # "fixed", "failure_persists", "control_regressed", "not_reproducible" or "inconclusive"
    seeds: list[SeedVerdict]
    interval: Interval | None  # continuous measures only (a t interval on the improvement)
    rate: SeedRate | None = None  # the failure gone on k of n seeds, with its binomial interval

    def tests(self) -> dict[str, bool | None]:
        """The three tests: True pass, False fail, None could not be run (the verdict is then inconclusive)."""
        return {"failure_gone": self.failure_gone, "control_ok": self.control_ok, "every_seed": self.every_seed}
