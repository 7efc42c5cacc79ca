"""How a bisect outcome is shown: the probe table, the one-paragraph verdict, the HTML page.

Generic over `BisectOutcome` (commits and checkpoints); it reads the outcome and the findings the
judge made, and never decides anything itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..findings import Finding
from ..golden import StageDiff
from ..records.bisect import BisectOutcome, BisectProbe
from ..report import HtmlReport, findings_table, table
from ..report.describe import describe_diff
from ..report.html import esc

__all__ = ["probe_rows", "print_outcome", "verdict_text", "render_bisect"]

_STYLE = {"good": "green", "bad": "red", "skip": "yellow"}


def _what(p: BisectProbe) -> str:
    """What the probe's run showed: the numbers of its first divergence, or its reason."""
    if p.verdict == "skip" or not p.detail:
        return p.reason
    d = p.detail
    diff = StageDiff(str(d.get("stage")), str(d.get("kind")), False, dict(d.get("detail") or {}))
    later = " (after the symptom: judged good)" if p.verdict == "good" and not p.role else ""
    return describe_diff(diff) + later


def probe_rows(outcome: BisectOutcome) -> list[list[str]]:
    """One row per probe, in the range's order: place, item, role, verdict, first divergence, what, source."""
    rows = []
    for p in sorted(outcome.probes, key=lambda p: p.index):
        source = "cache" if p.cached else f"{p.seconds:.1f} s"
        rows.append([f"{p.index + 1}/{outcome.n_items}", p.item, p.role or "", p.verdict,
                     p.first_divergence or "—", _what(p), source, str(p.extra.get("subject", ""))])
    return rows


_HEADERS = ["#", "item", "role", "verdict", "first divergence", "what it showed", "run", "subject"]


def verdict_text(outcome: BisectOutcome) -> str:
    """One paragraph: what the search concluded, at what cost."""
    o, noun = outcome, outcome.noun
    cost = (f"{o.runs + o.cached} golden run(s) over {o.n_items} {noun}s ({o.runs} run now, {o.cached} from the "
            f"cache)")
    if o.status == "found" and o.first_bad:
        fb = o.first_bad
        subject = f" “{fb['subject']}”" if fb.get("subject") else ""
        return (f"The first bad {noun} is {fb.get('item')}{subject}: from it on the golden batch diverges at stage "
                f"{fb.get('stage')!r}, the stage where the bad end {o.bad} first diverges, while {o.last_good} "
                f"before it still matches the golden up to that stage. Found in {cost}.")
    if o.status in ("flaky_good", "flaky_bad"):
        end = "good" if o.status == "flaky_good" else "bad"
        p = o.probe_of(f"{end} end")
        return (f"Not bisected: the {end} end {p.item if p else ''} did not behave as claimed when re-run "
                f"({p.reason if p else 'no result'}). {cost}.")
    if o.status == "unrunnable_end":
        return f"Not bisected: an end of the range could not run (see the findings). {cost}."
    return (f"Ambiguous: the first bad {noun} is one of {', '.join(o.candidates)}; every {noun} between "
            f"{o.last_good} and the first bad one was skipped. {cost}.")


def print_outcome(outcome: BisectOutcome, con: Console) -> None:
    t = Table(title=f"Bisect over {outcome.n_items} {outcome.noun}s: {outcome.good} (good) → {outcome.bad} (bad)")
    for h in _HEADERS:
        t.add_column(h, overflow="fold")
    for row in probe_rows(outcome):
        style = _STYLE.get(row[3], "")
        t.add_row(*[escape(c) for c in row[:3]], f"[{style}]{row[3]}[/{style}]", *[escape(c) for c in row[4:]])
    con.print(t)
    colour = "bold red" if outcome.status == "found" else "yellow"
    con.print(f"[{colour}]{escape(verdict_text(outcome))}[/{colour}]")
    if outcome.first_bad and outcome.first_bad.get("diffstat"):
        con.print(escape(str(outcome.first_bad["diffstat"])))


def render_bisect(outcome: BisectOutcome, findings: Sequence[Finding],
                  extra: dict[str, Any] | None = None) -> HtmlReport:
    """The self-contained page: the verdict, the culprit's diff stat, every probe, the findings."""
    page = HtmlReport(f"signalchain bisect: {outcome.good} → {outcome.bad}",
                      ", ".join(f"{k} {v}" for k, v in (extra or {}).items()), findings=findings)
    body = f"<p>{esc(verdict_text(outcome))}</p>"
    if outcome.first_bad and outcome.first_bad.get("diffstat"):
        body += f"<pre>{esc(outcome.first_bad['diffstat'])}</pre>"
    page.section("Verdict", body)
    page.section("Probes", table(probe_rows(outcome), _HEADERS))
    page.section("Findings", findings_table(findings))
    return page
