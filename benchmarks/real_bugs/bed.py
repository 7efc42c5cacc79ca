"""What every real bug declares, how one is run, and how its outcome is scored.

A bug is a module of `real_bugs.bugs` with:

- `BUG = RealBug(...)`: the thread it comes from, the class of bug, where its cause lives (`stages`)
  and which finding ids name that cause (`cause_ids`); `kind="control"` for an innocent cause that
  looks like a bug (no twin: the run itself must stay clean).
- `pipeline(fixed: bool)`: the reporter's code as a signalchain `Pipeline` (`fixed=True`: the fix the
  thread gave), run by `signalchain.doctor` with the symptom the reporter would type; or
  `findings(fixed: bool, seed: int) -> list[dict]` where the bug lives in a live run or a log (a
  trainer with the callback, `signalchain.history`), which the module runs itself.
- `shows(fixed: bool) -> tuple[bool, str]`: the symptom check, independent of signalchain: does the
  bug show (a loss curve, a shape, an SNR, a stop rate), with the numbers. The bed requires it to
  show on the bug and not on the twin; for a control, that the innocent sign is there.

Outcomes, for a bug: `found` (a warning or error whose id is one of `cause_ids`, at one of `stages`),
`flagged` (some warning or error, none naming the cause there), `missed` (only info). The twin is
`clean` when it has no error (its warnings are listed). A control is `clean` when it has no error and
no warning outside its `allowed` ids. Detectors never see any of this: they see only the pipeline.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import traceback
from typing import Any

__all__ = ["RealBug", "Outcome", "run_job", "score", "module"]

CLASSES = ("data-semantics", "optimiser-mechanics", "declared-vs-done", "messages", "false-error", "control")


@dataclasses.dataclass(frozen=True)
class RealBug:
    name: str
    thread: str  # the public thread (issue, PR, forum post) the bug and its fix come from
    library: str  # the reporter's library: transformers, audiocraft, lightning, torch, miditok, …
    idiom: str  # the code shape reproduced ("HF MusicGen + Seq2SeqTrainer", "own loop", …)
    cls: str  # one of CLASSES
    cause: str  # the cause, in a sentence
    fix: str  # the thread's fix, in a sentence
    stages: tuple[str, ...] = ()  # where the cause lives (a finding there localises it)
    cause_ids: tuple[str, ...] = ()  # finding ids that name the cause
    symptom: str | None = None  # what the reporter would type: `doctor --symptom`
    families: tuple[str, ...] = ()  # families to run beside the symptom's (none and no symptom: all)
    kind: str = "bug"  # "bug" or "control"
    allowed: tuple[str, ...] = ()  # a control's warnings that are true and not misleading, each said why
    fast: bool = False  # in `make test`'s subset

    def __post_init__(self) -> None:
        if self.cls not in CLASSES:
            raise ValueError(f"{self.name}: class {self.cls!r} is not one of {CLASSES}")
        if self.kind not in ("bug", "control"):
            raise ValueError(f"{self.name}: kind must be 'bug' or 'control'")
        if self.kind == "bug" and not (self.stages and self.cause_ids):
            raise ValueError(f"{self.name}: a bug names the stages and finding ids of its cause")


def module(name: str) -> Any:
    return importlib.import_module(f"real_bugs.bugs.{name}")


def _findings(mod: Any, fixed: bool, seed: int) -> list[dict[str, Any]]:
    if hasattr(mod, "findings"):
        return list(mod.findings(fixed, seed))
    import signalchain as sc

    bug: RealBug = mod.BUG
    report = sc.doctor(mod.pipeline(fixed), symptom=bug.symptom, families=bug.families, seed=seed)
    return [f.to_dict() for f in report.findings]


def run_job(name: str, fixed: bool, seed: int) -> dict[str, Any]:
    """One variant of one bug on one seed, in a worker process: its findings and its symptom check.
    A reproduction that raises is the bed's failure (`bed_error`), never signalchain's verdict."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")  # the reporter's code's own warnings are not the table's
    torch.set_num_threads(1)
    out: dict[str, Any] = {"name": name, "fixed": fixed, "seed": seed}
    t0 = time.perf_counter()
    try:
        mod = module(name)
        shows, figure = mod.shows(fixed)
        out.update(shows=bool(shows), figure=str(figure))
    except Exception:  # the symptom check is the bed's code
        out["bed_error"] = "symptom check: " + traceback.format_exc(limit=3)
    try:
        out["findings"] = _findings(module(name), fixed, seed)
    except Exception:
        out["bed_error"] = (out.get("bed_error", "") + "\nrun: " + traceback.format_exc(limit=6)).strip()
        out["findings"] = []
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


@dataclasses.dataclass
class Outcome:
    name: str
    bug: RealBug
    seed: int
    result: str  # found / flagged / missed (bug); clean / NOT CLEAN (control)
    ids: list[str]  # the warnings and errors of the bug run (of the control run)
    twin: str  # clean / ERROR / — (controls)
    twin_ids: list[str]
    symptom: str  # "shows / not on twin", or what failed
    seconds: float
    problems: list[str]  # bed errors, symptom checks that do not separate bug and twin

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["bug"] = dataclasses.asdict(self.bug)
        return d


def _real(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["severity"] in ("warning", "error")]


def _label(f: dict[str, Any]) -> str:
    return f"{f['id']}@{f['stage']}" + (" (E)" if f["severity"] == "error" else "")


def score(bug: RealBug, run: dict[str, Any], twin: dict[str, Any] | None) -> Outcome:
    problems = [r["bed_error"] for r in (run, twin) if r and r.get("bed_error")]
    real = _real(run["findings"])
    if bug.kind == "control":
        bad = [f for f in real if f["severity"] == "error" or f["id"] not in bug.allowed]
        result = "clean" if not bad else "NOT CLEAN"
        symptom = "innocent sign shows" if run.get("shows") else "innocent sign ABSENT"
        if not run.get("shows"):
            problems.append("the control's innocent sign does not show")
        return Outcome(bug.name, bug, run["seed"], result, [_label(f) for f in real], "—", [], symptom,
                       run["seconds"], problems)
    hits = [f for f in real if f["id"] in bug.cause_ids and f["stage"] in bug.stages]
    result = "found" if hits else "flagged" if real else "missed"
    assert twin is not None
    twin_real = _real(twin["findings"])
    twin_state = "ERROR" if any(f["severity"] == "error" for f in twin_real) else "clean"
    ok = run.get("shows") is True and twin.get("shows") is False
    symptom = "shows, not on twin" if ok else f"bug {run.get('shows')} / twin {twin.get('shows')}"
    if not ok:
        problems.append("the symptom check does not separate the bug from its twin")
    return Outcome(bug.name, bug, run["seed"], result, [_label(f) for f in real], twin_state,
                   [_label(f) for f in twin_real], symptom, run["seconds"] + twin["seconds"], problems)
