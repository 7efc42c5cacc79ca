"""report/pianoroll: one example's notes drawn as a PNG, whatever the table holds."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from signalchain.report.pianoroll import piano_roll_figure, piano_rolls_figure, program_label
from signalchain.symbolic import notes_table


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return Image.open(io.BytesIO(png)).size


@pytest.mark.parametrize("rows", [
    notes_table([(0, 60, 0, 1, 90, 0, 0), (0, 36, 0, 0.25, 100, 0, 1), (0, 45, 1, 2, 70, 33, 0)]),
    notes_table([]),
    np.array([[0, np.nan, np.inf, -1, 500, 900, 3]] * 3, np.float32),
    notes_table([(0, 60, 1e6, 1, 90, 0, 0)]),  # a runaway onset: bar lines are capped
])
def test_any_table_draws(rows: np.ndarray) -> None:
    w, h = _size(piano_roll_figure(rows, (4, 4), "a $title$ with $$ dollars", 120.0))
    assert w > 200 and h > 100


@pytest.mark.parametrize("ts", [(3, 4), (7, 8), (0, 0), (4, 3), None, ("x", 4)])
def test_any_time_signature_draws(ts) -> None:
    assert _size(piano_roll_figure(notes_table([(0, 60, 0, 6, 90, 0, 0)]), ts))[0] > 200


def test_program_labels_name_the_gm_family() -> None:
    assert program_label(0) == "program 0 (piano)" and program_label(33) == "program 33 (bass)"
    assert program_label(127) == "program 127 (sound effects)" and program_label(5, drum=True) == "drums"


def test_stages_of_one_example_stack_on_one_beat_axis() -> None:
    one = notes_table([(0, 60, 0, 1, 90, 0, 0), (0, 64, 1, 1, 90, 40, 0)])
    _, h1 = _size(piano_roll_figure(one, (3, 4)))
    _, h3 = _size(piano_rolls_figure([("midi.source", one), ("notes.augmented", one), ("notes.decoded", one[:0])],
                                     (3, 4), "example 0"))
    assert h3 > 2 * h1
    assert _size(piano_rolls_figure([]))[0] > 200
