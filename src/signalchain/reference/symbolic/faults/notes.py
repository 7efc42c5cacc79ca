"""What the notes lose before the tokenizer sees them: a pitch shift applied to the drum kit, every
file read at the export's default tempo, a crop that lands after the music."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from signalchain.symbolic import COL, notes_table

from ._registry import fault

if TYPE_CHECKING:
    from ..data import Piece
    from ..pipeline import SymbolicBedPipeline

FAMILY = "symbolic"
SECTION = "Inspect data before tuning the optimiser"


@fault("transpose_includes_drums", FAMILY, "pitch shift augmentation applied to drums", SECTION,
       ["symbolic.drums_transposed"], "notes.augmented")
def _transpose_includes_drums(p: SymbolicBedPipeline) -> None:
    def augment(notes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Bug: the transposition is written over the whole pitch column (`notes[:, PITCH] += shift`,
        # as for a piano dataset), drum track included: on channel 10 a pitch is an instrument, so a
        # kick (36) shifted by +3 becomes a low tom (39?) or a hand clap, and hats become pedals.
        m = p.cfg.augment_transpose
        shift = int(rng.integers(-m, m + 1)) if m > 0 else 0
        out = notes.copy()
        out[:, COL["pitch"]] = np.clip(out[:, COL["pitch"]] + shift, 0, 127)
        return out

    p.augment = augment  # type: ignore[method-assign]


@fault("export_default_tempo", FAMILY, "every piece at one tempo", SECTION,
       ["symbolic.collapsed"], "midi.source", symptom="ignores-caption")
def _export_default_tempo(p: SymbolicBedPipeline) -> None:
    pieces = p.pieces

    def exported() -> list[Piece]:
        # Bug: the MIDI files were written by a notation export that has no metronome mark to
        # write (the tempo lives in the metadata table the captions come from): every file reads
        # at MIDI's default 120 bpm, while its caption still says "adagio 60 bpm".
        return [replace(piece, tempo=120.0) for piece in pieces()]

    p.pieces = exported  # type: ignore[method-assign]


@fault("crop_offset_converted_twice", FAMILY, "a crop that lands between notes", "Silent or nearly silent output",
       ["symbolic.empty"], "midi.source", symptom="silent")
def _crop_offset_converted_twice(p: SymbolicBedPipeline) -> None:
    def crop(piece: Piece, rng: np.random.Generator) -> Piece:
        bar = piece.time_signature[0] * 4.0 / piece.time_signature[1]
        length = p.cfg.window_bars * bar
        end = float((piece.notes[:, COL["onset"]] + piece.notes[:, COL["duration"]]).max())
        starts = [float(s) for s in piece.bar_starts if s + length <= end + 1e-6] or [float(piece.bar_starts[0])]
        # Bug: the crop was ported from the audio pipeline, whose offsets are seconds, and kept its
        # "seconds -> beats" conversion (`* bpm / 60`); the offsets drawn here are already beats.
        # At 60 bpm nothing changes; at 120 bpm the window starts twice as far in, past the last
        # note for the second half of the piece, and holds no note at all.
        start = starts[int(rng.integers(len(starts)))] * piece.tempo / 60.0
        on = piece.notes[:, COL["onset"]]
        sel = piece.notes[(on >= start - 1e-6) & (on < start + length - 1e-6)].copy()
        sel[:, COL["onset"]] -= start
        sel[:, COL["duration"]] = np.minimum(sel[:, COL["duration"]], length - sel[:, COL["onset"]])
        return replace(piece, notes=notes_table(sel), bar_starts=np.arange(0, length, bar, dtype=np.float32))

    p.crop = crop  # type: ignore[method-assign]
