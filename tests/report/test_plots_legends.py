"""What a figure needs to be read alone: the spectrogram's colour bar in dB, a mask's legend saying
what its dark and light cells are (and how many), the axis a mask runs along, note names on a piano
roll's pitch axis and its legend inside the picture, clear of the notes."""

from __future__ import annotations

import io
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from signalchain.report import pianoroll, plots
from signalchain.report.inspect_page import _mask_png
from signalchain.report.pianoroll import note_name
from signalchain.symbolic import notes_table


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figures: list[Any] = []

    def keep(fig: Any) -> bytes:
        fig.canvas.draw()
        figures.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", keep)
    monkeypatch.setattr(pianoroll, "_png", keep)
    yield figures
    for fig in figures:
        plt.close(fig)


@pytest.mark.parametrize("pitch, name", [(60, "C4"), (61, "C#4"), (63, "D#4"), (69, "A4"), (21, "A0"),
                                         (0, "C-1"), (127, "G9"), (59, "B3"), (60.5, ""), (float("nan"), "")])
def test_note_names_put_middle_c_at_c4(pitch: float, name: str) -> None:
    assert note_name(pitch) == name


def test_the_spectrogram_has_a_colour_bar_in_db(drawn: list[Any]) -> None:
    t = np.arange(16000) / 16000
    plots.audio_figure(np.sin(2 * np.pi * 440 * t)[None], 16000, "tone")
    wave, spec = drawn[0].axes[:2]
    bars = [ax for ax in spec.child_axes if "dB" in ax.get_ylabel()]
    assert len(bars) == 1 and bars[0].get_ylim()[1] - bars[0].get_ylim()[0] == pytest.approx(80)
    renderer = drawn[0].canvas.get_renderer()
    # beside the spectrogram, and the two panels keep one time axis
    assert bars[0].get_window_extent(renderer).x0 >= spec.get_window_extent(renderer).x1
    assert wave.get_position().x1 == pytest.approx(spec.get_position().x1)


def _legend_texts(fig: Any) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()] + \
        [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def test_a_mask_says_what_its_colours_mean_and_how_many(drawn: list[Any]) -> None:
    mask = np.zeros((2, 4, 10), bool)
    mask[0, :, :7] = True
    _mask_png("mask.loss", mask)
    assert _legend_texts(drawn[0]) == ["1 = true (counted in the loss): 28 of 40", "0 = false (not counted): 12"]
    ax = drawn[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("frame", "codebook")


def test_a_per_example_mask_runs_along_the_batch_axis(drawn: list[Any]) -> None:
    _mask_png("condition.dropped", np.array([False, True, False, False]))
    ax = drawn[0].axes[0]
    assert ax.get_xlabel() == "example (batch axis)" and "position" not in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3"]
    assert _legend_texts(drawn[0])[0] == "1 = true (condition dropped): 1 of 4"
    _mask_png("condition.mask", np.ones((2, 6), bool))
    assert drawn[1].axes[0].get_xlabel() == "text token"
    assert _legend_texts(drawn[1]) == ["1 = true: 6 of 6", "0 = false: 0"]  # no meaning claimed for it


def _notes() -> np.ndarray:
    rows = [(0, 60 + i, 0.5 * i, 0.5, 90, 0, 0) for i in range(8)] + [(0, 40, 0, 2, 90, 33, 0)]
    rows += [(0, 36 + 2 * (i % 2), float(i), 0.25, 100, 0, 1) for i in range(4)]
    rows += [(0, 72, 1, 1, 90, p, 0) for p in (40, 48, 56, 73, 81)]  # many programs: a long legend
    return notes_table(rows)


def test_piano_roll_pitches_are_note_names(drawn: list[Any]) -> None:
    pianoroll.piano_rolls_figure([("midi.source", _notes()), ("notes.decoded", _notes()[:8])], (4, 4), "ex 0")
    for ax in drawn[0].axes:
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(name[0] in "ABCDEFG" and name[-1].isdigit() for name in labels), labels
    assert "C4" in [t.get_text() for t in drawn[0].axes[1].get_yticklabels()]


def test_piano_roll_legend_is_one_for_all_panels_and_clear_of_the_notes(drawn: list[Any]) -> None:
    pianoroll.piano_rolls_figure([("midi.source", _notes()), ("notes.augmented", _notes())], (4, 4), "ex 0")
    fig = drawn[0]
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    texts = _legend_texts(fig)
    assert len(texts) == 8 and len(set(texts)) == 8  # 7 programs and the drums, each once
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    for ax in fig.axes:
        assert legend.y1 <= ax.get_tightbbox(renderer).y0 + 1  # under every panel and its tick labels
    box = fig.bbox  # inside the figure itself, before any tight cropping
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and box.y0 <= legend.y0


def test_the_png_holds_the_whole_legend() -> None:
    png = pianoroll.piano_roll_figure(_notes(), (4, 4), "ex 0")
    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    assert img.shape[1] > 200
    assert (img[-3:] > 250).all() and (img[:, -3:] > 250).all()  # white margins: nothing cut at the edge
