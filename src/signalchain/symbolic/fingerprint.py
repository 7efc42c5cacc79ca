"""Fingerprints of a piece's notes that survive a transposition, a tempo change, a time-stretch and a
re-voicing, and tell the piece from other music in the same style.

Three levels, because searching must be cheap and deciding must be exact:

- `exact`: the SHA-1 of the quantised notes (pitch, onset and duration to 1/96 beat, program, drum)
  and the first tempo: the same notes at the same tempo, whatever the file's bytes.
- `vector` `[DIM]` float32, L2-normalised, for the faiss index. Every block ignores the key and the
  tempo: the pitch-class profile's DFT magnitudes and the profile rotated to its strongest class;
  interval histograms of the top line (melody), the bottom line (bass) and the simultaneities; the
  inter-onset-interval histogram *relative to the piece's own median IOI* (a tempo change leaves
  beats alone, a time-stretch scales every IOI and the median with them); and a signed count sketch
  of the melody's (interval, IOI ratio) trigrams, which is what tells one tune from another.
- `codes` / `top_codes`: the notes as sorted (normalised onset slot, pitch class) codes, of all
  pitched notes and of the melody, for `compare`: the transposition (in semitones, the octave from
  the register) and the tempo ratio between two pieces, and how many of their notes agree once both
  are undone.

Drum notes carry no key: the pitch blocks use pitched notes only (drums when there are no others).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .notes import COL

__all__ = ["SymbolicFingerprint", "Comparison", "DIM", "fingerprint_notes", "compare", "SLOTS_PER_IOI"]

SKETCH = 128  # count-sketch bins of melody trigrams
IOI_BINS = 25  # log2(IOI / median) from -3 to +3 in quarter octaves
INTERVALS = 25  # melodic intervals -12..12 semitones (wider ones clipped)
DIM = 6 + 12 + INTERVALS * 2 + 12 + IOI_BINS + SKETCH
SLOTS_PER_IOI = 8  # onset slots per median IOI in the comparison codes
DEFAULT_TEMPO = 120.0
_WEIGHTS = (0.25, 0.25, 0.3, 0.15, 0.1, 0.25, 1.0)  # pcp-dft, pcp-rotated, top, bass, chords, ioi, sketch
_QUANT = 96  # ticks a beat for the exact hash


@dataclass
class SymbolicFingerprint:
    exact: str  # sha1 of the quantised notes and tempo ("" when there are no notes)
    vector: np.ndarray  # [DIM] float32, unit norm (zeros when there are no notes)
    notes: int
    median_ioi: float  # beats
    tempo: float  # bpm (first tempo)
    pcp: np.ndarray  # [12] duration-weighted pitch-class profile, sums to 1
    register: float  # mean pitch of the pitched notes
    melody_register: float  # mean pitch of the top line
    programs: tuple[int, ...]  # GM programs of the pitched notes (sorted, distinct)
    drums: bool
    codes: np.ndarray  # int64 sorted unique (slot * 12 + pitch class), every pitched note
    top_codes: np.ndarray  # the same, melody (top note of each onset) only
    pitches: np.ndarray  # int64 sorted unique (slot * 128 + pitch): exact voicing, for re-voicing

    @property
    def empty(self) -> bool:
        return self.notes == 0

    @property
    def seconds_per_ioi(self) -> float:
        return self.median_ioi * 60.0 / self.tempo


@dataclass(frozen=True)
class Comparison:
    shift: int  # semitones from a to b
    tempo_ratio: float  # b's tempo over a's, in notes per second (1.1: b is 10 % faster)
    agreement: float  # shared (slot, pitch class) codes after undoing the shift / the smaller piece's
    melody: float  # the same over the melody codes
    revoiced: bool  # same notes by pitch class, different exact pitches or programs


def _hist(values: np.ndarray, bins: int, lo: int, weights: np.ndarray | None = None) -> np.ndarray:
    idx = np.clip(values.astype(np.int64) - lo, 0, bins - 1)
    return np.bincount(idx, weights=weights, minlength=bins).astype(np.float64)


def _unit(x: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(x))
    return x / n if n > 0 else x


def _lines(pitch: np.ndarray, onset: np.ndarray, dur: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(melody onsets, melody pitch at each, bottom pitch at every distinct onset, index of each
    note's distinct onset). The melody is the skyline: the top note of each onset, unless a higher
    note started earlier still sounds (an accompaniment's chord under a held melody note is not)."""
    times, which = np.unique(np.round(onset, 4), return_inverse=True)
    top = np.full(len(times), -1, np.int64)
    bottom = np.full(len(times), 1 << 20, np.int64)
    np.maximum.at(top, which, pitch)
    np.minimum.at(bottom, which, pitch)
    ends = onset + dur
    covered = np.zeros(len(times), bool)
    for lo in range(0, len(times), 256):  # [onsets, notes] in blocks: memory stays flat on long pieces
        t = times[lo : lo + 256, None]
        held = (onset[None] < t - 1e-4) & (ends[None] > t + 1e-4) & (pitch[None] > top[lo : lo + 256, None])
        covered[lo : lo + 256] = held.any(axis=1)
    return times[~covered], top[~covered], bottom, which


def _sketch(intervals: np.ndarray, iois: np.ndarray) -> np.ndarray:
    """Signed count sketch of (interval, IOI-ratio) trigrams: two different tunes land near orthogonal."""
    out = np.zeros(SKETCH, np.float64)
    if len(intervals) < 3:
        return out
    tok = (np.clip(intervals, -12, 12) + 12) * 32 + np.clip(iois + 16, 0, 31)
    tri = (tok[:-2] * 1_000_003 + tok[1:-1] * 10_007 + tok[2:]).astype(np.uint64)
    h = (tri * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    np.add.at(out, (h % np.uint64(SKETCH)).astype(np.int64), np.where((h >> np.uint64(20)) & np.uint64(1), 1.0, -1.0))
    return out


def _exact(rows: np.ndarray, tempo: float) -> str:
    q = np.stack([rows[:, COL["pitch"]], np.round(rows[:, COL["onset"]] * _QUANT),
                  np.round(rows[:, COL["duration"]] * _QUANT), rows[:, COL["program"]], rows[:, COL["drum"]]], 1)
    q = q[np.lexsort(q.T[::-1])].astype(np.int64)
    return hashlib.sha1(q.tobytes() + f"|{tempo:.2f}".encode()).hexdigest()


def _empty(tempo: float) -> SymbolicFingerprint:
    none = np.zeros(0, np.int64)
    return SymbolicFingerprint("", np.zeros(DIM, np.float32), 0, 1.0, tempo, np.zeros(12), 0.0, 0.0, (), False,
                               none, none, none)


def fingerprint_notes(rows: np.ndarray, tempo: float | None = None) -> SymbolicFingerprint:
    """The fingerprint of one piece's notes table `[N, 7]` (the example column is ignored)."""
    tempo = float(tempo) if tempo and np.isfinite(tempo) and tempo > 0 else DEFAULT_TEMPO
    rows = np.asarray(rows, dtype=np.float32).reshape(-1, len(COL))
    rows = rows[np.isfinite(rows).all(axis=1) & (rows[:, COL["duration"]] >= 0)]
    if not len(rows):
        return _empty(tempo)
    drum = rows[:, COL["drum"]] > 0
    pitched = rows[~drum] if (~drum).any() else rows
    pitch = pitched[:, COL["pitch"]].astype(np.int64)
    onset = pitched[:, COL["onset"]].astype(np.float64)
    dur = np.maximum(pitched[:, COL["duration"]].astype(np.float64), 1e-3)
    all_times = np.unique(np.round(rows[:, COL["onset"]].astype(np.float64), 4))
    gaps = np.diff(all_times)
    median = float(np.median(gaps)) if len(gaps) else 1.0
    pcp = np.bincount(pitch % 12, weights=dur, minlength=12)
    pcp = pcp / max(pcp.sum(), 1e-12)
    dft = np.abs(np.fft.rfft(pcp))[1:7]
    rotated = np.roll(pcp, -int(np.argmax(pcp)))
    times, top, bottom, which = _lines(pitch, onset, dur)
    top_iv, bass_iv = np.diff(top), np.diff(bottom)
    chord = pitch - bottom[which]
    chord_hist = _hist(chord[chord > 0] % 12, 12, 0)
    log_ioi = np.round(np.log2(np.maximum(gaps, 1e-6) / median) * 4).astype(np.int64)
    ioi_hist = _hist(log_ioi, IOI_BINS, -12)
    melody_ioi = np.round(np.log2(np.maximum(np.diff(times), 1e-6) / median) * 4).astype(np.int64)
    blocks = (dft, rotated, _hist(top_iv, INTERVALS, -12), _hist(bass_iv, INTERVALS, -12), chord_hist, ioi_hist,
              _sketch(top_iv, melody_ioi))
    vector = _unit(np.concatenate([w * _unit(np.sqrt(np.abs(b)) * np.sign(b)) for w, b in zip(_WEIGHTS, blocks)]))
    start = float(all_times[0])
    slot = np.round((onset - start) / median * SLOTS_PER_IOI).astype(np.int64)
    top_slot = np.round((times - start) / median * SLOTS_PER_IOI).astype(np.int64)
    return SymbolicFingerprint(
        exact=_exact(rows, tempo), vector=vector.astype(np.float32), notes=len(rows), median_ioi=median, tempo=tempo,
        pcp=pcp, register=float(pitch.mean()), melody_register=float(top.mean()),
        programs=tuple(sorted({int(p) for p in pitched[:, COL["program"]]})),
        drums=bool(drum.any()), codes=np.unique(slot * 12 + pitch % 12), top_codes=np.unique(top_slot * 12 + top % 12),
        pitches=np.unique(slot * 128 + pitch))


def _shared(a: np.ndarray, b: np.ndarray, shift: int) -> float:
    if not len(a) or not len(b):
        return 0.0
    moved = np.unique((a // 12) * 12 + (a % 12 + shift) % 12)
    return len(np.intersect1d(moved, b, assume_unique=True)) / min(len(a), len(b))


def compare(a: SymbolicFingerprint, b: SymbolicFingerprint) -> Comparison:
    """How `b` relates to `a`: the transposition that best maps a's pitch classes onto b's (its octave
    from the melody's register), the tempo ratio, and the share of notes that agree once both are undone."""
    corr = np.array([float(np.dot(np.roll(a.pcp, k), b.pcp)) for k in range(12)])
    # The best of the likeliest shifts: the top three, and every one as likely as the first (a flat
    # profile, chromatic or whole-tone music, does not tell them apart).
    order = np.argsort(-corr, kind="stable")
    likely = [int(k) for i, k in enumerate(order) if i < 3 or corr[k] >= corr[order[0]] * 0.98]
    k, agreement, melody = max(((k, _shared(a.codes, b.codes, k), _shared(a.top_codes, b.top_codes, k))
                                for k in likely), key=lambda x: x[1] + x[2])
    ratio = a.seconds_per_ioi / b.seconds_per_ioi if b.seconds_per_ioi > 0 else 1.0
    # The octave from the melody's register: a re-voicing moves the chords, a transposition everything.
    shift = k - 12 * int(round((k - (b.melody_register - a.melody_register)) / 12.0))
    moved = (a.pitches // 128) * 128 + np.clip(a.pitches % 128 + shift, 0, 127)
    exact_pitches = len(moved) == len(b.pitches) and bool(np.array_equal(np.unique(moved), b.pitches))
    return Comparison(shift, ratio, agreement, melody, not exact_pitches or a.programs != b.programs)
