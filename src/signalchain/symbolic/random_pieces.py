"""Random pieces (melody over chords and a bass line, with rhythm) and the copies a dataset gets
wrong: transposed, time-stretched, re-voiced. For the MIDI audit's tests and benchmarks: numpy only.

A piece is a notes table `[N, 7]` (signalchain.symbolic.notes) and a tempo in bpm. Its melody lies
above its chords, which lie above its bass; all three follow one key and one chord progression.
"""

from __future__ import annotations

import numpy as np

from .notes import COL, notes_table

__all__ = ["random_piece", "transposed", "stretched", "revoiced", "new_melody", "planted_set"]

_MAJOR = np.array([0, 2, 4, 5, 7, 9, 11])
_MINOR = np.array([0, 2, 3, 5, 7, 8, 10])
_RHYTHMS = (  # one bar of 4 beats
    (1, 1, 1, 1), (2, 1, 1), (1, 1, 2), (0.5, 0.5, 1, 1, 1), (1.5, 0.5, 1, 1), (0.5, 0.5, 0.5, 0.5, 2),
    (1, 0.5, 0.5, 1, 1), (3, 1), (0.75, 0.25, 1, 0.5, 0.5, 1), (2, 0.5, 0.5, 1), (0.5, 1, 0.5, 2), (4,),
)
_COMPING = ((0, 2), (0, 1, 2, 3), (0,), (0, 1.5, 2, 3.5))  # chord onsets in a bar
MELODY_PROGRAMS, CHORD_PROGRAMS, BASS_PROGRAMS = (0, 40, 56, 73, 65, 11), (0, 4, 24, 48, 19), (32, 33, 35, 43)


def _scale_pitches(root: int, scale: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.array([p for p in range(lo, hi + 1) if (p - root) % 12 in scale])


_STEPS = np.array([-3, -2, -1, -1, 0, 1, 1, 2, 3, 4])
_DEGREES = np.array([0, 3, 4, 5, 1, 0, 4])


def _melody(rng: np.random.Generator, root: int, scale: np.ndarray, bars: int, program: int,
            lo: int = 67, hi: int = 88) -> list[tuple[float, ...]]:
    pitches = _scale_pitches(root, scale, lo, hi).tolist()
    i, top = int(rng.integers(len(pitches) // 4, 3 * len(pitches) // 4)), len(pitches) - 1
    most = bars * max(map(len, _RHYTHMS))
    steps, velocities = _STEPS[rng.integers(len(_STEPS), size=most)].tolist(), rng.integers(60, 110, most).tolist()
    out, n = [], 0
    for bar, r in enumerate(rng.integers(len(_RHYTHMS), size=bars).tolist()):
        t = 4.0 * bar
        for d in _RHYTHMS[r]:
            i = min(max(i + steps[n], 0), top)
            out.append((0, pitches[i], t, d * 0.9, velocities[n], program, 0))
            n, t = n + 1, t + d
    return out


def random_piece(rng: np.random.Generator, bars: int | None = None) -> tuple[np.ndarray, float]:
    """A piece of 8-16 bars in a random key and tempo: (notes table, tempo in bpm)."""
    bars = int(rng.integers(8, 17)) if bars is None else bars
    root, scale = int(rng.integers(12)), _MAJOR if rng.random() < 0.6 else _MINOR
    rows = _melody(rng, root, scale, bars, int(rng.choice(MELODY_PROGRAMS)))
    comp = _COMPING[int(rng.integers(len(_COMPING)))]
    chord_program, bass_program = int(rng.choice(CHORD_PROGRAMS)), int(rng.choice(BASS_PROGRAMS))
    for bar, degree in enumerate(_DEGREES[rng.integers(len(_DEGREES), size=bars)].tolist()):
        tones = [root + int(scale[(degree + k) % 7]) + 12 * ((degree + k) // 7) for k in (0, 2, 4)]
        for t in comp:
            for p in tones:
                rows.append((0, 54 + (p - 6) % 12, 4.0 * bar + t, 0.9, 70, chord_program, 0))  # 54-65
        for t in (0.0, 2.0):
            rows.append((0, 36 + (tones[0] % 12), 4.0 * bar + t, 1.8, 90, bass_program, 0))
    return notes_table(rows), float(rng.integers(70, 161))


def transposed(rows: np.ndarray, semitones: int) -> np.ndarray:
    """Every pitched note moved by `semitones` (drums stay)."""
    out = rows.copy()
    pitched = out[:, COL["drum"]] == 0
    out[pitched, COL["pitch"]] = np.clip(out[pitched, COL["pitch"]] + semitones, 0, 127)
    return out


def stretched(rows: np.ndarray, factor: float) -> np.ndarray:
    """Onsets and durations (in beats) times `factor`: a time-stretch written at the old tempo."""
    out = rows.copy()
    out[:, COL["onset"]] *= factor
    out[:, COL["duration"]] *= factor
    return out


def revoiced(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Another arrangement: other instruments, other velocities, the chords voiced an octave lower."""
    out = rows.copy()
    for program in np.unique(out[:, COL["program"]]):
        sel = out[:, COL["program"]] == program
        out[sel, COL["program"]] = float(rng.integers(0, 128))
    out[:, COL["velocity"]] = np.clip(out[:, COL["velocity"]] * rng.uniform(0.6, 1.2), 1, 127).round()
    chords = (out[:, COL["pitch"]] >= 48) & (out[:, COL["pitch"]] < 67)
    out[chords, COL["pitch"]] -= 12
    return notes_table(out)


def new_melody(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The same chords and bass under a different melody (another song on a shared progression)."""
    keep = rows[rows[:, COL["pitch"]] < 67]
    pcs = np.bincount(keep[:, COL["pitch"]].astype(np.int64) % 12, minlength=12)
    root = int(np.argmax(pcs))
    bars = int(np.ceil((rows[:, COL["onset"]].max() + 1e-6) / 4.0))
    melody = _melody(rng, root, _MAJOR, bars, int(rng.choice(MELODY_PROGRAMS)))
    return notes_table(np.concatenate([keep, notes_table(melody)]))


def planted_set(rng: np.random.Generator, train: int, per_kind: int, distractors: int
                ) -> tuple[dict[str, list[tuple[np.ndarray, float]]], dict[int, tuple[int, str]]]:
    """A training split of random pieces and a test split holding `per_kind` planted copies of each
    kind (transposed ±1…6, tempo event ±10 %, time-stretch ±10 %, re-voiced) and `distractors`
    pieces that are no copy (half unrelated, half another tune over a training piece's chords).

    Returns the splits and the truth: test index → (training index, "transposed" / "alternate")."""
    pieces = [random_piece(rng) for _ in range(train)]
    test: list[tuple[np.ndarray, float]] = []
    truth: dict[int, tuple[int, str]] = {}
    sources = rng.choice(train, size=4 * per_kind + distractors // 2, replace=False)
    shifts = [s for s in range(-6, 7) if s]
    for n, src in enumerate(sources[: 4 * per_kind]):
        rows, tempo = pieces[int(src)]
        kind, factor = n % 4, float(rng.choice([0.9, 0.92, 0.95, 1.05, 1.08, 1.1]))
        if kind == 0:
            copy, label = (transposed(rows, shifts[n // 4 % len(shifts)]), tempo), "transposed"
        elif kind == 1:
            copy, label = (rows.copy(), tempo * factor), "alternate"
        elif kind == 2:
            copy, label = (stretched(rows, factor), tempo), "alternate"
        else:
            copy, label = (revoiced(rows, rng), tempo), "alternate"
        truth[len(test)] = (int(src), label)
        test.append(copy)
    for src in sources[4 * per_kind :]:
        rows, tempo = pieces[int(src)]
        test.append((new_melody(rows, rng), tempo))
    test += [random_piece(rng) for _ in range(distractors - distractors // 2)]
    return {"train": pieces, "test": test}, truth
