"""Plain records of a bisect: one probe of one item (a commit, a checkpoint) and the search's outcome.

Shared by `bisect` over commits and over checkpoints: an experiment fills them, `checks/bisect.py`
judges them, the CLI renders them. They hold labels and numbers only (no torch, no traces), so a
judge or a test builds them by hand. Mode-specific facts (a commit's sha and subject, a checkpoint's
path) go in `extra`, which `to_dict` lays beside the generic fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..findings import jsonable

__all__ = ["BisectProbe", "BisectOutcome", "ProbeVerdict", "BisectStatus"]

ProbeVerdict = Literal["good", "bad", "skip"]
#: The statuses of `experiments.bisect.search.SearchResult`, which this record carries.
BisectStatus = Literal["found", "ambiguous", "flaky_good", "flaky_bad", "unrunnable_end"]


@dataclass
class BisectProbe:
    """One golden run at one item of the range, and what it showed.

    `reason` says why in words: "identical to the golden", "diverges at 'crop' (the symptom)",
    "later divergence at 'logits' (after the symptom): judged good", or the first line of the error
    of an item that could not run. `detail` is the first divergent stage's `StageDiff.to_dict()`.
    """

    item: str  # the label users read: a short sha, a checkpoint's name
    verdict: ProbeVerdict
    reason: str = ""
    first_divergence: str | None = None  # the stage, None when identical or not run
    detail: dict[str, Any] = field(default_factory=dict)
    index: int = 0  # the item's place in the range (0 = the good end)
    role: str = ""  # "good end", "bad end" or "" for an item between them
    cached: bool = False  # its result came from the cache (no new golden run)
    seconds: float = 0.0  # wall time of the run (0 when cached)
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific: {"commit": sha, "subject": …}

    def to_dict(self) -> dict[str, Any]:
        out = {
            **jsonable(self.extra),
            "item": self.item,
            "index": self.index,
            "role": self.role or None,
            "verdict": self.verdict,
            "first_divergence": self.first_divergence,
            "reason": self.reason,
            "detail": jsonable(self.detail),
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
        }
        return out


@dataclass
class BisectOutcome:
    """What a bisect concluded over `n_items` ordered items (oldest first), and every probe made.

    `symptom` is the bad end's first divergent stage (the stage a bad item must diverge at, or
    before); `first_bad` describes the culprit (None unless `status == "found"`): its label, the
    stage and `StageDiff` detail where it diverges, and mode-specific facts (sha, subject, diffstat).
    """

    mode: str  # "commits" or "checkpoints"
    status: BisectStatus
    good: str  # labels of the two ends
    bad: str
    n_items: int
    probes: list[BisectProbe] = field(default_factory=list)  # in the order they were made
    symptom: str | None = None
    first_bad: dict[str, Any] | None = None
    last_good: str | None = None
    candidates: list[str] = field(default_factory=list)  # labels: the culprit, or the ambiguous run
    runs: int = 0  # real golden runs
    cached: int = 0  # probes answered from the cache
    extra: dict[str, Any] = field(default_factory=dict)  # mode-specific: repo, pipeline spec, seed…

    @property
    def noun(self) -> str:
        return "commit" if self.mode == "commits" else "checkpoint"

    @property
    def skipped(self) -> list[BisectProbe]:
        return [p for p in self.probes if p.verdict == "skip"]

    def probe_of(self, role: str) -> BisectProbe | None:
        return next((p for p in self.probes if p.role == role), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "status": self.status,
            "good": self.good,
            "bad": self.bad,
            "items": self.n_items,
            "symptom": self.symptom,
            "first_bad": jsonable(self.first_bad),
            "last_good": self.last_good,
            "candidates": list(self.candidates),
            "runs": self.runs,
            "cached": self.cached,
            "probes": [p.to_dict() for p in self.probes],
            "skipped": [p.to_dict() for p in self.skipped],
            **jsonable(self.extra),
        }
