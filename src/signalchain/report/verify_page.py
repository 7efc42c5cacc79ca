"""The `verify` page: the verdict, the three tests, a before/after table per seed, both sides' curves
side by side and both sides' golden audio. It draws the judge's verdict; it computes none."""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from ..records.verify import SideRun, VerifyMeasurement, VerifyVerdict
from .doctor_page import render_metric
from .html import HtmlReport, esc, findings_table, table

__all__ = ["render_verify", "verify_json", "verify_lines", "verify_table"]

_TESTS = {"failure_gone": "1. the original failure no longer occurs (errors gone, measure improved)",
          "control_ok": "2. an unaffected control still works (it judged something and shows no new error)",
          "every_seed": "3. every seed agrees (the failing state fails on each, the outcome is the same)"}


def _ok(b: bool | None) -> str:
    if b is None:
        return '<span class="warning">could not run</span>'
    return '<span class="ok">pass</span>' if b else '<span class="bad">fail</span>'


def _word(b: bool | None) -> str:
    return "pass" if b else ("NOT RUN" if b is None else "FAIL")


def _evidence(steps: dict[str, dict[str, dict[str, Any]]] | None) -> str:
    """A step log as one line per family: the steps that judged, and those that did not run and why."""
    if steps is None:
        return "not reported"
    out = []
    for fam, log in steps.items():
        judged = [n for n, e in log.items() if e.get("status") == "judged"]
        skipped = [f"{n} ({e.get('why') or e.get('status')})" for n, e in log.items()
                   if e.get("status") in ("skipped", "crashed")]
        out.append(f"{fam}: " + (f"judged {', '.join(judged)}" if judged else "judged nothing")
                   + (f"; did not run: {', '.join(skipped)}" if skipped else ""))
    return " · ".join(out) or "no family"


def _judged_nothing(run: SideRun) -> bool:
    """A control that judged nothing on this run (or did not say what it judged): "none" would be a lie."""
    steps = run.control_steps
    return steps is None or not any(e.get("status") == "judged" for log in steps.values() for e in log.values())


def _errs(run: SideRun, control: bool = False) -> str:
    errs = run.control_errors if control else run.errors
    if run.failed:
        return f'<span class="bad">could not run: {esc(run.failed)}</span>'
    cells = [f"<code>{esc(e.id)}</code> @ {esc(e.stage or '—')}" for e in errs]
    if not cells and control and _judged_nothing(run):
        return '<span class="warning">judged nothing</span>'
    return "<br>".join(cells) or '<span class="ok">none</span>'


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def verify_json(m: VerifyMeasurement, v: VerifyVerdict) -> dict[str, Any]:
    """The `verify` object of the JSON report (no figures; the HTML page holds them)."""
    side = lambda name, runs: {"state": name, "runs": [r.summary() for r in runs]}  # noqa: E731
    return {
        "before": side(m.before_name, m.before), "after": side(m.after_name, m.after),
        "seeds": [{"seed": s.seed, "verdict": s.verdict, "reproduced": s.reproduced, "improvement": s.improvement,
                   "measure_ok": s.measure_ok, "persisting": [f"{e.id}@{e.stage}" for e in s.persisting],
                   "regressed": [f"{e.id}@{e.stage}" for e in s.regressed]} for s in v.seeds],
        "tests": v.tests(), "verdict": v.verdict,
        "control_evidence": [{"seed": s.seed, "judged": s.control_ran, "did_not_run": s.control_skipped}
                             for s in v.seeds],
        "unchecked": sorted({f"{e.id}@{e.stage}" for s in v.seeds for e in s.unchecked}),
        "rate": v.rate.__dict__ if v.rate is not None else None, "control_waived": m.control_waived,
        "measure": {"name": m.measure.name, "title": m.measure.title, "higher_is_better": m.measure.higher_is_better,
                    "goal": m.measure.goal},
        "interval": v.interval.__dict__ if v.interval is not None else None,
        "symptom": m.symptom, "families": m.families, "control": m.control, "control_note": m.control_note,
        "budget": m.budget,
    }


def _side_by_side(before: dict[str, Any], after: dict[str, Any], keys: list[str]) -> str:
    rows = []
    for key in keys:
        cells = [render_metric(side[key]) if key in side else '<p class="muted">not measured</p>'
                 for side in (before, after)]
        rows.append(f"<tr><td>{cells[0]}</td><td>{cells[1]}</td></tr>")
    return ('<table style="table-layout:fixed;width:100%"><thead><tr><th>before</th><th>after</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def render_verify(findings: list[Finding], m: VerifyMeasurement, v: VerifyVerdict, seconds: float) -> HtmlReport:
    report = HtmlReport(f"signalchain verify · {v.verdict}",
                        f"before: {m.before_name} · after: {m.after_name} · families: {', '.join(m.families)} · "
                        f"{m.control_note} · seeds {m.seeds} · budget {m.budget} · {seconds:.1f} s",
                        findings=findings)
    report.section("Verdict", findings_table(findings), "verdict")
    tests = [[esc(_TESTS[k]), '<span class="muted">skipped (--control none)</span>'
              if k == "control_ok" and m.control_waived else _ok(ok)] for k, ok in v.tests().items()]
    interval = ""
    if v.interval is not None:
        i = v.interval
        interval = (f"<p>Improvement of the {esc(m.measure.title)}: mean {i.mean:+.4g}, {i.level:.0%} interval "
                    f"{i.low:+.4g} to {i.high:+.4g} ({esc(i.method)}; with this few seeds the interval is wide: "
                    "the test rests on the sign on every seed).</p>")
    if v.rate is not None:
        interval += f"<p>{esc(v.rate.text[0].upper() + v.rate.text[1:])}.</p>"
    evidence = "".join(f"<li>seed {r.seed}: {esc(_evidence(r.control_steps))}</li>" for r in m.after)
    control = (f"<p>Control on the fixed state (what each family judged; a family that judged nothing is no "
               f"evidence):</p><ul>{evidence}</ul>" if m.control else "")
    report.section("The three tests", table(tests, ["test", "result"], raw=True) + interval + control, "tests")
    rows = []
    for s, b, a in zip(v.seeds, m.before, m.after):
        rows.append([str(s.seed), _errs(b), _errs(a), _num(b.measure), _num(a.measure), _num(s.improvement),
                     _errs(b, True), _errs(a, True), esc(s.verdict)])
    report.section("Before and after, seed by seed",
                   f"<p>measure: {esc(m.measure.title)}</p>"
                   + table(rows, ["seed", "errors before", "errors after", "measure before", "measure after",
                                  "improvement", "control before", "control after", "verdict"], raw=True), "seeds")
    if m.before and m.after:
        b, a = m.before[0].metrics, m.after[0].metrics
        curves = [k for k in dict.fromkeys(list(b) + list(a))
                  if (b.get(k) or a.get(k) or {}).get("kind") in ("curves", "bars", "table")]
        curves.sort(key=lambda k: k != m.measure.figure)  # the measure's own figure first
        if curves:
            report.section(f"Measurements side by side (seed {m.seeds[0]})", _side_by_side(b, a, curves), "curves")
        audio = [k for k in dict.fromkeys(list(b) + list(a)) if (b.get(k) or a.get(k) or {}).get("kind") == "audio"]
        if audio:
            report.section(f"Golden audio, both sides (seed {m.seeds[0]})", _side_by_side(b, a, audio), "audio")
    return report


def verify_table(m: VerifyMeasurement, v: VerifyVerdict) -> Any:
    """The terminal's before/after table (rich), one row per seed, and the three tests under it."""
    from rich.table import Table

    t = Table(title=f"verify · {m.measure.title}", expand=False)
    for col in ("seed", "errors before", "errors after", "measure before", "after", "gain", "control after",
                "verdict"):
        t.add_column(col)
    plain = lambda errs: ", ".join(sorted({f"{e.id}@{e.stage or '—'}" for e in errs})) or "none"  # noqa: E731
    for s, b, a in zip(v.seeds, m.before, m.after):
        control = ("judged nothing" if m.control and not a.control_errors and _judged_nothing(a)
                   else plain(a.control_errors))
        t.add_row(str(s.seed), b.failed or plain(b.errors), a.failed or plain(a.errors), _num(b.measure),
                  _num(a.measure), _num(s.improvement), control, s.verdict)
    return t


def verify_lines(m: VerifyMeasurement, v: VerifyVerdict) -> list[str]:
    """The three tests and the interval, one line each, for the terminal."""
    lines = [f"{'skipped' if k == 'control_ok' and m.control_waived else _word(ok)}  {_TESTS[k]}"
             for k, ok in v.tests().items()]
    if v.interval is not None:
        i = v.interval
        lines.append(f"improvement {i.mean:+.4g}, {i.level:.0%} interval {i.low:+.4g} to {i.high:+.4g} "
                     f"({i.method})")
    if v.rate is not None:
        lines.append(v.rate.text)
    lines.append(m.control_note)
    if m.control and m.after:
        lines.append(f"control on the fixed state, seed {m.after[0].seed}: {_evidence(m.after[0].control_steps)}")
    lines.append(f"verdict: {v.verdict}")
    return lines
