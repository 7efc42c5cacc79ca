"""A small symbolic golden batch for the report tests: notes stages, captions and symbolic tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from signalchain import record, save_golden, tap
from signalchain.symbolic import NOTE_COLUMNS, notes_table

CAPTIONS = ["a piano scale in C major, 120 bpm", "a bass line with drums in 3/4", "an empty crop"]


def source_notes() -> np.ndarray:
    rows = [(0, 60 + i, 0.5 * i, 0.5, 50 + 10 * i, 0, 0) for i in range(8)]
    rows += [(1, 40 + i, float(i), 1.0, 90, 33, 0) for i in range(3)]
    rows += [(1, 36 + 2 * (i % 2), float(i), 0.25, 100, 0, 1) for i in range(6)]
    return notes_table(rows)


def symbolic_golden(folder: Path, decoded: bool = True, notes: np.ndarray | None = None) -> Path:
    notes = source_notes() if notes is None else notes
    meta = dict(columns=NOTE_COLUMNS, unit="beat", tempos=[120.0, 90.0, 100.0],
                time_signatures=[[4, 4], [3, 4], [4, 4]], files=["scale.mid", "bass.mid", "empty.mid"])
    vocab = ["PAD_None", "BOS_None", "EOS_None", "Bar_None"] + [f"Position_{i}" for i in range(4)] + \
        [f"Pitch_{p}" for p in range(36, 72)]
    with record(values=True) as t:
        tap("midi.source", notes, **meta)
        tap("notes.augmented", notes, **meta)
        tap("caption", CAPTIONS)
        tap("tokens", np.tile(np.arange(1, 21), (3, 1)), kind="symbolic", tokenizer="REMI", vocab=vocab,
            cardinality=len(vocab), pad_id=0, bos_id=1, eos_id=2)
        if decoded:
            tap("notes.decoded", notes, **meta)
        tap("loss", 3.1)
    return save_golden(folder, t, {"pipeline": "tiny-symbolic", "seed": 0})
