"""`signalchain history RUN`: read a finished run's logs, judge its curves, and point at the checkpoints
to bisect next.

The first bad step is the earliest step of an `error` finding, else of a warning that marks a moment
the run broke (non-finite, a spike, an explosion, a resume jump). The checkpoint pair around it is the
last complete checkpoint saved before that step (the last healthy one the log can vouch for) and the
first complete one saved at or after it; the printed `signalchain bisect --checkpoints` line keeps only
the checkpoints between them (`--steps FIRST:LAST`), so it probes the fewest.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..findings import Finding, Severity, exit_code, sort_findings
from ..records.history import Checkpoint, RunHistory

__all__ = ["HistoryResult", "CheckpointPair", "diagnose", "checkpoint_pair", "bisect_line", "MOMENT_IDS"]

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
                       "note": self.bisect_note},
            "seconds": round(self.seconds, 3),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_html(self) -> str:
        from ..report.history_page import render_history

        return render_history(self).render()


def _bad_step(findings: list[Finding]) -> tuple[int, str] | None:
    def steps(pred: Any) -> list[tuple[int, str]]:
        return [(int(f.evidence["step"]), f.id) for f in findings
                if pred(f) and isinstance(f.evidence.get("step"), int) and f.id.startswith("history.")]

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


def bisect_line(run: RunHistory, pair: CheckpointPair | None, golden: str | None = None,
                pipeline: str | None = None) -> tuple[str | None, str]:
    """(the `signalchain bisect --checkpoints` command, a note) for the pair; None and why when there is none."""
    if pair is None:
        return None, "no error or breaking moment in the curves: nothing to bisect"
    if pair.bad is None:
        return None, (f"no checkpoint was saved at or after step {pair.bad_step}: the run stopped before its next "
                      "save, so there is no unhealthy checkpoint to find")
    if not _bisectable(pair.bad):
        return None, (f"{pair.bad.path}: bisect --checkpoints reads {'/'.join(_BISECTABLE)} files and HF "
                      "checkpoint-N/ folders, not this format")
    folder = os.path.dirname(pair.bad.path.rstrip(os.sep)) or "."
    first = "" if pair.good is None else str(pair.good.step)
    parts = ["signalchain", "bisect", golden or "GOLDEN", "--checkpoints", folder,
             "--steps", f"{first}:{pair.bad.step}"]
    if pipeline:
        parts += ["--pipeline", pipeline]
    note = "" if golden else ("GOLDEN: a golden batch of the run's pipeline (`signalchain capture PIPELINE --out "
                              "GOLDEN`, or `--hf-musicgen DIR --data DATA` for an HF MusicGen run)")
    if pair.good is None:
        before = f"no checkpoint was saved before step {pair.bad_step}: the first one is probed as the good end"
        note = f"{note}; {before}" if note else before
    return " ".join(shlex.quote(p) for p in parts), note


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
    line, note = bisect_line(run, pair, golden, pipeline)
    return HistoryResult(run, findings, pair, line, note, time.perf_counter() - t0)


def step_of(name: str) -> int | None:
    """The step a checkpoint's file name gives (`step=500`, `ckpt_1200.pt`), else None."""
    m = _STEP_IN_NAME.search(name)
    if not m:
        return None
    return int(m.group(1) or m.group(2))
