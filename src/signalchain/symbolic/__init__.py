"""Symbolic music (MIDI notes and token vocabularies): layer 1, numpy only; symusic/miditok imported lazily."""

from .notes import COL, NOTE_COLUMNS, from_score, notes_table, per_example, score_to_midi_bytes, to_score
from .tokenizers import model_vocab

__all__ = ["COL", "NOTE_COLUMNS", "from_score", "notes_table", "per_example", "score_to_midi_bytes", "to_score",
           "model_vocab"]
