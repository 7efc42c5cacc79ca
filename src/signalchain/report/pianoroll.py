"""The piano roll of one example's notes: pitch against beats, a colour per program, drums marked,
bar lines from the time signature, opacity by velocity. Render only, no verdicts (same style as plots.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter, MultipleLocator

from ..symbolic.notes import COL, NOTE_COLUMNS
from .plots import _plain, _png, plt

__all__ = ["piano_roll_figure", "piano_rolls_figure", "GM_FAMILIES", "program_label", "note_name"]

#: General MIDI's 16 families of 8 programs each.
GM_FAMILIES = ("piano", "chromatic percussion", "organ", "guitar", "bass", "strings", "ensemble", "brass", "reed",
               "pipe", "synth lead", "synth pad", "synth effects", "ethnic", "percussive", "sound effects")
_MAX_NOTES = 5000  # a runaway table still draws in a second
_MAX_BARS = 256


_NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
_PITCH_STEPS = (1, 2, 3, 4, 6, 12, 24)  # semitones between ticks: 12 puts every tick on a C


def note_name(pitch: float) -> str:
    """A MIDI pitch as its note name, middle C (60) being C4: 61 -> "C#4", 21 -> "A0", 0 -> "C-1".
    A pitch between semitones (a tick between notes) gets the empty string."""
    if not np.isfinite(pitch) or abs(pitch - round(pitch)) > 1e-6:
        return ""
    p = int(round(pitch))
    return f"{_NAMES[p % 12]}{p // 12 - 1}"


def _pitch_ticks(ax: plt.Axes, lo: float, hi: float) -> None:
    """Ticks on whole semitones, at most ~6 of them, labelled with note names."""
    step = next((s for s in _PITCH_STEPS if (hi - lo) / s <= 6), 12 * int(np.ceil((hi - lo) / 72)))
    ax.yaxis.set_major_locator(MultipleLocator(step))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: note_name(v)))
    ax.tick_params(axis="y", labelsize=7)


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


def _clean(rows: np.ndarray) -> np.ndarray:
    t = np.asarray(rows, dtype=np.float64).reshape(-1, len(NOTE_COLUMNS))
    return t[np.isfinite(t).all(axis=1)][:_MAX_NOTES]


def _programs(t: np.ndarray) -> np.ndarray:
    return np.clip(np.round(t[:, COL["program"]]), 0, 127).astype(int)


def _draw(ax: plt.Axes, t: np.ndarray, colours: dict[int, tuple[float, ...]], bar: float) -> tuple[float, float]:
    """The notes of one panel; returns the beats it spans."""
    if not len(t):
        ax.text(0.5, 0.5, "no notes", ha="center", va="center", transform=ax.transAxes)
        return 0.0, bar
    onset, dur, pitch = t[:, COL["onset"]], np.maximum(t[:, COL["duration"]], 0.0), t[:, COL["pitch"]]
    drum, program = t[:, COL["drum"]] > 0.5, _programs(t)
    for prog in sorted(set(program[~drum].tolist())):
        sel = ~drum & (program == prog)
        colour = np.tile(colours[prog], (int(sel.sum()), 1))
        colour[:, 3] = 0.3 + 0.7 * np.clip(t[sel, COL["velocity"]], 0, 127) / 127  # louder is more opaque
        ax.barh(pitch[sel], np.maximum(dur[sel], 0.02), left=onset[sel], height=0.8, color=colour,
                edgecolor="black", linewidth=0.3, label=program_label(prog))
    if drum.any():
        ax.scatter(onset[drum], pitch[drum], marker="x", s=14, color="black", linewidths=0.9,
                   label="drums (GM kit)", zorder=3)
    lo, hi = float(pitch.min()) - 2, float(pitch.max()) + 2
    ax.set_ylim(lo, hi)
    _pitch_ticks(ax, lo, hi)
    return min(0.0, float(onset.min())), max(float((onset + dur).max()), float(onset.max()) + 0.25)


def piano_rolls_figure(panels: Sequence[tuple[str, np.ndarray]], time_signature: Sequence[int] | None = (4, 4),
                       title: str = "", tempo_bpm: float | None = None) -> bytes:
    """Notes tables of one example (`[(label, rows [N, 7])]`: its source, augmented and decoded notes)
    stacked on one beat axis, one colour per program across them all, as one PNG."""
    tables = [(label, _clean(rows)) for label, rows in panels] or [("", _clean(np.zeros((0, 7))))]
    num, den = _signature(time_signature)
    bar = num * 4.0 / den
    cmap = plt.get_cmap("tab10")
    every = sorted({int(p) for _, t in tables for p, d in zip(_programs(t), t[:, COL["drum"]]) if d <= 0.5})
    colours = {p: cmap(k % 10) for k, p in enumerate(every)}
    fig, axes = plt.subplots(len(tables), 1, figsize=(7, 0.4 + 1.8 * len(tables)), sharex=True, squeeze=False,
                             layout="constrained")
    start, end = 0.0, bar
    for ax, (label, t) in zip(axes[:, 0], tables):
        lo, hi = _draw(ax, t, colours, bar)
        start, end = min(start, lo), max(end, hi)
        ax.set_ylabel(_plain(label) + "\npitch" if label else "pitch", fontsize=8)
    end = bar * np.ceil(end / bar - 1e-9)
    for ax in axes[:, 0]:
        for b in np.arange(0.0, end + 1e-9, bar)[:_MAX_BARS]:
            ax.axvline(b, color="grey", lw=0.6, alpha=0.6, zorder=0)
    axes[-1, 0].set_xlim(start, end)
    axes[-1, 0].set_xlabel(f"beats (bars of {num}/{den}" + (f", {tempo_bpm:g} bpm)" if tempo_bpm else ")"))
    if title:
        axes[0, 0].set_title(_plain(title), fontsize=9)
    _legend(fig, axes[:, 0])
    return _png(fig)


def _legend(fig: plt.Figure, axes: Sequence[plt.Axes]) -> None:
    """One legend for every panel (a program has one colour across them), under the beat axis and
    as wide as the figure, so that no label is cut at the picture's edge or drawn over the notes."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(3, len(seen)), fontsize=7,
                   frameon=False)


def piano_roll_figure(rows: np.ndarray, time_signature: Sequence[int] | None = (4, 4), title: str = "",
                      tempo_bpm: float | None = None) -> bytes:
    """One example's notes table rows `[N, 7]` as a piano roll PNG."""
    return piano_rolls_figure([("", rows)], time_signature, title, tempo_bpm)
