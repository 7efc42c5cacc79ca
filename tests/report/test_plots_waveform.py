"""The waveform's scale: values beyond full scale are drawn where they are, with ±1 marked."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest

from _overshoot import SR, clean, hot
from signalchain.report import plots


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figures: list[Any] = []

    def keep(fig: Any) -> bytes:
        figures.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", keep)
    yield figures
    for fig in figures:
        plt.close(fig)


def _full_scale_lines(ax: Any) -> list[float]:
    return sorted(float(line.get_ydata()[0]) for line in ax.lines if line.get_linestyle() == "--")


def test_an_overshoot_is_inside_the_waveforms_range_with_full_scale_marked(drawn: list[Any]) -> None:
    x = hot(peak_db=7.8)
    peak = float(np.abs(x).max())
    low, high = plots.waveform_limits(x)
    assert low <= -peak and high >= peak and high == pytest.approx(1.05 * peak)
    plots.audio_figure(x[None], SR, "hot")
    ax = drawn[0].axes[0]
    assert ax.get_ylim()[1] >= peak and ax.get_ylim()[0] <= -peak
    assert _full_scale_lines(ax) == [-1.0, 1.0]
    assert any("full scale" in t.get_text() for t in ax.get_legend().get_texts())


def test_audio_within_full_scale_keeps_the_plus_minus_one_frame(drawn: list[Any]) -> None:
    assert plots.waveform_limits(clean(-1.0)) == pytest.approx((-1.05, 1.05))
    assert plots.waveform_limits(np.zeros((1, 0))) == pytest.approx((-1.05, 1.05))
    assert plots.waveform_limits(np.array([0.5, np.nan, np.inf])) == pytest.approx((-1.05, 1.05))
    plots.audio_figure(clean(-1.0)[None], SR, "fine")
    ax = drawn[0].axes[0]
    assert ax.get_ylim() == pytest.approx((-1.05, 1.05)) and _full_scale_lines(ax) == [-1.0, 1.0]
