"""Suspiciously good validation results: copies of pieces made before the split, so that a piece
sits in validation while its copy trains.

Each fault writes the copies the way an offline augmentation or a merged download does (new files,
new ids) and lets the bed's split by id place them: most copies land in train, beside pieces whose
original is in validation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from signalchain.symbolic import COL, notes_table

from ..data import ENSEMBLES
from ._registry import fault

if TYPE_CHECKING:
    from ..data import Piece
    from ..pipeline import SymbolicBedPipeline

FAMILY = "splits"
SECTION = "Suspiciously good validation results"


def _with_copies(p: SymbolicBedPipeline, suffix: str, copy: Callable[[Piece, int], Piece]) -> None:
    """`pieces()` lists every piece and, after it, its copy `copy(piece, i)` under the id `<id><suffix>`."""
    pieces = p.pieces
    made: list[list[Piece]] = []

    def with_copies() -> list[Piece]:
        if not made:
            originals = pieces()
            made.append([*originals, *(replace(copy(q, i), id=q.id + suffix) for i, q in enumerate(originals))])
        return made[0]

    p.pieces = with_copies  # type: ignore[method-assign]


@fault("transposed_copies_before_split", FAMILY, "duplicate and near-duplicate clusters: transposed copies",
       SECTION, ["split.transposed_copy"], "split", symptom="too-good-validation")
def _transposed_copies_before_split(p: SymbolicBedPipeline) -> None:
    def transposed(piece: Piece, i: int) -> Piece:
        # Bug: the pitch-shift augmentation was run offline over the whole collection ("it is
        # faster than on the fly") and its files written beside the originals, before the split:
        # `bwv1.6_+3.mid` trains while `bwv1.6.mid` validates.
        shift = (1, 2, 3, -1, -2, -3)[i % 6]
        notes = piece.notes.copy()
        pitched = notes[:, COL["drum"]] == 0
        notes[pitched, COL["pitch"]] += shift
        return replace(piece, notes=notes_table(notes))

    _with_copies(p, "_transposed", transposed)


@fault("tempo_changed_copies_before_split", FAMILY, "duplicate and near-duplicate clusters: tempo-changed copies",
       SECTION, ["split.alternate_version", "split.duplicate"], "split", symptom="too-good-validation")
def _tempo_changed_copies_before_split(p: SymbolicBedPipeline) -> None:
    def stretched(piece: Piece, i: int) -> Piece:
        # Bug: a "tempo augmentation" renders each piece 10 % slower and exports it on a fixed
        # 120 bpm grid, so the notes themselves are stretched (onsets and durations x 1.1); the
        # renders were added to the collection before it was split.
        notes = piece.notes.copy()
        notes[:, COL["onset"]] *= 1.1
        notes[:, COL["duration"]] *= 1.1
        return replace(piece, notes=notes_table(notes), bar_starts=piece.bar_starts * 1.1)

    _with_copies(p, "_slower", stretched)


@fault("rearrangements_in_collection", FAMILY, "alternate arrangements or performances of one piece in both splits",
       SECTION, ["split.alternate_version"], "split", symptom="too-good-validation")
def _rearrangements_in_collection(p: SymbolicBedPipeline) -> None:
    programs = sorted(ENSEMBLES.values())

    def revoiced(piece: Piece, i: int) -> Piece:
        # Bug: a second MIDI collection merged into the corpus holds arrangements of the same tunes
        # (another ensemble, the lowest voice an octave down), under their own file names: the same
        # piece is in train and in validation, as different files.
        notes = piece.notes.copy()
        pitched = notes[:, COL["drum"]] == 0
        notes[pitched, COL["program"]] = programs[(programs.index(int(notes[pitched, COL["program"]][0])) + 1)
                                                  % len(programs)] if pitched.any() else 0
        low = pitched & (notes[:, COL["pitch"]] < np.median(notes[pitched, COL["pitch"]]) - 7)
        notes[low, COL["pitch"]] -= 12
        return replace(piece, notes=notes_table(notes))

    _with_copies(p, "_arrangement", revoiced)


@fault("duplicate_files_in_collection", FAMILY, "duplicate clusters: identical pieces under different ids",
       SECTION, ["split.duplicate"], "split", symptom="too-good-validation")
def _duplicate_files_in_collection(p: SymbolicBedPipeline) -> None:
    def same(piece: Piece, i: int) -> Piece:
        # Bug: the download script fetched each tune from two mirrors and saved both (`tune.mid`,
        # `tune (1).mid`): byte-identical pieces under two ids, split independently.
        return piece

    _with_copies(p, " (1)", same)
