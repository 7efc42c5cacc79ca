"""Text in the report figures (no browser needed): users' words are drawn as written, matplotlib's
own log-axis tick labels keep their mathtext.

The screenshot of a doctor page showed the first fix for `$$` labels (mathtext off for the whole
figure) printing log ticks as `$\\mathdefault{10^{0}}$`; these tests hold both sides.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib import cbook

from signalchain.report import plots

HOSTILE = ("$$", "$\\frac{$", "a $5 and $10 synth", "$\\alpha$", "\\$ already escaped", "_^{}%", "plain words")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plotting functions make, drawn and kept instead of encoded."""
    figures: list[Any] = []

    def keep(fig: Any) -> bytes:
        fig.canvas.draw()  # raises where a text cannot be laid out
        figures.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", keep)
    yield figures
    for fig in figures:
        plt.close(fig)


def _texts(fig: Any) -> list[Any]:
    out = []
    for ax in fig.axes:
        out += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *ax.get_yticklabels()]
        if ax.get_legend() is not None:
            out += ax.get_legend().get_texts()
    return out


def _shown(t: Any) -> str:
    """What the figure prints for a text object (matplotlib turns `\\$` into `$` outside math)."""
    return t.get_text().replace("\\$", "$")


@pytest.mark.parametrize("label", HOSTILE)
def test_user_text_is_drawn_as_written(drawn: list[Any], label: str) -> None:
    plots.bar_figure({label: 1.0, "other": 2.0}, label, label)
    plots.line_figure(
        {label: ([0, 1], [1.0, 2.0]), "b": ([0, 1], [2.0, 3.0])}, label, label, label, vlines={label: 0.5}
    )
    plots.audio_figure(np.zeros((1, 100)), 16000, label)
    for fn in (plots.codes_figure, plots.mask_figure, plots.histogram_figure):
        fn(np.ones((2, 8)), label)
    assert len(drawn) == 6
    for fig in drawn:
        ours = [t for t in _texts(fig) if _shown(t) == label]
        assert ours, [t.get_text() for t in _texts(fig)]
        assert not any(cbook.is_math_text(t.get_text()) for t in ours)


@settings(max_examples=20, deadline=None)
@given(label=st.text(alphabet=st.sampled_from("$\\{}^_ab%"), max_size=12))
def test_any_label_draws(label: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        figures: list[Any] = []
        mp.setattr(plots, "_png", lambda fig: figures.append(fig) or fig.canvas.draw() or b"")
        plots.line_figure({label: ([0, 1], [1.0, 2.0]), "b": ([0, 1], [1.0, 3.0])}, label, label, label)
        plt.close(figures[0])
    assert len(figures) == 1


def test_log_axis_ticks_keep_their_mathtext(drawn: list[Any]) -> None:
    plots.line_figure({"norm": ([0, 1, 2], [0.01, 1.0, 100.0])}, "t", logy=True)
    plots.bar_figure({"a": 1e-3, "b": 10.0}, "t", logx=True)
    for fig, axis in zip(drawn, ("y", "x")):
        ax = fig.axes[0]
        ticks = [t.get_text() for t in (ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()) if t.get_text()]
        assert ticks and all(cbook.is_math_text(t) for t in ticks), ticks
        assert all(t.get_parse_math() for t in (ax.get_yticklabels() + ax.get_xticklabels()))
