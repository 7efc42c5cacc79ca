"""The findings table's hints: one line per distinct hint, with how many findings give it."""

from __future__ import annotations

import io

from rich.console import Console

from signalchain.findings import Finding, Severity
from signalchain.report.terminal import collapse_hints, print_findings


def clipped(i: int) -> Finding:
    return Finding("audio.clipped", Severity.WARNING, "audio", f"file{i}.wav clips", {},
                   hint="lower the gain before writing [float32 → int16]")


def test_a_hint_repeated_by_26_findings_is_said_once_with_its_count():
    findings = [clipped(i) for i in range(26)] + [
        Finding("audio.silent", Severity.ERROR, "audio", "silence", {}, hint="check the loader"),
        Finding("perf.summary", Severity.INFO, None, "fine", {}, hint="an info's hint is not shown")]
    assert collapse_hints(findings) == [("audio.silent", "check the loader", 1),
                                        ("audio.clipped", "lower the gain before writing [float32 → int16]", 26)]
    out = io.StringIO()
    print_findings(findings, Console(file=out, width=200))
    text = out.getvalue()
    assert text.count("lower the gain") == 1 and "(×26)" in text
    assert "[float32 → int16]" in text  # brackets in a hint are text, not markup
    assert "an info's hint" not in text
