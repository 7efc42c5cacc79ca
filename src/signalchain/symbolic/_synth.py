"""The renderer of last resort: notes played by numpy alone, so that a player always has sound.

Pitched notes are a few harmonics under an attack-decay-release envelope, brighter or darker by the
General MIDI family of their program; drum notes are noise bursts shaped in the spectrum (kick low,
snare and toms mid, cymbals and hats high). It is a sketch of the music, not a soundfont: what
matters is that pitch, timing, loudness and the drum track can be heard.
"""

from __future__ import annotations

import numpy as np

from .notes import COL, NOTE_COLUMNS, notes_table

__all__ = ["sanitize", "fallback_render"]

_MIN_BEATS = 1.0 / 64
_MAX_NOTE_BEATS = 64.0
_RELEASE_S = 0.12
_TAIL_S = 0.3
_LEVEL = 0.12  # one full-velocity note; the mix is scaled down only if it would clip
#: Harmonic roll-off per GM family (program // 8): lower is brighter.
_ROLLOFF = np.array([1.6, 2.2, 1.2, 1.5, 2.4, 1.3, 1.3, 1.0, 1.1, 2.6, 0.9, 1.8, 1.5, 1.6, 2.0, 1.4])
_DECAY_S = np.array([1.2, 0.6, 9.0, 1.0, 1.5, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 3.0, 1.0, 0.4, 2.0])


def sanitize(rows: np.ndarray, tempo_bpm: float, max_seconds: float) -> np.ndarray:
    """The playable notes of `rows`: finite, in MIDI's ranges, positive durations, starting within
    `max_seconds`. Whatever a fault put in the table, this is something a renderer can play."""
    t = np.asarray(rows, dtype=np.float64).reshape(-1, len(NOTE_COLUMNS))
    t = t[np.isfinite(t).all(axis=1)]
    if not len(t):
        return notes_table([])
    t = t.copy()
    t[:, COL["pitch"]] = np.clip(np.round(t[:, COL["pitch"]]), 0, 127)
    t[:, COL["velocity"]] = np.clip(np.round(t[:, COL["velocity"]]), 1, 127)
    t[:, COL["program"]] = np.clip(np.round(t[:, COL["program"]]), 0, 127)
    t[:, COL["drum"]] = (t[:, COL["drum"]] > 0.5).astype(np.float64)
    t[:, COL["duration"]] = np.clip(t[:, COL["duration"]], _MIN_BEATS, _MAX_NOTE_BEATS)
    t = t[(t[:, COL["onset"]] >= 0) & (t[:, COL["onset"]] * 60.0 / tempo_bpm < max_seconds)]
    return notes_table(t.astype(np.float32))


def _envelope(n: int, held: int, sr: int, decay_s: float) -> np.ndarray:
    """Attack (5 ms), exponential decay while held, then a linear release to zero."""
    i = np.arange(n, dtype=np.float64)
    attack = max(1, int(0.005 * sr))
    env = np.minimum(1.0, (i + 1) / attack) * np.exp(-i / (decay_s * sr))
    if n > held:
        env[held:] *= np.linspace(1.0, 0.0, n - held)
    return env


def _tone(pitch: float, program: int, n: int, held: int, sr: int) -> np.ndarray:
    freq = 440.0 * 2.0 ** ((pitch - 69.0) / 12.0)
    family = program // 8
    t = np.arange(n, dtype=np.float64) / sr
    out = np.zeros(n)
    for k in range(1, 7):
        if k * freq >= sr / 2:
            break
        out += np.sin(2 * np.pi * k * freq * t) / k ** _ROLLOFF[family]
    return out * _envelope(n, held, sr, _DECAY_S[family])


def _drum(pitch: int, sr: int, rng: np.random.Generator) -> np.ndarray:
    """A GM kit sound as noise shaped in the spectrum: low for kicks, mid for snares/toms, high for cymbals."""
    if pitch in (35, 36):
        lo, hi, length = 30.0, 150.0, 0.25
    elif pitch in (38, 40, 37, 39):
        lo, hi, length = 180.0, 5000.0, 0.18
    elif pitch in (41, 43, 45, 47, 48, 50):
        lo, hi, length = 80.0, 600.0, 0.3
    elif pitch in (42, 44, 46):
        lo, hi, length = 6000.0, 11000.0, 0.07 if pitch != 46 else 0.3
    else:
        lo, hi, length = 3000.0, 11000.0, 0.5
    n = max(8, int(length * sr))
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / sr)
    spec[(f < lo) | (f > min(hi, sr / 2))] = 0.0
    burst = np.fft.irfft(spec, n)
    burst /= max(float(np.abs(burst).max()), 1e-9)
    return burst * np.exp(-np.arange(n) / (0.25 * n))


def fallback_render(notes: np.ndarray, tempo_bpm: float, sample_rate: int) -> np.ndarray:
    """Sanitized notes (`sanitize`) of one example as float32 stereo `[2, S]`."""
    sr = int(sample_rate)
    notes = np.asarray(notes, dtype=np.float64).reshape(-1, len(NOTE_COLUMNS))
    if not len(notes):
        return np.zeros((2, 0), np.float32)
    spb = 60.0 / float(tempo_bpm)
    ends = (notes[:, COL["onset"]] + notes[:, COL["duration"]]) * spb
    total = int((float(ends.max()) + _RELEASE_S + 0.5 + _TAIL_S) * sr) + 1
    mix = np.zeros(total)
    rng = np.random.default_rng(0)  # the same notes always sound the same
    for r in notes:
        start = int(round(r[COL["onset"]] * spb * sr))
        gain = _LEVEL * (r[COL["velocity"]] / 127.0) ** 1.5
        if r[COL["drum"]] > 0.5:
            sound = _drum(int(r[COL["pitch"]]), sr, rng)
        else:
            held = max(1, int(round(r[COL["duration"]] * spb * sr)))
            sound = _tone(r[COL["pitch"]], int(r[COL["program"]]), held + int(_RELEASE_S * sr), held, sr)
        stop = min(total, start + len(sound))
        mix[start:stop] += gain * sound[: stop - start]
    peak = float(np.abs(mix).max())
    if peak > 0.9:
        mix *= 0.9 / peak
    return np.repeat(mix[None].astype(np.float32), 2, axis=0)
