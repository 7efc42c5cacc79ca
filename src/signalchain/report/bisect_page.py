"""The page of `bisect --checkpoints`: the findings, how each probed checkpoint measured (curves per
param group across the run's steps), and both checkpoints around the change side by side.

It reads the search record and the judge's findings; it decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..findings import Finding
from ..records.checkpoints import CheckpointBisect, CheckpointHealth
from ..records.figures import Curves
from .describe import fmt
from .doctor_page import render_metric
from .html import HtmlReport, findings_table, table

__all__ = ["render_checkpoints"]

#: The statistics drawn over the run, one line per param group (log scale: a blow-up is orders of magnitude).
_CURVES = ("exp_avg_sq.max", "exp_avg.max", "update_ratio", "grad_norm", "lr", "weight_norm")


def _x(p: CheckpointHealth) -> float:
    return float(p.step if p.step is not None else p.index)


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def _curves(res: CheckpointBisect) -> list[dict[str, Any]]:
    probes = sorted((p for p in res.probes if p.loaded), key=_x)
    marks: dict[str, float] = {}
    bad = res.probe_of(res.first_unhealthy)
    if bad is not None:
        marks[f"first unhealthy: {bad.name}"] = _x(bad)
    out = [Curves("loss of the golden batch at each probed checkpoint",
                  {"loss": [[_x(p) for p in probes if _positive(p.loss)],
                            [p.loss for p in probes if _positive(p.loss)]]},
                  x_label="step", y_label="loss", logy=True, vlines=marks or None).to_dict()]
    groups = list(dict.fromkeys(g.name for p in probes for g in p.groups))
    for stat in _CURVES:
        series = {}
        for name in groups:
            pts = [(_x(p), p.group(name).stat(stat)) for p in probes if p.group(name) is not None]
            pts = [(x, v) for x, v in pts if _positive(v)]
            if pts:
                series[name] = [[x for x, _ in pts], [v for _, v in pts]]
        if series:
            out.append(Curves(f"{stat} per param group", series, x_label="step", y_label=stat, logy=True,
                              vlines=marks or None).to_dict())
    return out


def _probe_rows(res: CheckpointBisect) -> list[list[str]]:
    rows = []
    for n, p in enumerate(res.probes, 1):
        verdict = "skipped" if not p.loaded else ("healthy" if p.healthy else "unhealthy")
        why = p.skip_reason or (p.reasons[0].why if p.reasons else "")
        rows.append([str(n), p.name, fmt(p.step), verdict, fmt(p.loss), fmt(p.grad_norm), why])
    return rows


def _pair_rows(res: CheckpointBisect) -> list[list[str]]:
    if res.pair is None:
        return []
    rows = []
    for row in res.pair.group_table():
        a, b = row["last_healthy"] or {}, row["first_unhealthy"] or {}
        for stat in ("lr", "weight_norm", "exp_avg.max", "exp_avg_sq.max", "exp_avg_sq.mean", "grad_norm",
                     "update_ratio"):
            if a.get(stat) is not None or b.get(stat) is not None:
                rows.append([row["group"], stat, fmt(a.get(stat)), fmt(b.get(stat))])
    return rows


def render_checkpoints(res: CheckpointBisect, findings: Sequence[Finding], subtitle: str = "") -> HtmlReport:
    """The self-contained page of one checkpoint bisect."""
    page = HtmlReport(f"signalchain bisect: {len(res.checkpoints)} checkpoints", subtitle, findings=findings)
    page.section("Findings", findings_table(findings))
    page.section("Over the run", "".join(render_metric(c) for c in _curves(res)))
    page.section(f"Probes ({res.runs} golden runs)",
                 table(_probe_rows(res), ["#", "checkpoint", "step", "verdict", "loss", "grad norm", "why"]))
    if res.pair is not None:
        page.section(f"{res.pair.a.name} (last healthy) → {res.pair.b.name} (first unhealthy)",
                     table(_pair_rows(res), ["group", "statistic", res.pair.a.name, res.pair.b.name]))
    return page
