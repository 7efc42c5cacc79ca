"""The findings table's hints: one line per distinct hint, with how many findings give it."""

from __future__ import annotations

import io

import pytest
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


def paths_in(text: str) -> list[str]:
    return [w.rstrip(":│") for line in text.splitlines() for w in line.split() if "/" in w and "━" not in w]


@pytest.mark.parametrize("width", [160, 90, 60])
def test_a_path_in_a_table_is_never_broken_in_the_middle(width):
    """Whole where the table has room; else cut in the middle with its file name whole; never folded."""
    path = "/data/music/train/some_artist/an_album_with_a_long_name/track_0123.wav"
    finding = Finding("file.unreadable", Severity.ERROR, "audio", f"cannot decode {path}: it holds no audio frames",
                      {})
    out = io.StringIO()
    print_findings([finding], Console(file=out, width=width))
    (shown,) = paths_in(out.getvalue())
    head, _, tail = shown.partition("…")
    assert shown == path or (path.startswith(head) and path.endswith(tail) and len(tail) > len(head))
    assert (shown == path) == (width == 160)
