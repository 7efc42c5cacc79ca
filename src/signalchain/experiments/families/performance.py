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
}


def _ms(xs: list[float]) -> list[float]:
    return [round(x * 1000.0, 2) for x in xs]


def _at(xs: list[float], i: int) -> float | str:
    return round(xs[i] * 1000, 1) if i < len(xs) else "—"


def _cpu_wait(rep: PerfMeasurement, i: int) -> float:
    """ms the update (wait and compute) spent runnable but without a CPU."""
    if i >= len(rep.compute_delays):
        return 0.0
    return round((rep.compute_delays[i] + (rep.wait_delays[i] if i < len(rep.wait_delays) else 0.0)) * 1000, 1)


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
            ["update", "wait for batch (ms)", "compute (ms)", "of which waiting for a CPU (ms)"],
            [[i, _at(rep.waits, i), _at(rep.computes, i), _cpu_wait(rep, i)] for i in range(len(rep.computes))],
        ),
    }
    if rep.compute_delays:
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
