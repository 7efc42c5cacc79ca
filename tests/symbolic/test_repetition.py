import numpy as np

from _repetition import bar_of, looped, varied
from signalchain.symbolic.notes import notes_table
from signalchain.symbolic.repetition import batch_repetition, note_repetition


def test_a_one_bar_loop_is_all_loop():
    r = note_repetition(looped(np.random.default_rng(0)))
    assert (r.loop_period, r.loop_bars, r.bars) == (1, 8, 8) and r.loop_share == 1.0
    assert r.ngram_repetition > 0.8


def test_random_bars_do_not_loop():
    r = note_repetition(varied(np.random.default_rng(1)))
    assert r.loop_bars == 0 and r.ngram_repetition < 0.1


def test_a_phrase_sequenced_up_still_repeats_in_intervals():
    rng = np.random.default_rng(2)
    one = bar_of(rng)
    up = notes_table([(0, p + 2 * b, o + 4.0 * b, d, v, 0, 0) for b in range(6) for _, p, o, d, v, _, _ in one])
    r = note_repetition(up)
    assert r.ngram_repetition > 0.6 and r.loop_bars == 0  # repeated intervals, not repeated pitches


def test_drums_are_left_out_and_bars_follow_the_meter():
    rng = np.random.default_rng(3)
    tune = varied(rng, bars=6)
    kit = notes_table([(0, 36, float(t), 0.25, 100, 0, 1) for t in range(24)])
    assert note_repetition(np.concatenate([tune, kit])).loop_bars == 0
    three = notes_table([(0, 60 + i % 3, float(i), 1.0, 80, 0, 0) for i in range(24)])  # a 3/4 one-bar loop
    assert note_repetition(three, bar_quarters=3.0).loop_period == 1


def test_batch_repetition_per_example():
    rng = np.random.default_rng(4)
    table = notes_table(np.concatenate([looped(rng, example=0), varied(rng, example=1)]))
    got = batch_repetition(table, 3)
    assert [r.loop_share for r in got] == [1.0, 0.0, 0.0] and got[2].notes == 0
