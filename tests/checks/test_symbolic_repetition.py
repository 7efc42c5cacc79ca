"""Note-level repetition of generated music against the golden notes' own."""

import numpy as np

from _repetition import looped, varied
from signalchain.checks.symbolic_repetition import judge_note_repetition
from signalchain.records.symbolic import NoteRepetitionMeasurement
from signalchain.symbolic.repetition import batch_repetition


def measure(generated, golden):
    return NoteRepetitionMeasurement(generated=batch_repetition(generated), golden=batch_repetition(golden),
                                     tokens=256)


def batch(make, seed, n=3):
    rng = np.random.default_rng(seed)
    return np.concatenate([make(rng, example=i) for i in range(n)])


def test_generation_as_varied_as_the_data_is_silent():
    assert judge_note_repetition(measure(batch(varied, 0), batch(varied, 1))) == []


def test_a_looping_generation_is_an_error():
    f = judge_note_repetition(measure(batch(looped, 0), batch(varied, 1)))
    assert [(x.id, x.severity.value, x.stage) for x in f] == [("symbolic.repetitive", "error", "generation")]
    assert f[0].evidence["loop_period_bars"] == 1 and f[0].evidence["golden_loop_share"] == 0.0


def test_data_that_loops_sets_the_baseline():
    assert judge_note_repetition(measure(batch(looped, 0), batch(looped, 1))) == []


def test_nothing_to_compare_is_silent():
    empty = np.zeros((0, 7), np.float32)
    assert judge_note_repetition(measure(empty, batch(varied, 1))) == []
    assert judge_note_repetition(measure(batch(looped, 0), empty)) == []
