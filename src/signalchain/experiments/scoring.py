"""Score a fault catalogue: run the doctor on each fault (as a user would, after stating the
symptom) and on the clean pipeline over several seeds, in parallel processes.

Every run sees the pipeline through `ProtocolView`: no detector can read which fault is injected.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from ..findings import Severity

__all__ = ["FaultRow", "Score", "score_catalogue", "run_one"]


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
        for row in untimed:
            symptom = row.symptom if by_symptom else None
            jobs[pool.submit(run_one, spec, row.name, 0, budget, (), symptom)] = ("fault", row)
        for seed in control_seeds:
            jobs[pool.submit(run_one, spec, None, seed, budget, (), None)] = ("control", seed)
        collect(jobs)
    if timed:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            collect({pool.submit(run_one, spec, row.name, 0, budget, (), row.symptom if by_symptom else None):
                     ("fault", row) for row in timed})
    control.sort(key=lambda c: c["seed"])
    return Score(rows=rows, control_seeds=list(control_seeds), control=control, seconds=time.perf_counter() - t0)
