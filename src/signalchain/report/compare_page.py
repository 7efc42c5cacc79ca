"""The `compare` page: where a new run first parts from the golden batch, with both versions to hear."""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from ..golden.compare import Comparison
from ..trace import Trace
from .describe import describe_diff
from .html import HtmlReport, columns, esc, findings_table, table
from .inspect_page import provenance_html, stage_html

__all__ = ["render_compare"]


def render_compare(comparison: Comparison, golden: Trace, new: Trace, provenance: dict[str, Any],
                   findings: list[Finding], new_label: str) -> HtmlReport:
    first = comparison.first_divergence
    verdict = "identical" if first is None else f"first divergent stage: {first.stage}"
    report = HtmlReport(f"signalchain compare · {verdict}", f"golden vs {new_label}", findings=findings)
    report.section("Verdict", findings_table(findings), "verdict")
    rows = []
    for d in comparison.stages:
        status = '<span class="ok">same</span>' if d.equal else (
            '<span class="bad">FIRST DIVERGENCE</span>' if d is first else '<span class="bad">differs</span>')
        rows.append([esc(d.stage), esc(d.kind), status, "" if d.equal else esc(describe_diff(d))])
    report.section("Stage by stage", table(rows, ["stage", "kind", "result", "detail"], raw=True), "stages")
    for d in comparison.stages:
        if d.equal:
            continue
        a, b = golden.get(d.stage), new.get(d.stage)
        cols = []
        for label, rec in (("golden", a), (new_label, b)):
            body = stage_html(rec, max_examples=4) if rec is not None else '<p class="muted">absent</p>'
            cols.append(f"<h3>{esc(label)}</h3>{body}")  # stage_html opens with the record's summary
        report.section(f"{d.stage}: {describe_diff(d)}", columns(*cols), f"diff-{d.stage}")
    report.section("Golden provenance", provenance_html(provenance), "provenance")
    return report
