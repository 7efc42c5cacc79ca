"""Information kept by symbolic tokens (collapsed velocities, durations, tempos, programs) and drums
transposed by an augmentation, on traces made with a real miditok REMI tokenizer."""

import numpy as np
import pytest

pytest.importorskip("miditok")

from _symbolic import CORE_KIT, clean_pieces, random_piece, symbolic_trace, tokenizer  # noqa: E402
from signalchain.checks.symbolic_info import judge_collapsed, judge_drums_transposed  # noqa: E402
from signalchain.symbolic.notes import COL  # noqa: E402
from signalchain.trace import Trace  # noqa: E402

TOK = tokenizer()


def set_column(name, value):
    def edit(t):
        t[:, COL[name]] = value
        return t
    return edit


def test_clean_batch_keeps_its_information():
    t = symbolic_trace(clean_pieces(0), tok=TOK)
    assert judge_collapsed(t) == [] and judge_drums_transposed(t) == []


@pytest.mark.parametrize("column, value, token_type", [("velocity", 100, "Velocity"), ("duration", 0.5, "Duration")])
def test_an_attribute_overwritten_before_tokenizing(column, value, token_type):
    f = judge_collapsed(symbolic_trace(clean_pieces(0), tok=TOK, hidden=set_column(column, value)))
    assert [(x.id, x.severity.value, x.stage, x.evidence["token_type"]) for x in f] == [
        ("symbolic.collapsed", "error", "tokens", token_type)]
    assert f[0].evidence["vocab_bins"] > 1 and f[0].evidence["source_bins"] > 1


def test_a_single_bin_vocabulary_is_not_a_collapse():
    assert judge_collapsed(symbolic_trace(clean_pieces(0), tok=tokenizer(num_velocities=1))) == []


def test_programs_merged_into_one():
    f = judge_collapsed(symbolic_trace(clean_pieces(0), tok=TOK, hidden=set_column("program", 0)))
    assert [(x.id, x.stage, x.evidence["token_type"]) for x in f] == [("symbolic.collapsed", "tokens", "Program")]
    assert f[0].evidence["kept"] == [0] and len(f[0].evidence["source_programs"]) >= 3


def test_every_piece_at_one_tempo_is_a_warning_on_the_source():
    rng = np.random.default_rng(3)
    pieces = [random_piece(rng, ts, 120.0, (0, 40)) for ts in [(4, 4), (3, 4), (6, 8), (4, 4)]]
    f = judge_collapsed(symbolic_trace(pieces, tok=TOK))
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("symbolic.collapsed", "warning", "midi.source")]
    assert judge_collapsed(symbolic_trace(pieces[:3], tok=TOK)) == []  # three pieces: too few to say


def shift_drums(s):
    def edit(t):
        drums = t[:, COL["drum"]] > 0.5
        t[drums, COL["pitch"]] += s
        return t
    return edit


def test_drums_shifted_by_the_augmentation():
    f = judge_drums_transposed(symbolic_trace(clean_pieces(0), tok=TOK, augment=shift_drums(3)))
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("symbolic.drums_transposed", "error",
                                                               "notes.augmented")]
    assert f[0].evidence["shift"] == 3 and f[0].evidence["evidence_kind"] == "source_vs_augmented"
    assert f[0].evidence["changed"] == f[0].evidence["compared"] > 0


def test_drums_shifted_onto_other_kit_pieces_are_seen_against_the_source():
    """+2 turns kick 36 into snare 38, snare 38 into 40, hats 42 into 44: still the core kit, so the kit rule
    alone cannot see it; the source beside the augmented notes can."""
    pieces = [(p[0][(p[0][:, COL["drum"]] < 0.5) | np.isin(p[0][:, COL["pitch"]], (36, 38, 42))], p[1], p[2])
              for p in clean_pieces(0)]
    both = symbolic_trace(pieces, tok=TOK, augment=shift_drums(2))
    aug_only = Trace([r for r in both.records if r.name != "midi.source"])  # only the kit rule can judge it
    assert judge_drums_transposed(aug_only) == []
    f = judge_drums_transposed(symbolic_trace(pieces, tok=TOK, augment=shift_drums(2)))
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("symbolic.drums_transposed", "error",
                                                               "notes.augmented")]
    assert f[0].evidence["shift"] == 2 and "36 bass drum -> 38 acoustic snare" in f[0].message


def test_drum_pitches_remapped_by_several_intervals_are_a_warning():
    def remap(t):
        drums = np.flatnonzero(t[:, COL["drum"]] > 0.5)
        t[drums[::3], COL["pitch"]] += 1
        t[drums[1::3], COL["pitch"]] -= 2
        return t
    f = judge_drums_transposed(symbolic_trace(clean_pieces(0), tok=TOK, augment=remap))
    assert [(x.severity.value, x.stage) for x in f] == [("warning", "notes.augmented")]
    assert f[0].evidence["shift"] is None


def test_only_some_drum_notes_moved_by_one_interval_is_a_remapping_not_a_transposition():
    def snare_swapped(t):  # a deliberate-looking swap of one kit piece: not every drum note moves
        hits = (t[:, COL["drum"]] > 0.5) & (t[:, COL["pitch"]] == 38)
        t[hits, COL["pitch"]] = 40
        return t
    f = judge_drums_transposed(symbolic_trace(clean_pieces(0), tok=TOK, augment=snare_swapped))
    assert [(x.severity.value, x.evidence["shift"]) for x in f] == [("warning", None)]
    assert "38 acoustic snare -> 40 electric snare" in f[0].message


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_an_augmentation_that_moves_notes_in_time_is_not_compared(seed):
    def later(t):  # a time shift, drums included: nothing to pair, and no pitch changed
        t[:, COL["onset"]] += 0.5
        return t
    assert judge_drums_transposed(symbolic_trace(clean_pieces(seed), tok=TOK, augment=later)) == []


def test_drums_shifted_in_the_source_are_blamed_there():
    pieces = [(shift_drums(-5)(p[0].copy()), p[1], p[2]) for p in clean_pieces(0)]
    f = judge_drums_transposed(symbolic_trace(pieces, tok=TOK))
    assert [(x.stage, x.evidence["shift"]) for x in f] == [("midi.source", -5)]


def test_melodic_notes_transposed_are_not_drums():
    def up(t):
        t[t[:, COL["drum"]] < 0.5, COL["pitch"]] += 3
        return t
    assert judge_drums_transposed(symbolic_trace(clean_pieces(0), tok=TOK, augment=up)) == []
    assert set(CORE_KIT) == {35, 36, 38, 40, 42, 44, 46, 49, 51}
