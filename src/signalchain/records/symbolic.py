"""Plain records of what the symbolic experiments measured (note-level repetition of generated music)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..symbolic.repetition import NoteRepetition

__all__ = ["NoteRepetitionMeasurement", "EosStats", "EosProbe"]


@dataclass
class NoteRepetitionMeasurement:
    """Repetition of generated notes beside the same measure on the golden batch's own notes (the baseline)."""

    generated: list[NoteRepetition]  # per prompt
    golden: list[NoteRepetition]  # per golden example
    tokens: int  # tokens generated per prompt
    sampling: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what could not be measured, and why


@dataclass
class EosStats:
    """What one generate call did with the end-of-sequence token of a symbolic vocabulary.

    From the ids: the rows that emitted EOS. From the logits the sampler picked from (where tapped), over
    the steps it sampled: the steps giving EOS probability exactly 0, the largest and summed EOS
    probability, and the log-probability that faithful sampling emits no EOS at all."""

    eos_id: int
    rows: int
    emitted: int  # rows holding EOS
    length: int  # ids per row (BOS and prompt included)
    steps: int = 0  # sampled steps with finite logits (0: no logits tapped)
    zero_steps: int = 0  # of those, steps with p(EOS) == 0 exactly (a mask, not a small probability)
    max_probability: float | None = None
    expected: float | None = None  # sum over steps of p(EOS): expected EOS picks if sampled faithfully
    log_p_none: float | None = None  # sum over steps of log(1 - p(EOS))


@dataclass
class EosProbe:
    """A generate call as long as the golden sequences (which end in EOS), run when the configured one
    never stopped and its logits left EOS no chance; and the model's own EOS probability, teacher-forced."""

    stats: EosStats | None
    limit: int  # tokens asked for
    frames_generated: int | None
    golden_eos_positions: list[int]  # where each golden row's EOS is
    model_eos_probability: float | None = None  # mean p(EOS) where the golden target is EOS, teacher-forced
    error: str | None = None
