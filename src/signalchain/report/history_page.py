"""The page of `signalchain history`: the findings, every judged curve with each finding marked at its
step and the checkpoints on the step axis, the series shown but not judged, the checkpoints, the
reader's notes and the bisect command. It reads the result; it decides nothing.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..records.figures import Curves
from ..records.history import RunHistory, Series
from .doctor_page import render_metric
from .html import HtmlReport, esc, findings_table, table

__all__ = ["render_history", "curve_points", "MAX_POINTS"]

MAX_POINTS = 4000  # per drawn series: longer ones are drawn as the min/max envelope of 2000 buckets
#: (title, roles, y label, log axis) of the judged panels, in reading order.
_PANELS = (
    ("Loss: training and validation", ("train_loss", "valid_loss"), "loss", True),
    ("Loss per codebook", ("train_codebook_loss", "valid_codebook_loss"), "loss", True),
    ("Gradient norm", ("grad_norm",), "norm", True),
    ("Learning rate", ("lr",), "rate", False),
    ("Loss scale", ("loss_scale",), "scale", True),
    ("Step time", ("step_time",), "seconds per step", False),  # two units: two panels
    ("Throughput", ("throughput",), "samples (or steps) per second", False),
)


def curve_points(s: Series) -> list[list[float]]:
    """[xs, ys] of a series for drawing: non-finite values as gaps, long series as a min/max envelope
    (so a one-point spike among 10^6 points is still drawn)."""
    x = s.steps.astype(float)
    y = np.where(np.isfinite(s.values), s.values, np.nan)
    if len(y) > MAX_POINTS:
        edges = np.linspace(0, len(y), MAX_POINTS // 2 + 1).astype(int)
        xs, ys = [], []
        for a, b in zip(edges[:-1], edges[1:]):
            seg = y[a:b]
            if np.isnan(seg).all():
                xs += [x[a]]
                ys += [np.nan]
                continue
            lo, hi = int(np.nanargmin(seg)), int(np.nanargmax(seg))
            for i in sorted({lo, hi}):
                xs.append(x[a + i])
                ys.append(seg[i])
        x, y = np.asarray(xs), np.asarray(ys)
    return [x.tolist(), [float(v) for v in y]]  # NaN: a gap in the line


def _marks(result: Any) -> dict[str, float]:
    marks: dict[str, float] = {}
    for f in result.findings:
        step = f.evidence.get("step")
        if f.severity.value != "info" and isinstance(step, numbers.Integral) and not isinstance(step, bool):
            marks[f"{f.id.removeprefix('history.')} @ {f.evidence['step']}"] = float(f.evidence["step"])
    pair = result.pair
    for tag, c in (("last healthy", pair.good if pair else None), ("first unhealthy", pair.bad if pair else None)):
        if c is not None:
            marks[f"{tag} checkpoint {c.step}"] = float(c.step)
    return marks


def _rug(result: Any) -> dict[str, list[float]]:
    """The checkpoints as ticks on the step axis: the pair the result names first (highlighted), then the
    other complete ones, then those that lack their weights."""
    pair = result.pair
    named = [c for c in ((pair.good, pair.bad) if pair else ()) if c is not None]
    ids = {id(c) for c in named}
    rest = [c for c in result.run.checkpoints if id(c) not in ids]
    rug = {"checkpoint pair": [float(c.step) for c in named],
           "checkpoints": [float(c.step) for c in rest if c.complete],
           "checkpoints without weights": [float(c.step) for c in rest if not c.complete]}
    return {k: v for k, v in rug.items() if v}


def _panel(run: RunHistory, title: str, series: list[Series], ylabel: str, logy: bool, marks: dict[str, float],
           rug: dict[str, list[float]] | None = None) -> str:
    drawn = {s.name: curve_points(s) for s in series}
    positive = all(all(not v <= 0 for v in pts[1]) for pts in drawn.values())  # NaN compares False
    return render_metric(Curves(title, drawn, x_label=run.axis, y_label=ylabel, logy=logy and positive,
                                vlines=marks or None, rug=rug or None).to_dict())


def render_history(result: Any) -> HtmlReport:
    run: RunHistory = result.run
    page = HtmlReport(f"signalchain history: {run.root}",
                      f"{run.format} log, {len(run.series)} series, {run.points():,} points, "
                      f"{len(run.checkpoints)} checkpoints", findings=result.findings)
    page.section("Findings", findings_table(result.findings))
    if result.bisect or result.bisect_note:
        body = f"<pre>{esc(result.bisect)}</pre>" if result.bisect else ""
        page.section("Next: bisect the checkpoints", body + f'<p class="muted">{esc(result.bisect_note)}</p>')
    marks, rug = _marks(result), _rug(result)
    curves = []
    for title, roles, ylabel, logy in _PANELS:
        series = [s for r in roles for s in run.by_role(r)]
        if series:
            curves.append(_panel(run, title, series, ylabel, logy, marks, rug))
    page.section("Curves (judged)", "".join(curves) or "<p>no series with a role: nothing judged</p>")
    other = [s for s in run.series.values() if s.role is None]
    if other:
        shown = "".join(_panel(run, s.name, [s], s.name, False, {}) for s in other[:12])
        more = f"<p class='muted'>{len(other) - 12} more not drawn</p>" if len(other) > 12 else ""
        page.section("Shown, not judged (names signalchain does not know)", shown + more)
    if run.checkpoints:
        page.section(f"Checkpoints ({len(run.checkpoints)})",
                     table([[c.step, c.path, "yes" if c.complete else "no (weights missing)"] for c in run.checkpoints],
                           ["step", "path", "complete"]))
    if run.notes:
        page.section("What the reader skipped",
                     table([[n.where(), n.message] for n in run.notes], ["file:line (or record)", "why"]))
    page.section("Read", table([[s] for s in run.sources], ["file"]))
    return page
