"""The history page draws what the result holds (curves, marks, notes, checkpoints) and decides nothing."""

from __future__ import annotations

import numpy as np

from signalchain.findings import Finding
from signalchain.history.roles import assign
from signalchain.history.run import HistoryResult, checkpoint_pair
from signalchain.records.history import Checkpoint, ReadNote, RunHistory, Series
from signalchain.report.history_page import MAX_POINTS, curve_points, render_history


def test_a_long_curve_is_drawn_as_its_envelope_keeping_a_one_point_spike() -> None:
    n = 200_000
    v = np.full(n, 3.0)
    v[123_457] = 50.0
    v[150_000:151_000] = np.nan  # ten whole buckets of 100 points
    xs, ys = curve_points(Series("loss", np.arange(n), v))
    assert len(xs) <= MAX_POINTS and max(y for y in ys if y == y) == 50.0
    assert any(y != y for y in ys)  # the non-finite stretch stays a gap


def test_the_page_shows_every_part_and_judges_nothing() -> None:
    run = RunHistory("out", "hf-trainer", checkpoints=[Checkpoint(10, "out/checkpoint-10"),
                                                       Checkpoint(20, "out/checkpoint-20", complete=False)],
                     notes=[ReadNote("out/trainer_state.json", "the file ends inside item 7", 40)],
                     sources=["out/trainer_state.json"])
    run.add(Series("loss", np.arange(1, 31), np.linspace(6, 3, 30)))
    run.add(Series("my_metric", np.arange(1, 31), np.ones(30)))
    assign(run)
    f = Finding("history.loss_spike", "warning", "loss", "a spike", {"step": 15, "recovered": True})
    res = HistoryResult(run, [f], checkpoint_pair(run, [f]), None, "why there is no line")
    html = render_history(res).render()
    for text in ("a spike", "Shown, not judged", "my_metric", "the file ends inside item 7", "weights missing",
                 "why there is no line", "out/trainer_state.json"):
        assert text in html, text
    assert render_history(HistoryResult(run, [], None, None, "")).render().count("history.loss_spike") == 0
