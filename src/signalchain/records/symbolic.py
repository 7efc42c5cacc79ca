"""Plain records of what the symbolic experiments measured (note-level repetition of generated music)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..symbolic.repetition import NoteRepetition

__all__ = ["NoteRepetitionMeasurement"]


@dataclass
class NoteRepetitionMeasurement:
    """Repetition of generated notes beside the same measure on the golden batch's own notes (the baseline)."""

    generated: list[NoteRepetition]  # per prompt
    golden: list[NoteRepetition]  # per golden example
    tokens: int  # tokens generated per prompt
    sampling: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be measured, and why
