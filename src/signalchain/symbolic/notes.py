"""Symbolic music as a notes table: one float32 row per note, the common currency of the symbolic
stages (`midi.source`, `notes.augmented`, `notes.decoded`), the checks, the renderer and the audit.

Columns (NOTE_COLUMNS): example index in the batch, MIDI pitch, onset and duration in beats (quarter
notes) from the start of the example's window, velocity, General MIDI program, drum flag. Beats, not
seconds or ticks: a tokenizer quantises in fractions of a beat, so its resolution is a number of beats.
symusic is imported only by the functions that read or write a Score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["NOTE_COLUMNS", "COL", "notes_table", "per_example", "from_score", "to_score", "score_to_midi_bytes"]

NOTE_COLUMNS = ("example", "pitch", "onset", "duration", "velocity", "program", "drum")
COL = {name: i for i, name in enumerate(NOTE_COLUMNS)}


def notes_table(rows: Iterable[Sequence[float]] | np.ndarray) -> np.ndarray:
    """`[N, 7]` float32, sorted by (example, onset, pitch, duration, program); an empty input gives shape `[0, 7]`."""
    a = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.float32)
    if a.size == 0:
        return np.zeros((0, len(NOTE_COLUMNS)), np.float32)
    if a.ndim != 2 or a.shape[1] != len(NOTE_COLUMNS):
        raise ValueError(f"a notes table is [N, {len(NOTE_COLUMNS)}] ({', '.join(NOTE_COLUMNS)}); got {list(a.shape)}")
    order = np.lexsort((a[:, COL["program"]], a[:, COL["duration"]], a[:, COL["pitch"]], a[:, COL["onset"]],
                        a[:, COL["example"]]))
    return a[order]


def per_example(table: np.ndarray, n: int | None = None) -> list[np.ndarray]:
    """The rows of each example `0..n-1` (n: the batch size; default one past the largest index)."""
    t = np.asarray(table, dtype=np.float32).reshape(-1, len(NOTE_COLUMNS))
    if n is None:
        n = int(t[:, 0].max()) + 1 if len(t) else 0
    ex = t[:, 0].astype(np.int64)
    return [t[ex == i] for i in range(n)]


def from_score(score: Any, example: int = 0) -> np.ndarray:
    """A symusic `Score` (tick time) as a notes table: onsets and durations in beats via its tpq."""
    tpq = float(score.tpq)
    rows = []
    for track in score.tracks:
        drum = 1.0 if track.is_drum else 0.0
        for note in track.notes:
            rows.append((example, note.pitch, note.time / tpq, note.duration / tpq, note.velocity,
                         track.program, drum))
    return notes_table(rows)


def to_score(rows: np.ndarray, tempo_bpm: float = 120.0, time_signature: Sequence[int] = (4, 4),
             tpq: int = 480) -> Any:
    """A notes table (one example's rows) as a symusic `Score`: one track per (program, drum)."""
    import symusic

    score = symusic.Score(tpq)
    score.tempos.append(symusic.Tempo(0, float(tempo_bpm)))
    score.time_signatures.append(symusic.TimeSignature(0, int(time_signature[0]), int(time_signature[1])))
    rows = np.asarray(rows, dtype=np.float32).reshape(-1, len(NOTE_COLUMNS))
    keys = sorted({(int(r[COL["program"]]), int(r[COL["drum"]])) for r in rows})
    for program, drum in keys:
        track = symusic.Track(name=f"program {program}{' drums' if drum else ''}", program=program,
                              is_drum=bool(drum))
        sel = rows[(rows[:, COL["program"]] == program) & (rows[:, COL["drum"]] == drum)]
        for r in sel:
            track.notes.append(symusic.Note(int(round(r[COL["onset"]] * tpq)),
                                            max(1, int(round(r[COL["duration"]] * tpq))),
                                            int(np.clip(r[COL["pitch"]], 0, 127)),
                                            int(np.clip(r[COL["velocity"]], 1, 127))))
        score.tracks.append(track)
    return score


def score_to_midi_bytes(score: Any) -> bytes:
    """The Standard MIDI File bytes of a symusic Score."""
    return bytes(score.dumps_midi())
