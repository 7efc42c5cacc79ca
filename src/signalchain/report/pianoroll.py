"""The piano roll of one example's notes: pitch against beats, a colour per program, drums marked,
bar lines from the time signature, opacity by velocity. Render only, no verdicts (same style as plots.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..symbolic.notes import COL, NOTE_COLUMNS
from .plots import _plain, _png, plt

__all__ = ["piano_roll_figure", "GM_FAMILIES", "program_label"]

#: General MIDI's 16 families of 8 programs each.
GM_FAMILIES = ("piano", "chromatic percussion", "organ", "guitar", "bass", "strings", "ensemble", "brass", "reed",
               "pipe", "synth lead", "synth pad", "synth effects", "ethnic", "percussive", "sound effects")
_MAX_NOTES = 5000  # a runaway table still draws in a second
_MAX_BARS = 256


def program_label(program: int, drum: bool = False) -> str:
    if drum:
        return "drums"
    program = int(np.clip(program, 0, 127))
    return f"program {program} ({GM_FAMILIES[program // 8]})"


def _signature(ts: Sequence[int] | None) -> tuple[int, int]:
    try:
        num, den = int(ts[0]), int(ts[1])  # type: ignore[index]
    except (TypeError, ValueError, IndexError):
        return 4, 4
    return (num, den) if 1 <= num <= 64 and den in (1, 2, 4, 8, 16, 32, 64) else (4, 4)


def piano_roll_figure(rows: np.ndarray, time_signature: Sequence[int] | None = (4, 4), title: str = "",
                      tempo_bpm: float | None = None) -> bytes:
    """One example's notes table rows `[N, 7]` as a piano roll PNG."""
    t = np.asarray(rows, dtype=np.float64).reshape(-1, len(NOTE_COLUMNS))
    t = t[np.isfinite(t).all(axis=1)][:_MAX_NOTES]
    num, den = _signature(time_signature)
    bar = num * 4.0 / den
    fig, ax = plt.subplots(figsize=(7, 2.2))
    if not len(t):
        ax.text(0.5, 0.5, "no notes", ha="center", va="center", transform=ax.transAxes)
        end = bar
    else:
        onset, dur, pitch = t[:, COL["onset"]], np.maximum(t[:, COL["duration"]], 0.0), t[:, COL["pitch"]]
        drum = t[:, COL["drum"]] > 0.5
        program = np.clip(np.round(t[:, COL["program"]]), 0, 127).astype(int)
        cmap = plt.get_cmap("tab10")
        for k, prog in enumerate(sorted(set(program[~drum].tolist()))):
            sel = ~drum & (program == prog)
            colour = np.tile(cmap(k % 10), (int(sel.sum()), 1))
            colour[:, 3] = 0.3 + 0.7 * np.clip(t[sel, COL["velocity"]], 0, 127) / 127  # louder is more opaque
            ax.barh(pitch[sel], np.maximum(dur[sel], 0.02), left=onset[sel], height=0.8, color=colour,
                    edgecolor="black", linewidth=0.3, label=program_label(prog))
        if drum.any():
            ax.scatter(onset[drum], pitch[drum], marker="x", s=14, color="black", linewidths=0.9,
                       label="drums (GM kit)", zorder=3)
        end = bar * np.ceil(max(float((onset + dur).max()), float(onset.max()) + 0.25, bar) / bar - 1e-9)
        lo, hi = float(pitch.min()), float(pitch.max())
        ax.set_ylim(lo - 2, hi + 2)
        ax.legend(loc="upper right", fontsize=6, framealpha=0.8)
    start = min(0.0, float(t[:, COL["onset"]].min())) if len(t) else 0.0
    for b in np.arange(0.0, end + 1e-9, bar)[:_MAX_BARS]:
        ax.axvline(b, color="grey", lw=0.6, alpha=0.6, zorder=0)
    ax.set_xlim(start, end)
    ax.set_xlabel(f"beats (bars of {num}/{den}" + (f", {tempo_bpm:g} bpm)" if tempo_bpm else ")"))
    ax.set_ylabel("MIDI pitch")
    if title:
        ax.set_title(_plain(title), fontsize=9)
    return _png(fig)
