"""The `audit` page: findings, the splits side by side, the flagged pairs (to listen to), and the
per-file table. Renders what the audit measured; judges nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._units import plural
from ..findings import Finding
from .html import HtmlReport, audio_player, esc, findings_table, table

__all__ = ["render_audit"]

MAX_FILE_ROWS = 2000  # the JSON report holds every file; the page shows the first ones


def _splits(splits: dict[str, dict[str, Any]]) -> str:
    rows = [
        [
            name,
            int(s.get("items", 0)),
            int(s.get("clips", 0)),
            f"{s.get('samples', 0):.0f}",
            f"{s.get('mean', 0):.4g}",
            f"{s.get('std', 0):.4g}",
        ]
        for name, s in splits.items()
    ]
    return table(rows, ["split", "examples", "readable", "mono samples", "mean", "std"])


def _matches(matches: Sequence[dict[str, Any]]) -> str:
    if not matches:
        return '<p class="ok">No audio found on two sides of a split.</p>'
    rows = [[m["kind"], f'{m["a_split"]}: {m["a"]}', f'{m["b_split"]}: {m["b"]}', m["similarity"], m["coverage"],
             m["overlap_s"], m["lag_s"]] for m in matches[:500]]
    return table(rows, ["kind", "evaluation", "other split", "similarity", "coverage", "overlap (s)", "lag (s)"])


def _listen(clips: Sequence[dict[str, Any]]) -> str:
    cards = []
    for c in clips:
        note = f'<div class="muted">{esc(c["note"])}</div>' if c.get("note") else ""
        cards.append(f'<div class="example"><b>{esc(c["label"])}</b>{note}'
                     f'{audio_player(c["audio"], int(c["sample_rate"]), c["label"])}</div>')
    return "".join(cards)


def _files(files: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            f["split"],
            f["path"],
            f.get("line") or "",
            f.get("problem") or "",
            f.get("seconds") or "",
            f.get("sample_rate") or "",
            f.get("channels") or "",
            f.get("rms_dbfs") if f.get("rms_dbfs") is not None else "",
            (f.get("caption") or "")[:120],
        ]
        for f in files[:MAX_FILE_ROWS]
    ]
    more = (
        f'<p class="muted">{len(files) - MAX_FILE_ROWS} more in the JSON report.</p>'
        if len(files) > MAX_FILE_ROWS
        else ""
    )
    return (
        table(rows, ["split", "file", "line", "problem", "seconds", "rate", "channels", "RMS dBFS", "caption"]) + more
    )


def _engine(info: dict[str, Any]) -> str:
    """One line on where the files were measured."""
    if info.get("engine") != "ray":
        return f"measured here by {plural(int(info.get('workers', 1)), 'worker process', 'worker processes')}"
    line = (f"measured on Ray ({info.get('address')}): {info.get('cpus')} CPUs on {info.get('nodes')} "
            f"node(s), {info.get('tasks')} tasks, {info.get('files_per_second')} files/s")
    if info.get("worker_deaths"):
        line += (f"; {info['worker_deaths']} worker deaths, {info.get('retried_files', 0)} files retried alone, "
                 f"{len(info.get('lost', []))} lost, {len(info.get('hung', []))} stopped as hung")
    return line


def render_audit(findings: list[Finding], result: Any, listen: Sequence[dict[str, Any]] = ()) -> HtmlReport:
    """`result` is an `audit.run.AuditResult`; `listen` holds clips of flagged pairs
    ({"label", "audio" [C, T], "sample_rate", "note"}) read by the caller."""
    sources = ", ".join(f"{s['split']}: {s['path']}" for s in result.sources)
    report = HtmlReport("signalchain audit", f"{sources} · {plural(len(result.files), 'example')} · "
                        f"{result.timings.get('total', 0.0):.1f} s · cache {result.cache.get('hits', 0)} hits",
                        findings=findings)
    report.section("Findings", findings_table(findings), "findings")
    report.section("Splits", _splits(result.splits), "splits")
    report.section("The same audio across splits", _matches(result.matches), "matches")
    if listen:
        report.section("Listen to flagged pairs", _listen(listen), "listen")
    report.section("Files", _files(result.files), "files")
    search = ", ".join(f"{k}: {v:.0f}" for k, v in result.search.items())
    report.section("Search", f"<p class='muted'>{esc(search)}; timings: "
                   f"{esc({k: round(v, 2) for k, v in result.timings.items()})}</p>"
                   f"<p class='muted' id='engine'>{esc(_engine(getattr(result, 'engine', {})))}</p>", "search")
    return report
