"""The `listen` page: one card per audio file with its numbers, findings, a player and a spectrogram."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._units import plural
from ..findings import Finding
from ..records.output import FileMeasurement
from .html import HtmlReport, audio_player, esc, findings_table, image_tag, table

__all__ = ["render_listen", "file_row"]

MAX_PLAYERS = 200  # beyond this many files the page keeps the numbers and drops the media


def audio_figure(audio: np.ndarray, sample_rate: int | None, title: str = "") -> bytes:
    """`plots.audio_figure`, imported on first use: matplotlib loads for the page only, never for the
    terminal table (`file_row`, `HEADERS`) that `signalchain listen` prints."""
    from .plots import audio_figure as draw

    return draw(audio, sample_rate, title)


def _db(x: Any) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) else "—"


def file_row(f: FileMeasurement) -> list[str]:
    """The numbers of one file as table cells (shared by the terminal and the page)."""
    if f.error:
        return [f.path, "—", "—", "—", "—", "—", "—", "—", "—", "—", f.error]
    s = f.stats
    corr = s.get("channel_correlation")
    total = f.channels * f.frames
    over = f.over_samples / total if total else 0.0
    # samples at full scale (clipped) apart from those beyond it (a float file's overshoot, clipped later)
    return [f.path, f"{f.sample_rate}", f"{f.format}/{f.subtype}", str(f.channels), f"{s.get('seconds', 0):.2f}",
            _db(s.get("rms_dbfs")), _db(s.get("peak_dbfs")), f"{100 * s.get('silence_fraction', 0):.0f}%",
            f"{100 * max(s.get('clipping_fraction', 0) - over, 0.0):.2f}%, {100 * over:.2f}%",
            f"{s.get('dc', 0):+.3f}", "—" if corr is None else f"{corr:+.2f}"]


HEADERS = ["file", "rate", "format", "ch", "seconds", "RMS dBFS", "peak dBFS", "silent",
           "clipped, beyond ±1", "DC", "channel corr."]


def render_listen(reports: Sequence[FileMeasurement], findings: Sequence[Finding],
                  load: Callable[[str], tuple[np.ndarray, int] | None], expectations: str = "") -> HtmlReport:
    """`load(path)` returns the decoded audio [C, T] and its rate (None when unreadable)."""
    bad = {f.evidence.get("path") for f in findings if f.severity.value != "info"}
    page = HtmlReport("signalchain listen", f"{plural(len(reports), 'file')} · {len(bad)} with findings"
                      + expectations, findings=findings)
    page.section("Findings", findings_table(findings), "findings")
    page.section("Files", table([file_row(f) for f in reports], HEADERS), "files")
    cards = []
    for i, f in enumerate(reports):
        own = [x for x in findings if x.evidence.get("path") == f.path]
        media = ""
        if i < MAX_PLAYERS and f.error is None:
            loaded = load(f.path)
            if loaded is not None:
                audio, sr = loaded
                shown = np.nan_to_num(audio, nan=0.0, posinf=1.0, neginf=-1.0)
                # the player clips at ±1 as any player does; the waveform shows what the file holds, overshoot too
                media = audio_player(shown, sr, f.path) + image_tag(audio_figure(shown, sr, f.path), f.path)
        cards.append(f'<div class="example"><b>{esc(f.path)}</b>{findings_table(own) if own else ""}{media}</div>')
    page.section("Listen", "".join(cards), "listen")
    return page
