"""`signalchain history RUN`: read a finished run's logs, judge its curves, and point at the checkpoints
to bisect next.

The first bad step is the earliest step of an `error` finding, else of a warning that marks a moment
the run broke (non-finite, a spike, an explosion, a resume jump). The checkpoint pair around it is the
last complete checkpoint saved before that step (the last healthy one the log can vouch for) and the
first complete one saved at or after it. The printed `signalchain bisect --checkpoints DIR --steps
FIRST:LAST` line keeps only the checkpoints between them; before printing it, bisect's own selection
is run on DIR, and a line that would select anything else (another checkpoint at those steps, a step
stored in a file that differs from its name) is not printed: the note says why instead.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..errors import SignalchainError
from ..findings import Finding, Severity, exit_code, sort_findings
from ..records.history import Checkpoint, RunHistory

__all__ = ["HistoryResult", "CheckpointPair", "BisectPlan", "diagnose", "checkpoint_pair", "bisect_plan", "bisect_line",
           "MOMENT_IDS"]

#: Warnings that mark the moment a run broke: a checkpoint pair is worth bisecting around them.
MOMENT_IDS = ("history.nonfinite", "history.loss_spike", "history.grad_explosion", "history.resume_jump")
#: Checkpoint files `bisect --checkpoints` loads (see experiments/bisect/_checkpoint_files.py).
_BISECTABLE = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")
_STEP_IN_NAME = re.compile(r"step[=_-]?(\d+)|(\d+)(?!.*\d)")


@dataclass
class CheckpointPair:
    """The checkpoints around the first bad step; either may be missing (none saved on that side)."""

    bad_step: int
    finding: str  # the id that set the step
    good: Checkpoint | None = None
    bad: Checkpoint | None = None

    def to_dict(self) -> dict[str, Any]:
        def one(c: Checkpoint | None) -> dict[str, Any] | None:
            return None if c is None else {"step": c.step, "path": c.path}

        return {"bad_step": self.bad_step, "finding": self.finding, "last_healthy": one(self.good),
                "first_unhealthy": one(self.bad)}


@dataclass
class HistoryResult:
    run: RunHistory
    findings: list[Finding]
    pair: CheckpointPair | None = None
    bisect: str | None = None  # the command line, or None
    bisect_note: str = ""  # why there is no line, or what to fill in
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    plan: BisectPlan | None = None  # the line's parts, for `--bisect` and the JSON

    @property
    def ok(self) -> bool:
        return exit_code(self.findings) == 0

    def to_dict(self) -> dict[str, Any]:
        run = self.run
        return {
            "signalchain": __version__,
            "findings": [f.to_dict() for f in sort_findings(self.findings)],
            "history": {
                "root": run.root, "format": run.format, "axis": run.axis, "points": run.points(),
                "series": [{"name": s.name, "role": s.role, "codebook": s.codebook, "points": len(s),
                            "first_step": int(s.steps[0]) if len(s) else None,
                            "last_step": int(s.steps[-1]) if len(s) else None} for s in run.series.values()],
                "checkpoints": [{"step": c.step, "path": c.path, "complete": c.complete} for c in run.checkpoints],
                "notes": [{"path": n.path, "line": n.line, "message": n.message} for n in run.notes],
                "sources": run.sources,
            },
            "bisect": {"pair": self.pair.to_dict() if self.pair else None, "command": self.bisect,
                       "args": self.plan.to_dict() if self.plan else None, "note": self.bisect_note},
            "seconds": round(self.seconds, 3),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_html(self) -> str:
        from ..report.history_page import render_history

        return render_history(self).render()


def is_step(value: Any) -> bool:
    """An evidence step: an integer (numpy's too), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bad_step(findings: list[Finding]) -> tuple[int, str] | None:
    def steps(pred: Any) -> list[tuple[int, str]]:
        return [(int(f.evidence["step"]), f.id) for f in findings
                if pred(f) and is_step(f.evidence.get("step")) and f.id.startswith("history.")]

    errors = steps(lambda f: f.severity is Severity.ERROR)
    moments = steps(lambda f: f.severity is Severity.WARNING and f.id in MOMENT_IDS)
    chosen = errors or moments
    return min(chosen) if chosen else None


def checkpoint_pair(run: RunHistory, findings: list[Finding]) -> CheckpointPair | None:
    got = _bad_step(findings)
    if got is None:
        return None
    step, fid = got
    ckpts = sorted((c for c in run.checkpoints if c.complete), key=lambda c: c.step)
    good = [c for c in ckpts if c.step < step]
    bad = [c for c in ckpts if c.step >= step]
    return CheckpointPair(step, fid, good[-1] if good else None, bad[0] if bad else None)


def _bisectable(c: Checkpoint) -> bool:
    name = os.path.basename(c.path.rstrip(os.sep))
    return name.startswith("checkpoint-") or os.path.isdir(c.path) or name.lower().endswith(_BISECTABLE)


@dataclass
class BisectPlan:
    """What the printed line asks `signalchain bisect` for: the checkpoints in `folder` whose step is in
    first..last (exactly the pair, checked with bisect's own selection), on `golden` (None: a placeholder)."""

    folder: str
    first: int
    last: int
    golden: str | None = None
    pipeline: str | None = None

    @property
    def steps(self) -> str:
        return f"{self.first}:{self.last}"

    def argv(self) -> list[str]:
        parts = ["signalchain", "bisect", self.golden or "GOLDEN", "--checkpoints", self.folder, "--steps", self.steps]
        return parts + (["--pipeline", self.pipeline] if self.pipeline else [])

    def line(self) -> str:
        return " ".join(shlex.quote(p) for p in self.argv())

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoints": self.folder, "steps": self.steps, "golden": self.golden, "pipeline": self.pipeline}


def _same(a: str | os.PathLike[str]) -> str:
    return os.path.normcase(os.path.realpath(a))


def _selection_differs(run: RunHistory, folder: str, first: int, last: int) -> str:
    """'' when `bisect --checkpoints folder --steps first:last` selects exactly the run's complete checkpoints
    in first..last; else what it would select instead (bisect's own functions decide, so the two never drift)."""
    from ..experiments.bisect._checkpoint_files import find_checkpoints, in_step_range

    want = {_same(c.path) for c in run.checkpoints if c.complete and first <= c.step <= last}
    try:
        got = {_same(f.path) for f in in_step_range(find_checkpoints(folder), first, last)}
    except (OSError, SignalchainError) as exc:
        return f"listing {folder} failed ({exc})"
    if got == want:
        return ""
    names = ", ".join(sorted(os.path.basename(p) for p in got)) or "none"
    return f"bisect would select {names} there, not the pair"


def bisect_plan(run: RunHistory, pair: CheckpointPair | None, golden: str | None = None,
                pipeline: str | None = None) -> tuple[BisectPlan | None, str]:
    """(the plan of the `signalchain bisect --checkpoints` line, a note); None and why when no line would run."""
    if pair is None:
        return None, "no error or breaking moment in the curves: nothing to bisect"
    if pair.bad is None:
        return None, (f"no checkpoint was saved at or after step {pair.bad_step}: the run stopped before its next "
                      "save, so there is no unhealthy checkpoint to find")
    if pair.good is None:
        # bisect needs a healthy end: every checkpoint left is from after the break
        return None, (f"no complete checkpoint was saved before step {pair.bad_step} (the first, {pair.bad.path}, is "
                      "from after it): there is no healthy checkpoint to bisect from; save one earlier and rerun")
    for c in (pair.good, pair.bad):
        if not _bisectable(c):
            return None, (f"{c.path}: bisect --checkpoints reads {'/'.join(_BISECTABLE)} files and HF "
                          "checkpoint-N/ folders, not this format")
    folder = os.path.dirname(pair.bad.path.rstrip(os.sep)) or "."
    if _same(os.path.dirname(pair.good.path.rstrip(os.sep)) or ".") != _same(folder):
        return None, (f"the pair lies in two folders ({pair.good.path}, {pair.bad.path}): bisect --checkpoints takes "
                      "one; copy or link the two into one folder and bisect that")
    why = _selection_differs(run, folder, pair.good.step, pair.bad.step)
    if why:
        return None, f"no line selects exactly steps {pair.good.step} and {pair.bad.step} in {folder}: {why}"
    plan = BisectPlan(folder, pair.good.step, pair.bad.step, golden, pipeline)
    note = "" if golden else ("GOLDEN: a golden batch of the run's pipeline (`signalchain capture PIPELINE --out "
                              "GOLDEN`, or `--hf-musicgen DIR --data DATA` for an HF MusicGen run)")
    return plan, note


def bisect_line(run: RunHistory, pair: CheckpointPair | None, golden: str | None = None,
                pipeline: str | None = None) -> tuple[str | None, str]:
    """(the `signalchain bisect --checkpoints` command, a note) for the pair; None and why when there is none."""
    plan, note = bisect_plan(run, pair, golden, pipeline)
    return (plan.line() if plan else None), note


def diagnose(path: str | os.PathLike[str], *, golden: str | None = None, pipeline: str | None = None,
             fmt: str | None = None, reader: Any = None, judge: Any = None) -> HistoryResult:
    """Read the run at `path`, judge it, and name the checkpoint pair and the bisect line."""
    t0 = time.perf_counter()
    if reader is None:
        from . import read as reader
    if judge is None:
        from ..checks.history import judge
    run = reader(os.fspath(path), fmt) if fmt else reader(os.fspath(path))
    findings = judge(run)
    pair = checkpoint_pair(run, findings)
    plan, note = bisect_plan(run, pair, golden, pipeline)
    return HistoryResult(run, findings, pair, plan.line() if plan else None, note, time.perf_counter() - t0,
                         plan=plan)


def step_of(name: str) -> int | None:
    """The step a checkpoint's file name gives (`step=500`, `ckpt_1200.pt`), else None."""
    m = _STEP_IN_NAME.search(name)
    if not m:
        return None
    return int(m.group(1) or m.group(2))
