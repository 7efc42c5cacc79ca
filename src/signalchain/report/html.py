"""One self-contained HTML file: no network, images and audio embedded as data URIs."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from .._atomic import write_text_atomic
from ..audio.resample import resample
from ..findings import Finding
from .banner import BANNER_CSS, verdict_banner

__all__ = ["HtmlReport", "PLAYABLE_RATES", "esc", "audio_player", "image_tag", "table", "findings_table", "columns"]

# Layout: nothing may lie over anything else at any width from 1100 to 1920 px (tests/report/
# test_browser_layout.py reads the boxes). Wide tables scroll inside their own box instead of spilling
# into a neighbour, side-by-side columns are grid tracks that may shrink below their content
# (min-width:0) and fall under one another when too narrow, and players and pictures never outgrow
# the column they sit in.
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1600px;padding:1em 2em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h2,h3{overflow-wrap:anywhere} h3{margin-bottom:.3em} table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f4f4f4} .scroll{overflow-x:auto;max-width:100%}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{overflow-x:auto;max-width:100%}
.error{color:#b00020;font-weight:600}.warning{color:#a15c00;font-weight:600}.info{color:#555}
.ok{color:#1b7f3b;font-weight:600}.bad{color:#b00020;font-weight:600}
.example{border:1px solid #e4e4e4;border-radius:6px;padding:.5em .8em;margin:.6em 0;background:#fcfcfc;min-width:0}
.caption{font-size:1.05em;font-style:italic}.muted{color:#777;font-size:.85em}
audio{height:32px;vertical-align:middle;max-width:100%} img{max-width:100%;height:auto}
td audio{width:260px;max-width:none} .cols td audio{width:180px}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,600px),1fr));gap:1em}
.cols>*{min-width:0}
.players{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,330px),1fr));gap:0 .8em}
.players>.example{margin:.3em 0} .players audio{width:100%}
nav a{margin-right:.8em;font-size:.85em}
""" + BANNER_CSS


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def image_tag(png: bytes, alt: str = "") -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


#: Sample rates every browser's decoder takes (Chromium refuses a WAV under 3000 Hz). Audio at another
#: rate is resampled for its player only, so it still sounds as its data say; the exact samples stay
#: on disk (golden folder, the file listened to).
PLAYABLE_RATES = (8000, 192000)
_MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
_MP3_FRAME = 1152  # samples in one MP3 frame; shorter audio is sent as WAV
#: A player holds at most this much: the page stays loadable when a header's rate is absurd (4000
#: samples said to be at 1 Hz would be over an hour at a rate a browser plays).
MAX_PLAYER_SECONDS = 120


def _for_player(x: np.ndarray, rate: int) -> tuple[np.ndarray, int, str]:
    """`x` [T, C] at a rate browsers play, and a note when it had to be resampled."""
    lo, hi = PLAYABLE_RATES
    if lo <= rate <= hi:
        return x, rate, ""
    target = lo if rate < lo else 48000
    y = np.clip(resample(x, rate, target, time_axis=0), -1.0, 1.0).astype(np.float32)
    return y, target, f"played at {target} Hz (resampled from {rate} Hz, a rate browsers do not play)"


def _nothing_to_play(why: str) -> str:
    return f'<span class="muted">nothing to play: {esc(why)}</span>'


def audio_player(audio: np.ndarray, sample_rate: int, label: str = "") -> str:
    """An <audio> element holding an MP3 encode of `audio` ([C, T] or [T]); WAV if MP3 fails.

    Empty audio, or audio too short to hold one sample at the player's rate, gets a note instead
    of a player that cannot play.
    """
    x = np.nan_to_num(np.asarray(audio, dtype=np.float32))
    if x.ndim == 1:
        x = x[None]
    x = np.clip(x, -1.0, 1.0).T  # [T, C]
    rate = int(sample_rate or 0)
    if rate <= 0:
        return _nothing_to_play(f"sample rate {sample_rate!r}")
    if x.size == 0:
        return _nothing_to_play(f"{x.shape[0]} samples, {x.shape[1]} channels")
    notes = []
    if x.shape[0] > MAX_PLAYER_SECONDS * rate:
        notes.append(f"the first {MAX_PLAYER_SECONDS} s of {x.shape[0] / rate:.0f} s")
        x = x[: max(1, int(MAX_PLAYER_SECONDS * rate))]
    x, rate, note = _for_player(x, rate)
    notes += [note] if note else []
    if x.shape[0] == 0:
        return _nothing_to_play(f"shorter than one sample at {rate} Hz")
    buf, mime = io.BytesIO(), "audio/mpeg"
    try:
        if rate not in _MP3_RATES or x.shape[0] < _MP3_FRAME:
            raise ValueError("rate or length unsupported by MP3")
        sf.write(buf, x, rate, format="MP3", subtype="MPEG_LAYER_III")
    except Exception:
        buf, mime = io.BytesIO(), "audio/wav"
        sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    data = base64.b64encode(buf.getvalue()).decode()
    title = f' title="{esc(label)}"' if label else ""
    player = f'<audio controls preload="none"{title} src="data:{mime};base64,{data}"></audio>'
    return player + (f' <span class="muted">{esc("; ".join(notes))}</span>' if notes else "")


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless `raw` (cells already hold HTML)."""
    cell = (lambda v: str(v)) if raw else esc
    head = "".join(f"<th>{esc(h)}</th>" for h in headers) if any(headers) else ""  # no empty header row
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    # its own scroll box: a table wider than its column scrolls there, never over its neighbour
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f'<div class="scroll"><table>{thead}<tbody>{body}</tbody></table></div>'


def columns(*bodies: str) -> str:
    """Blocks side by side in equal columns, one under the other when the page is too narrow for them."""
    return '<div class="cols">' + "".join(f"<div>{b}</div>" for b in bodies) + "</div>"


def findings_table(findings: Sequence[Finding]) -> str:
    if not findings:
        return '<p class="ok">No findings.</p>'
    rows = []
    for f in findings:
        rows.append([
            f'<span class="{f.severity.value}">{esc(f.severity.value)}</span>',
            f"<code>{esc(f.id)}</code>",
            esc(f.stage or "—"),
            esc(f.message) + (f'<div class="muted">next: {esc(f.hint)}</div>' if f.hint else ""),
        ])
    return table(rows, ["severity", "id", "stage", "what and next step"], raw=True)


class HtmlReport:
    """Sections of HTML appended in order, written as one file.

    `findings` (Finding objects or their JSON dicts) make the verdict banner under the title: the
    counts of errors and warnings and the first error (`banner.py`); `judged` says what they judge
    where the page is not a verdict of its own (an inspect page's recording problems). Every page the
    commands write gives them; without, the page has no banner.
    """

    def __init__(self, title: str, subtitle: str = "", findings: Sequence[Any] | None = None, judged: str = ""):
        self.title = title
        self.subtitle = subtitle
        self.banner = verdict_banner(findings, judged) if findings is not None else ""
        self._sections: list[tuple[str, str, str]] = []

    def section(self, title: str, body: str, anchor: str | None = None) -> None:
        anchor = anchor or "s" + str(len(self._sections))
        self._sections.append((anchor, title, body))

    def render(self) -> str:
        nav = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t, _ in self._sections)
        parts = [
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
            f"<title>{esc(self.title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{esc(self.title)}</h1>",
            self.banner,
            f'<p class="muted">{esc(self.subtitle)}</p>' if self.subtitle else "",
            f"<nav>{nav}</nav>",
        ]
        for anchor, title, body in self._sections:
            parts.append(f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{body}</section>')
        parts.append("</body></html>")
        return "\n".join(parts)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_text_atomic(path, self.render())
        return path
