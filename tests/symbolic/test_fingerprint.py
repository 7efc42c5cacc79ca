"""Note fingerprints (symbolic/fingerprint.py): what they ignore (key, tempo, time-stretch, voicing),
what they keep (the tune), and what `compare` recovers (shift, tempo ratio, agreement)."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.symbolic.fingerprint import DIM, compare, fingerprint_notes
from signalchain.symbolic.notes import COL, notes_table
from signalchain.symbolic.random_pieces import new_melody, random_piece, revoiced, stretched, transposed


@pytest.fixture(scope="module")
def pieces() -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(3)
    return [random_piece(rng) for _ in range(40)]


def test_vectors_are_unit_float32_and_an_empty_piece_is_flagged() -> None:
    rows, tempo = random_piece(np.random.default_rng(0))
    fp = fingerprint_notes(rows, tempo)
    assert fp.vector.dtype == np.float32 and fp.vector.shape == (DIM,)
    assert abs(float(np.linalg.norm(fp.vector)) - 1.0) < 1e-5 and not fp.empty and len(fp.exact) == 40
    empty = fingerprint_notes(notes_table([]), tempo)
    assert empty.empty and empty.exact == "" and not empty.vector.any()


@pytest.mark.parametrize("shift", [-6, -5, -3, -1, 1, 2, 4, 6])
def test_a_transposition_keeps_the_vector_and_compare_names_the_shift(pieces: list, shift: int) -> None:
    for rows, tempo in pieces[:10]:
        a, b = fingerprint_notes(rows, tempo), fingerprint_notes(transposed(rows, shift), tempo)
        assert a.exact != b.exact
        assert float(a.vector @ b.vector) > 0.999
        c = compare(a, b)
        assert c.shift == shift and c.agreement == 1.0 and c.melody == 1.0 and abs(c.tempo_ratio - 1) < 1e-6


@pytest.mark.parametrize("factor", [0.9, 0.95, 1.05, 1.1])
def test_a_tempo_change_or_time_stretch_keeps_the_vector_and_compare_names_the_ratio(pieces: list,
                                                                                       factor: float) -> None:
    for rows, tempo in pieces[:10]:
        a = fingerprint_notes(rows, tempo)
        retimed = fingerprint_notes(rows, tempo * factor)  # the tempo event changed, the beats did not
        stretch = fingerprint_notes(stretched(rows, factor), tempo)  # the notes moved, the tempo did not
        assert retimed.exact != a.exact and stretch.exact != a.exact
        assert float(a.vector @ retimed.vector) > 0.999 and float(a.vector @ stretch.vector) > 0.95
        assert compare(a, retimed).tempo_ratio == pytest.approx(factor, rel=1e-3)
        assert compare(a, stretch).tempo_ratio == pytest.approx(1 / factor, rel=1e-3)
        assert compare(a, stretch).agreement == 1.0 and compare(a, stretch).shift == 0


def test_a_revoiced_copy_stays_close_and_is_told_from_a_copy(pieces: list) -> None:
    rng = np.random.default_rng(1)
    for rows, tempo in pieces[:10]:
        a, b = fingerprint_notes(rows, tempo), fingerprint_notes(revoiced(rows, rng), tempo)
        c = compare(a, b)
        assert float(a.vector @ b.vector) > 0.9 and c.shift == 0 and c.melody == 1.0 and c.revoiced
        assert not compare(a, fingerprint_notes(rows.copy(), tempo)).revoiced


def test_other_pieces_and_other_tunes_on_the_same_chords_stay_apart(pieces: list) -> None:
    fps = [fingerprint_notes(r, t) for r, t in pieces]
    v = np.stack([f.vector for f in fps])
    sims = v @ v.T
    np.fill_diagonal(sims, 0.0)
    assert sims.max() < 0.8
    rng = np.random.default_rng(2)
    for (rows, tempo), fp in zip(pieces[:10], fps):
        other = fingerprint_notes(new_melody(rows, rng), tempo)
        c = compare(fp, other)
        assert 0.5 * (c.agreement + c.melody) < 0.7


def test_drums_carry_no_key_and_bad_rows_are_dropped() -> None:
    rows, tempo = random_piece(np.random.default_rng(5))
    kit = notes_table([(0, 36 + 6 * (i % 3), i * 0.5, 0.1, 100, 0, 1) for i in range(32)])
    with_drums = notes_table(np.concatenate([rows, kit]))
    a, b = fingerprint_notes(with_drums, tempo), fingerprint_notes(transposed(with_drums, 3), tempo)
    assert compare(a, b).shift == 3 and a.drums
    nan = with_drums.copy()
    nan[0, COL["onset"]] = np.nan
    assert fingerprint_notes(nan, tempo).notes == len(with_drums) - 1


def test_a_flat_pitch_profile_still_gives_the_shift() -> None:
    rng = np.random.default_rng(9)
    pitches = 60 + rng.permutation(np.tile(np.arange(12), 6))  # every pitch class as often: no key
    rows = notes_table([(0, p, 0.5 * i, 0.5, 80, 0, 0) for i, p in enumerate(pitches)])
    a, b = fingerprint_notes(rows, 100.0), fingerprint_notes(transposed(rows, 4), 100.0)
    c = compare(a, b)
    assert c.shift == 4 and c.agreement == 1.0 and c.melody == 1.0
