"""The `faults` page: the catalogue's score, fault by fault, and the clean control."""

from __future__ import annotations

from typing import Any

from .html import HtmlReport, esc, table

__all__ = ["render_faults"]


def render_faults(score: dict[str, Any]) -> HtmlReport:
    s = score["summary"]
    report = HtmlReport("signalchain faults",
                        f"{s['detected']}/{s['faults']} detected · {s['localised']}/{s['faults']} localised · "
                        f"control errors: {score['control']['errors']} · {s['seconds']} s",
                        findings=score["control"]["findings"], judged="the clean control")
    rows = []
    for f in score["faults"]:
        ok = lambda b: '<span class="ok">yes</span>' if b else '<span class="bad">no</span>'  # noqa: E731
        rows.append([f"<code>{esc(f['name'])}</code>", esc(f["family"]), esc(f["cause"]),
                     esc(", ".join(f["expected_ids"])) + f' <span class="muted">@ {esc(f["expected_stage"])}</span>',
                     esc(", ".join(f.get("found_ids", [])) or "—"), ok(f.get("detected")), ok(f.get("localised"))])
    report.section(
        "Faults",
        table(rows, ["fault", "family", "cause", "expected", "found", "detected", "localised"], raw=True),
        "faults",
    )
    ctrl = score["control"]
    crow = [
        [
            str(f.get("seed")),
            esc(f["severity"]),
            f"<code>{esc(f['id'])}</code>",
            esc(f.get("stage") or "—"),
            esc(f["message"]),
        ]
        for f in ctrl["findings"]
    ]
    report.section(
        f"Clean control over seeds {ctrl['seeds']}",
        table(crow, ["seed", "severity", "id", "stage", "message"], raw=True)
        if crow
        else '<p class="ok">No findings on the clean pipeline.</p>',
        "control",
    )
    return report
