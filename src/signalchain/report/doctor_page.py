"""The `doctor` page: findings first, then every measurement as its picture (the typed figures of
`records.figures`, as dicts), grouped by the part of its key before the first dot."""

from __future__ import annotations

import math
from typing import Any

from ..findings import Finding
from .html import HtmlReport, audio_player, esc, findings_table, image_tag, table
from .plots import bar_figure, line_figure, stack_figure

__all__ = ["render_doctor", "render_metric", "strip_audio"]


def _finite(xs: list[float]) -> list[float]:
    return [x if math.isfinite(x) else float("nan") for x in xs]


def render_metric(m: dict[str, Any]) -> str:
    """A measurement declared with a "kind" (the convention every family uses for its pictures):

    curves: {"series": {name: [xs, ys]}, "x_label", "y_label", "logx", "logy", "vlines": {name: x}, "ylim": [lo, hi],
             "rug": {name: [x, ...]}}
    bars:   {"values": {name: number}, "x_label", "logx"}
    stack:  {"segments": [[name, number, group]], "groups": [group], "x_label"}  (one bar, segments in order)
    table:  {"headers": [...], "rows": [[...]]}
    audio:  {"sample_rate": sr, "clips": [{"label": str, "audio": array [C, T] or [T], "note": str}]}
            (a clip without "audio" shows its note in place of a player: why there is nothing to hear)
    text:   {"text": str}
    """
    kind, title = m.get("kind"), str(m.get("title", ""))
    if kind == "curves":
        series = {k: (list(v[0]), _finite([float(y) for y in v[1]])) for k, v in m["series"].items()}
        return image_tag(line_figure(series, title, m.get("x_label", ""), m.get("y_label", ""),
                                     logx=bool(m.get("logx")), logy=bool(m.get("logy")), vlines=m.get("vlines"),
                                     ylim=tuple(m["ylim"]) if m.get("ylim") else None, rug=m.get("rug")), title)
    if kind == "bars":
        return image_tag(bar_figure(m["values"], title, m.get("x_label", ""), logx=m.get("logx", True)), title)
    if kind == "stack":
        return image_tag(stack_figure(m["segments"], m.get("groups", []), title, m.get("x_label", "")), title)
    if kind == "table":
        return f"<h3>{esc(title)}</h3>" + table(m["rows"], m["headers"])
    if kind == "audio":
        sr = int(m["sample_rate"])
        cards = []
        for clip in m.get("clips", []):
            note = f'<div class="muted">{esc(clip["note"])}</div>' if clip.get("note") else ""
            player = audio_player(clip["audio"], sr, clip.get("label", "")) if clip.get("audio") is not None \
                else '<span class="muted">no audio</span>'
            cards.append(f'<div class="example"><b>{esc(clip.get("label", ""))}</b>{note}<div>{player}</div></div>')
        return f'<h3>{esc(title)}</h3><div class="players">{"".join(cards)}</div>'
    if kind == "text":
        return f"<h3>{esc(title)}</h3><p>{esc(m.get('text', ''))}</p>"
    return ""


def strip_audio(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics for JSON: audio clips are replaced by their labels (the HTML report holds the sound)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, dict) and v.get("kind") == "audio":
            v = {**v, "clips": [{kk: vv for kk, vv in c.items() if kk != "audio"} for c in v.get("clips", [])]}
        out[k] = v
    return out


def render_doctor(findings: list[Finding], metrics: dict[str, Any], families: list[str], unavailable: list[str],
                  timings: dict[str, float], title: str) -> HtmlReport:
    report = HtmlReport(
        f"signalchain doctor · {title}",
        f"families: {', '.join(families)}" + (f" · not available: {', '.join(unavailable)}" if unavailable else ""),
        findings=findings,
    )
    report.section("Findings", findings_table(findings), "findings")
    generic: dict[str, list[str]] = {}
    for key, m in metrics.items():
        if isinstance(m, dict) and "kind" in m:
            generic.setdefault(key.split(".", 1)[0], []).append(render_metric(m))
    for fam, parts in generic.items():
        report.section(f"{fam}: measurements", "".join(parts), f"m-{fam}")
    report.section("Time", table([[k, f"{v:.2f} s"] for k, v in timings.items()], ["part", "time"]), "time")
    return report
