"""Score a fault catalogue: run the doctor on each fault (as a user would, after stating the
symptom) and on the clean pipeline over several seeds, in parallel processes. Score a zoo of clean
pipelines the same way: every member × seed, where any error or warning is a false alarm.

Every run sees the pipeline through `ProtocolView`: no detector can read which fault is injected,
nor how a zoo member is configured.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from ..findings import Severity

__all__ = ["FaultRow", "Score", "score_catalogue", "job_order", "run_one", "ZooRun", "ZooScore", "score_zoo",
           "family_of"]


@dataclass
class FaultRow:
    name: str
    family: str
    cause: str
    expected_ids: list[str]
    expected_stage: str
    symptom: str | None = None
    found_ids: list[str] = field(default_factory=list)
    found: list[dict[str, Any]] = field(default_factory=list)
    detected: bool = False
    localised: bool = False
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self, results: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "family": self.family, "cause": self.cause,
                             "expected_ids": self.expected_ids, "expected_stage": self.expected_stage,
                             "symptom": self.symptom}
        if results:
            d.update(found_ids=self.found_ids, detected=self.detected, localised=self.localised,
                     seconds=round(self.seconds, 2), findings=self.found)
            if self.error:
                d["error"] = self.error
        return d


@dataclass
class Score:
    rows: list[FaultRow]
    control_seeds: list[int]
    control: list[dict[str, Any]]  # per seed: findings
    seconds: float = 0.0

    @property
    def control_errors(self) -> int:
        return sum(1 for c in self.control for f in c["findings"] if f["severity"] == "error")

    def to_dict(self) -> dict[str, Any]:
        findings = [dict(f, seed=c["seed"]) for c in self.control for f in c["findings"]
                    if f["severity"] != "info"]
        return {"faults": [r.to_dict() for r in self.rows],
                "control": {"seeds": self.control_seeds, "errors": self.control_errors, "findings": findings},
                "summary": {"faults": len(self.rows), "detected": sum(r.detected for r in self.rows),
                            "localised": sum(r.localised for r in self.rows), "seconds": round(self.seconds, 1)}}


def run_one(spec: str, fault: str | None, seed: int, budget: str, families: Sequence[str],
            symptom: str | None) -> dict[str, Any]:
    """One doctor run in a worker process; returns plain data."""
    import time
    import warnings

    import torch

    from ..pipeline import ProtocolView, load_pipeline
    from .doctor import run_doctor

    warnings.filterwarnings("ignore")  # a faulty pipeline's own warnings are not our output
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    pipeline = load_pipeline(spec)
    if fault is not None:
        pipeline = pipeline.with_faults([fault])
    result = run_doctor(ProtocolView(pipeline), families=families, symptom=symptom, seed=seed, budget=budget)
    return {"findings": [f.to_dict() for f in result.findings], "seconds": time.perf_counter() - t0}


def _judge(row: FaultRow, findings: list[dict[str, Any]]) -> None:
    real = [f for f in findings if f["severity"] != Severity.INFO.value]
    row.found = real
    row.found_ids = sorted({f["id"] for f in real})
    hits = [f for f in real if f["id"] in row.expected_ids]
    row.detected = bool(hits)
    row.localised = any(f["stage"] == row.expected_stage for f in hits)


def job_order(rows: Sequence[FaultRow], control_seeds: Sequence[int], by_symptom: bool = True
              ) -> list[tuple[str, Any, int, str | None]]:
    """(kind, fault row or control seed, seed, symptom) in the order the workers take them: longest
    first (the clean control and faults without a symptom run every family), so that no long run
    starts last while the other workers idle. Workers are processes that run many jobs: their
    imports, and what a pipeline caches per process (the reference's rendered clips), serve the
    later jobs too."""
    control = [("control", seed, seed, None) for seed in control_seeds]
    faults = [("fault", r, 0, r.symptom if by_symptom else None) for r in rows]
    return control + sorted(faults, key=lambda j: j[3] is not None)  # stable: catalogue order within each


def _timing_fault(row: FaultRow) -> bool:
    """A fault whose evidence is wall-clock time (the performance family, the `slow` symptom)."""
    return row.family == "performance" or row.symptom == "slow"


def score_catalogue(spec: str, faults: Sequence[dict[str, Any]], control_seeds: Sequence[int] = (0, 1, 2, 3, 4),
                    workers: int | None = None, budget: str = "business", by_symptom: bool = True,
                    progress: Callable[[str], None] | None = None) -> Score:
    """Run every fault and the clean control; `by_symptom` examines each fault with its symptom's families."""
    import time

    t0 = time.perf_counter()
    rows = [FaultRow(name=f["name"], family=f["family"], cause=f.get("cause", ""),
                     expected_ids=list(f["expected_ids"]), expected_stage=f["expected_stage"],
                     symptom=f.get("symptom")) for f in faults]
    control: list[dict[str, Any]] = []
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    jobs: dict[Any, tuple[str, Any]] = {}
    ctx = mp.get_context("spawn")  # fresh interpreters: no inherited torch thread pools
    # One BLAS thread per worker: with several workers on few cores, OpenBLAS/OpenMP threads fight
    # each other (a codec encode went from 0.02 s to 1.7 s). Spawned workers read this at import.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    # Timing faults are judged from wall-clock time: run them last, one at a time, so that the
    # catalogue's own workers do not starve them of CPU (which reads as `perf.machine_busy`).
    timed = [r for r in rows if _timing_fault(r)]
    untimed = [r for r in rows if not _timing_fault(r)]

    def collect(jobs: dict[Any, tuple[str, Any]]) -> None:
        for fut in as_completed(jobs):
            kind, item = jobs[fut]
            try:
                res = fut.result()
            except Exception as exc:  # a worker that died is a result too
                res = {"findings": [], "seconds": 0.0, "error": f"{type(exc).__name__}: {exc}"}
            if kind == "fault":
                _judge(item, res["findings"])
                item.seconds, item.error = res["seconds"], res.get("error")
                if progress:
                    progress(f"{item.name}: {'detected' if item.detected else 'not detected'}")
            else:
                control.append({"seed": item, "findings": res["findings"], "seconds": res["seconds"],
                                "error": res.get("error")})
                if progress:
                    progress(f"control seed {item}")

    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        for kind, item, seed, symptom in job_order(untimed, control_seeds, by_symptom):
            name = item.name if kind == "fault" else None
            jobs[pool.submit(run_one, spec, name, seed, budget, (), symptom)] = (kind, item)
        collect(jobs)
        # Then the timing faults, one at a time on a worker that is already warm (imports, rendered
        # clips): nothing else runs meanwhile, and no fresh process start lands inside a timed run.
        for row in timed:
            collect({pool.submit(run_one, spec, row.name, 0, budget, (), row.symptom if by_symptom else None):
                     ("fault", row)})
    control.sort(key=lambda c: c["seed"])
    return Score(rows=rows, control_seeds=list(control_seeds), control=control, seconds=time.perf_counter() - t0)


# ---- the clean-pipeline zoo -------------------------------------------------------------------

#: A finding's `check` (the name its judge gives) → the doctor family that runs it. Two names are
#: shared across families and are told apart by the id: "checks.stale" (loader, token_audio: data;
#: predictions: optimisation) and "checks.symbolic" (the tokens: data; repetition: generation).
_CHECK_FAMILY = {"checks.audio": "audio", "checks.data": "data", "checks.tokens": "data", "checks.inputs": "data",
                 "checks.numerics": "numerics", "checks.gradients": "optimisation", "checks.training": "optimisation",
                 "checks.precision": "precision", "checks.conditioning": "conditioning",
                 "checks.generation": "generation", "checks.output": "output", "checks.performance": "performance",
                 "checks.profile": "profile", "checks.compile": "compile"}
_ID_FAMILY = {"optim": "optimisation", "grad": "optimisation", "loss": "optimisation", "overfit": "optimisation",
              "model": "optimisation", "dtype": "optimisation", "codec": "optimisation", "amp": "precision",
              "nonfinite": "numerics", "perf": "performance", "split": "splits", "condition": "conditioning",
              "caption": "conditioning", "generation": "generation", "output": "output", "audio": "audio",
              "tokens": "data", "targets": "data", "mask": "data", "batch": "data", "crop": "data", "loader": "data",
              "symbolic": "data", "shape": "data"}
_FAMILIES = ("audio", "data", "numerics", "optimisation", "precision", "conditioning", "generation", "output",
             "splits", "performance", "compile", "profile")


def family_of(finding: dict[str, Any]) -> str:
    """The doctor family a finding came from, read off its `check` (the judge's name, or the
    `family.step` key of a crashed step), else its id."""
    check, fid = str(finding.get("check") or ""), str(finding.get("id", ""))
    check = check.removeprefix("doctor.")  # a crashed step: "doctor.<family>.<step>"
    if check.split(".")[0] in _FAMILIES:
        return check.split(".")[0]
    if check.startswith("audit."):
        return "splits"
    if check == "checks.stale":
        return "optimisation" if fid.startswith("loss.") else "data"
    if check == "checks.symbolic":
        return "generation" if fid == "symbolic.repetitive" else "data"
    if fid == "loss.initial":
        return "data"
    return _CHECK_FAMILY.get(check) or _ID_FAMILY.get(fid.split(".")[0], "other")


@dataclass
class ZooRun:
    member: str
    seed: int
    findings: list[dict[str, Any]] = field(default_factory=list)  # errors and warnings, whole
    info_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # the run itself failed (a worker that died): a defect like an error

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["severity"] == Severity.ERROR.value]

    @property
    def warnings(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["severity"] == Severity.WARNING.value]

    def to_dict(self) -> dict[str, Any]:
        d = {"member": self.member, "seed": self.seed, "findings": self.findings, "info_ids": self.info_ids,
             "seconds": round(self.seconds, 1)}
        if self.error:
            d["error"] = self.error
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ZooRun:
        return cls(str(d["member"]), int(d["seed"]), list(d.get("findings", [])), list(d.get("info_ids", [])),
                   float(d.get("seconds", 0.0)), d.get("error"))


@dataclass
class ZooScore:
    members: list[dict[str, Any]]
    seeds: list[int]
    runs: list[ZooRun]
    families: list[str]
    seconds: float = 0.0

    @property
    def errors(self) -> int:
        return sum(len(r.errors) for r in self.runs) + sum(1 for r in self.runs if r.error)

    def false_alarms(self) -> dict[str, dict[str, Any]]:
        """Per finding id: in how many member × seed runs it fired as an error or a warning, and the share."""
        n = len(self.runs)
        out: dict[str, dict[str, Any]] = {}
        for r in self.runs:
            for sev in ("error", "warning"):
                for fid in sorted({f["id"] for f in r.findings if f["severity"] == sev}):
                    row = out.setdefault(fid, {"errors": 0, "warnings": 0, "runs": 0, "members": []})
                    row["errors" if sev == "error" else "warnings"] += 1
                    if r.member not in row["members"]:
                        row["members"].append(r.member)
            for fid in {f["id"] for f in r.findings}:
                out[fid]["runs"] += 1
        for row in out.values():
            row["of"] = n
            row["rate"] = round(row["runs"] / n, 4) if n else 0.0
        return dict(sorted(out.items(), key=lambda kv: (-kv[1]["errors"], -kv[1]["runs"], kv[0])))

    def table(self) -> list[dict[str, Any]]:
        """Member × family: the error and warning ids over the seeds (with how many seeds each)."""
        rows = []
        for m in self.members:
            runs = [r for r in self.runs if r.member == m["name"]]
            cells: dict[str, dict[str, dict[str, int]]] = {}
            for r in runs:
                for f in r.findings:
                    cell = cells.setdefault(family_of(f), {"error": {}, "warning": {}})
                    cell[f["severity"]][f["id"]] = cell[f["severity"]].get(f["id"], 0) + 1
            rows.append({"member": m["name"], "bed": m.get("bed"), "seeds": len(runs),
                         "errors": sum(len(r.errors) for r in runs), "warnings": sum(len(r.warnings) for r in runs),
                         "failed_runs": sum(1 for r in runs if r.error), "families": cells})
        return rows

    def to_dict(self) -> dict[str, Any]:
        n = len(self.runs)
        return {"members": self.members, "seeds": self.seeds, "families": self.families,
                "runs": [r.to_dict() for r in self.runs], "false_alarms": self.false_alarms(), "table": self.table(),
                "summary": {"members": len(self.members), "runs": n, "errors": self.errors,
                            "warnings": sum(len(r.warnings) for r in self.runs),
                            "runs_with_error": sum(1 for r in self.runs if r.errors or r.error),
                            "runs_with_warning": sum(1 for r in self.runs if r.warnings),
                            "failed_runs": sum(1 for r in self.runs if r.error), "seconds": round(self.seconds, 1)}}


def _zoo_run(member: str, seed: int, res: dict[str, Any]) -> ZooRun:
    real = [f for f in res["findings"] if f["severity"] != Severity.INFO.value]
    info = sorted({f["id"] for f in res["findings"] if f["severity"] == Severity.INFO.value})
    return ZooRun(member, seed, real, info, res.get("seconds", 0.0), res.get("error"))


def score_zoo(members: Sequence[dict[str, Any]], seeds: Sequence[int] = (0, 1, 2), families: Sequence[str] = (),
              workers: int | None = None, budget: str = "business",
              progress: Callable[[str], None] | None = None,
              on_run: Callable[[ZooRun, str], None] | None = None,
              earlier: Sequence[tuple[ZooRun, str]] = ()) -> ZooScore:
    """Run the doctor on every member × seed (each member a pipeline spec, seen through `ProtocolView`).

    `families` empty: every family. The performance family judges wall-clock time, so it never runs
    beside other work of the zoo: the other families run in `workers` processes, then performance
    alone, one run at a time, on every member × seed (as `score_catalogue` runs its timing faults).
    `on_run(run, part)` is called as each run ends (part "families" or "performance"): a long zoo
    keeps what it measured even if it is stopped. `earlier`: (run, part) pairs measured before (a
    resumed zoo); those runs are counted as they are and not run again.
    """
    import time

    t0 = time.perf_counter()
    chosen = list(families) or list(_FAMILIES)
    untimed = tuple(f for f in chosen if f != "performance")
    timed = "performance" in chosen
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    ctx = mp.get_context("spawn")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    results: dict[tuple[str, int], ZooRun] = {}
    total = len(members) * len(seeds) * (int(bool(untimed)) + int(timed))
    done = 0

    def add(run: ZooRun) -> None:
        prev = results.get((run.member, run.seed))
        if prev is None:
            results[(run.member, run.seed)] = run
        else:  # the performance pass adds to the run of the other families
            prev.findings += run.findings
            prev.info_ids = sorted(set(prev.info_ids) | set(run.info_ids))
            prev.seconds += run.seconds
            prev.error = prev.error or run.error

    wanted = {(m["name"], s) for m in members for s in seeds}
    measured: set[tuple[str, int, str]] = set()
    for run, what in earlier:
        if (run.member, run.seed) in wanted and (run.member, run.seed, what) not in measured and not run.error:
            measured.add((run.member, run.seed, what))
            add(run)
            done += 1

    def collect(jobs: dict[Any, tuple[str, int, str]]) -> None:
        nonlocal done
        for fut in as_completed(jobs):
            name, seed, what = jobs[fut]
            try:
                res = fut.result()
            except Exception as exc:  # a worker that died is a result too
                res = {"findings": [], "seconds": 0.0, "error": f"{type(exc).__name__}: {exc}"}
            run = _zoo_run(name, seed, res)
            if on_run:
                on_run(run, what)
            add(run)
            done += 1
            if progress:
                errs = sorted({f["id"] for f in run.errors})
                warns = sorted({f["id"] for f in run.warnings})
                progress(f"[{done}/{total}] {name} seed {seed} ({what}): {len(run.errors)} errors"
                         f"{' ' + ','.join(errs) if errs else ''}, {len(run.warnings)} warnings"
                         f"{' ' + ','.join(warns) if warns else ''}{' FAILED ' + run.error if run.error else ''}"
                         f" · {run.seconds:.0f} s")

    if untimed:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            collect({pool.submit(run_one, m["spec"], None, seed, budget, untimed, None): (m["name"], seed, "families")
                     for seed in seeds for m in members if (m["name"], seed, "families") not in measured})
    if timed:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            collect({pool.submit(run_one, m["spec"], None, seed, budget, ("performance",), None):
                     (m["name"], seed, "performance") for seed in seeds for m in members
                     if (m["name"], seed, "performance") not in measured})
    runs = [results[(m["name"], s)] for m in members for s in seeds if (m["name"], s) in results]
    return ZooScore(members=list(members), seeds=list(seeds), runs=runs, families=chosen,
                    seconds=time.perf_counter() - t0)
