"""The performance family: where a training update's time goes (`signalchain doctor --symptom slow`)."""

from __future__ import annotations

from ...checks.performance import judge_performance
from ...records.figures import Curves, Figure, Table
from ...records.performance import PerfMeasurement
from ..context import Knob
from ..doctor import Family, Step, register
from ..performance import measure_performance

__all__: list[str] = []

KNOBS = {
    # timed updates on loader batches: 1 + 4 repeats of the longest worker period judged (8), so a slow
    # worker among up to 8 and restarts every <= 16 batches both show; economy: 1 + 2 repeats
    "perf_steps": Knob(17, 33, 49, "timed updates on loader batches"),
    "perf_sync_steps": Knob(1, 2, 3, "updates whose host reads (syncs) are counted"),
    # a second pass over the loader (a fresh iterator): a cold first pass (decode or cache on first access)
    # shows as every re-read batch arriving faster; 1 + 3 pairs at economy, 1 + 7 (chance 1/128) above
    "perf_reread": Knob(4, 8, 8, "updates on a second pass over the loader"),
}


def _ms(xs: list[float]) -> list[float]:
    return [round(x * 1000.0, 2) for x in xs]


def _at(xs: list[float], i: int) -> float | str:
    return round(xs[i] * 1000, 1) if i < len(xs) else "—"


def _cpu_wait(rep: PerfMeasurement, i: int) -> float:
    """ms the update (wait and compute) spent runnable without a CPU: the loop thread's, else every thread's."""
    queued, delays = (rep.compute_queued, rep.wait_queued) if rep.compute_queued else (rep.compute_delays,
                                                                                        rep.wait_delays)
    if i >= len(queued):
        return 0.0
    return round((queued[i] + (delays[i] if i < len(delays) else 0.0)) * 1000, 1)


def _cpu(rep: PerfMeasurement, i: int) -> float | str:
    if i >= len(rep.compute_cpu):
        return "—"
    return round((rep.compute_cpu[i] + (rep.wait_cpu[i] if i < len(rep.wait_cpu) else 0.0)) * 1000, 1)


def _pass(rep: PerfMeasurement, i: int) -> int:
    return 2 if rep.reread_from is not None and i >= rep.reread_from else 1


def _metrics(rep: PerfMeasurement) -> dict[str, Figure]:
    xs = list(range(len(rep.computes)))
    series = {"update (compute)": [xs, _ms(rep.computes)]}
    if rep.waits:
        series["waiting for the batch"] = [xs[: len(rep.waits)], _ms(rep.waits)]
    out: dict[str, Figure] = {
        "performance.timeline": Curves(
            "Time of each update: waiting for data and computing", series, x_label="update", y_label="ms", logy=True
        ),
        "performance.updates": Table(
            f"Timed updates ({rep.device})",
            ["update", "wait for batch (ms)", "compute (ms)", "of which waiting for a CPU (ms)",
             "loop thread on a CPU (ms)", "pass over the loader"],
            [[i, _at(rep.waits, i), _at(rep.computes, i), _cpu_wait(rep, i), _cpu(rep, i), _pass(rep, i)]
             for i in range(len(rep.computes))],
        ),
    }
    if rep.compute_queued or rep.compute_delays:
        series["waiting for a CPU (other processes)"] = [xs, _ms([_cpu_wait(rep, i) / 1000 for i in xs])]
    if rep.syncs:
        rows = [[site, n] for site, n in rep.sync_sites.items()]
        out["performance.syncs"] = Table(f"Host reads (syncs) per update: {rep.syncs}, module calls: "
                                         f"{rep.module_calls}; by op: {rep.sync_ops or '—'}",
                                         ["where (file:line)", "reads"], rows)
    return out


register(Family("performance", "Where the time goes: waiting for data, slow or restarting workers, stalls, host syncs",
                after=("splits",), knobs=KNOBS, steps=(
    # Without a loader, updates run on the golden batch: stalls and syncs are still judged.
    Step("loader", needs=("loader",), needed_by="checks.performance.loader"),
    Step("measure", say="performance: timing updates and counting host syncs", measure=measure_performance,
         judges=(judge_performance,), show=_metrics),
)))
