"""History judges: read the curves of a finished run (`records.history.RunHistory`) the way the method
reads them, and name the step where each problem first shows. Pure functions: no I/O, no torch.

Every finding has `evidence["step"]` (the step, or the epoch on an epoch axis) and `stage` = the logged
series name where it shows. Only series with a role are judged; the others are shown, never judged.
"""

from __future__ import annotations

from collections.abc import Callable

from ...findings import Finding
from ...records.history import RunHistory
from ..base import make, run_check
from .nonfinite import judge_nonfinite, what_moved
from .progress import judge_codebooks, judge_epoch_boundary, judge_plateau
from .schedule import judge_lr_schedule
from .spikes import judge_grad_explosion, judge_spikes
from .timing import judge_resume, judge_throughput
from .validation import judge_validation

__all__ = ["judge", "JUDGES", "what_moved", "judge_notes"]

CHECK = "checks.history"


def judge_notes(run: RunHistory) -> list[Finding]:
    """`history.unread` (info): one finding per file a reader skipped part of."""
    by_file: dict[str, list] = {}
    for n in run.notes:
        by_file.setdefault(n.path, []).append(n)
    return [
        make(
            "history.unread",
            "info",
            None,
            f"{path}: {len(notes)} part(s) not read — "
            + "; ".join((f"line {n.line}: " if n.line is not None else "") + n.message for n in notes[:3])
            + ("; …" if len(notes) > 3 else ""),
            CHECK,
            "a run that died mid-write leaves a cut file; everything before the cut was read",
            path=path,
            notes=[{"line": n.line, "message": n.message} for n in notes],
        )
        for path, notes in by_file.items()
    ]


JUDGES: dict[str, Callable[[RunHistory], list[Finding]]] = {
    "nonfinite": judge_nonfinite,
    "spikes": judge_spikes,
    "grad_explosion": judge_grad_explosion,
    "lr_schedule": judge_lr_schedule,
    "plateau": judge_plateau,
    "codebooks": judge_codebooks,
    "validation": judge_validation,
    "epoch_boundary": judge_epoch_boundary,
    "throughput": judge_throughput,
    "resume": judge_resume,
    "notes": judge_notes,
}


def judge(run: RunHistory) -> list[Finding]:
    """Every judge on the run; a judge that crashes becomes an `internal.check_failed` finding."""
    out: list[Finding] = []
    for name, fn in JUDGES.items():
        out.extend(run_check(f"{CHECK}.{name}", fn, run))
    return out
