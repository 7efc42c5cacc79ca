"""Plain records of a verification: two states of a pipeline (the failing one and the fixed one), each
run on the same seeds, and what the judge concluded. No torch; every field is JSON-able as it is.

`signalchain verify` (the method's "confirm that the fix solved the right problem") fills a
`VerifyMeasurement` in `experiments/verify.py`; `checks/verify.py` turns it into a `VerifyVerdict`
and findings; `report/verify_page.py` draws both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Measure", "ErrorSeen", "SideRun", "VerifyMeasurement", "SeedVerdict", "Interval", "VerifyVerdict"]


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

    def summary(self) -> dict[str, Any]:
        """Everything but the bulky findings and figures (the JSON report's per-seed entry)."""
        return {"seed": self.seed, "errors": [asdict(e) for e in self.errors],
                "control_errors": [asdict(e) for e in self.control_errors], "measure": self.measure,
                "seconds": round(self.seconds, 2), "notes": list(self.notes), "failed": self.failed,
                "where": list(self.where)}


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

    @property
    def verdict(self) -> str:
        if not self.reproduced:
            return "not_reproducible"
        if not self.failure_gone:
            return "failure_persists"
        return "fixed" if self.control_ok else "control_regressed"


@dataclass(frozen=True)
class Interval:
    """Mean of the improvement over seeds and a two-sided interval around it (`method` says which)."""

    mean: float
    low: float
    high: float
    n: int
    level: float
    method: str


@dataclass
class VerifyVerdict:
    """The judge's answer: the three tests, the verdict and the per-seed details."""

    failure_gone: bool
    control_ok: bool
    every_seed: bool
    verdict: str  # "fixed", "failure_persists", "control_regressed" or "not_reproducible"
    seeds: list[SeedVerdict]
    interval: Interval | None

    def tests(self) -> dict[str, bool]:
        return {"failure_gone": self.failure_gone, "control_ok": self.control_ok, "every_seed": self.every_seed}
