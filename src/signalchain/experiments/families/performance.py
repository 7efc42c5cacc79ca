"""The performance family: where a training update's time goes (`signalchain doctor --symptom slow`)."""

from __future__ import annotations

from typing import Any

from ...checks.base import run_check
from ...checks.performance import judge_performance
from ...findings import Finding
from ...pipeline import capabilities, missing_capability
from ...records.performance import PerfMeasurement
from ..context import Context
from ..doctor import family
from ..performance import measure_performance

__all__: list[str] = []


def _ms(xs: list[float]) -> list[float]:
    return [round(x * 1000.0, 2) for x in xs]


def _at(xs: list[float], i: int) -> float | str:
    return round(xs[i] * 1000, 1) if i < len(xs) else "—"


def _cpu_wait(rep: PerfMeasurement, i: int) -> float:
    """ms the update (wait and compute) spent runnable but without a CPU."""
    if i >= len(rep.compute_delays):
        return 0.0
    return round((rep.compute_delays[i] + (rep.wait_delays[i] if i < len(rep.wait_delays) else 0.0)) * 1000, 1)


def _metrics(rep: PerfMeasurement) -> dict[str, Any]:
    xs = list(range(len(rep.computes)))
    series = {"update (compute)": [xs, _ms(rep.computes)]}
    if rep.waits:
        series["waiting for the batch"] = [xs[: len(rep.waits)], _ms(rep.waits)]
    out: dict[str, Any] = {
        "performance.timeline": {"kind": "curves", "title": "Time of each update: waiting for data and computing",
                                 "series": series, "x_label": "update", "y_label": "ms", "logy": True},
        "performance.updates": {"kind": "table", "title": f"Timed updates ({rep.device})",
                                "headers": ["update", "wait for batch (ms)", "compute (ms)",
                                            "of which waiting for a CPU (ms)"],
                                "rows": [[i, _at(rep.waits, i), _at(rep.computes, i), _cpu_wait(rep, i)]
                                         for i in range(len(rep.computes))]},
    }
    if rep.compute_delays:
        series["waiting for a CPU (other processes)"] = [xs, _ms([_cpu_wait(rep, i) / 1000 for i in xs])]
    if rep.syncs:
        rows = [[site, n] for site, n in rep.sync_sites.items()]
        out["performance.syncs"] = {"kind": "table",
                                    "title": f"Host reads (syncs) per update: {rep.syncs}, module calls: "
                                             f"{rep.module_calls}; by op: {rep.sync_ops or '—'}",
                                    "headers": ["where (file:line)", "reads"], "rows": rows}
    return out


@family("performance", "Where the time goes: waiting for data, slow or restarting workers, stalls, host syncs")
def performance_family(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    if "loader" not in capabilities(ctx.pipeline):
        # Without a loader, updates run on the golden batch: stalls and syncs are still judged.
        out.append(missing_capability(ctx.pipeline, "loader", "checks.performance.loader"))  # type: ignore[arg-type]
    ctx.say("performance: timing updates and counting host syncs")
    rep, crashed = ctx.attempt("performance.measure", measure_performance, ctx)
    out += crashed
    if rep is None:
        return out
    ctx.metrics.update(_metrics(rep))
    return out + run_check("checks.performance", judge_performance, rep)
