"""The history page draws what the result holds (curves, marks, checkpoints, notes) and decides nothing."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.findings import Finding
from signalchain.history.run import HistoryResult, checkpoint_pair
from signalchain.records.history import Checkpoint, ReadNote, RunHistory, Series
from signalchain.report import history_page
from signalchain.report.history_page import MAX_POINTS, curve_points, render_history


def test_a_long_curve_is_drawn_as_its_envelope_keeping_a_one_point_spike() -> None:
    n = 200_000
    v = np.full(n, 3.0)
    v[123_457] = 50.0
    v[150_000:151_000] = np.nan  # ten whole buckets of 100 points
    xs, ys = curve_points(Series("loss", np.arange(n), v))
    assert len(xs) <= MAX_POINTS and max(y for y in ys if y == y) == 50.0
    assert any(y != y for y in ys)  # the non-finite stretch stays a gap


def _run() -> RunHistory:
    """Every role the page draws, and one series it does not know; roles set by hand (no reader)."""
    steps = np.arange(1, 31)
    run = RunHistory("out", "hf-trainer",
                     checkpoints=[Checkpoint(10, "out/checkpoint-10"), Checkpoint(20, "out/checkpoint-20"),
                                  Checkpoint(25, "out/checkpoint-25", complete=False),
                                  Checkpoint(30, "out/checkpoint-30")],
                     notes=[ReadNote("out/trainer_state.json", "the file ends inside item 7", 40)],
                     sources=["out/trainer_state.json"])
    run.add(Series("loss", steps, np.linspace(6, 3, 30), role="train_loss"))
    run.add(Series("eval_loss", steps[4::5], np.linspace(6, 3.2, 6), role="valid_loss"))
    for k in range(2):
        run.add(Series(f"train/ce_q{k}", steps, np.linspace(6, 3, 30) + k, role="train_codebook_loss", codebook=k))
    run.add(Series("grad_norm", steps, np.geomspace(1, 1e4, 30), role="grad_norm"))
    run.add(Series("learning_rate", steps, np.full(30, 1e-4), role="lr"))
    run.add(Series("loss_scale", steps, np.full(30, 65536.0), role="loss_scale"))
    run.add(Series("train_samples_per_second", steps, np.full(30, 40.0), role="throughput"))
    run.add(Series("my_metric", steps, np.ones(30)))
    return run


@pytest.fixture
def drawn(monkeypatch):
    """The figure records the page hands to the renderer, in order (the pictures themselves are PNGs)."""
    seen: list[dict] = []
    real = history_page.render_metric

    def spy(m):
        seen.append(m)
        return real(m)

    monkeypatch.setattr(history_page, "render_metric", spy)
    return seen


def test_every_role_is_drawn_with_each_finding_and_the_checkpoints_marked(drawn) -> None:
    run = _run()
    spike = Finding("history.loss_spike", "warning", "loss", "a spike", {"step": 15, "recovered": True})
    info = Finding("history.unread", "info", "", "skipped", {"path": "out/x", "step": 3})
    res = HistoryResult(run, [spike, info], checkpoint_pair(run, [spike]), None, "why there is no line")
    html = render_history(res).render()
    titles = [m["title"] for m in drawn]
    assert titles == ["Loss: training and validation", "Loss per codebook", "Gradient norm", "Learning rate",
                      "Loss scale", "Throughput", "my_metric"]
    judged, unknown = drawn[:-1], drawn[-1]
    assert set(judged[0]["series"]) == {"loss", "eval_loss"}  # train and valid on one axis
    assert set(judged[1]["series"]) == {"train/ce_q0", "train/ce_q1"}
    assert judged[2]["logy"] is True and judged[3].get("logy") is not True  # grad norm on a log axis, lr not
    for m in judged:
        # the finding at its step (an info finding is not a moment), the pair named, the checkpoints on the axis
        assert m["vlines"] == {"loss_spike @ 15": 15.0, "last healthy checkpoint 10": 10.0,
                               "first unhealthy checkpoint 20": 20.0}
        assert m["rug"] == {"checkpoint pair": [10.0, 20.0], "checkpoints": [30.0],
                            "checkpoints without weights": [25.0]}
    assert "vlines" not in unknown and "rug" not in unknown
    for text in ("Shown, not judged", "a spike", "out/trainer_state.json:40", "the file ends inside item 7",
                 "weights missing", "why there is no line", "Curves (judged)"):
        assert text in html, text
    assert html.index("Curves (judged)") < html.index("Shown, not judged")


def test_the_page_computes_no_verdict(drawn, monkeypatch) -> None:
    import signalchain.checks.history as judges

    def forbidden(*a, **k):
        raise AssertionError("the page judged")

    monkeypatch.setattr(judges, "judge", forbidden)
    run = _run()
    run.series["loss"].values[20:] = np.nan  # a run that plainly broke, handed over with no findings
    html = render_history(HistoryResult(run, [], None, None, "")).render()
    assert "history.nonfinite" not in html and "history." not in html
    assert all("vlines" not in m for m in drawn)  # nothing marked that the result does not name
    assert drawn[0]["rug"] == {"checkpoints": [10.0, 20.0, 30.0], "checkpoints without weights": [25.0]}


def test_the_bisect_line_is_shown_as_a_command() -> None:
    run = _run()
    line = "signalchain bisect GOLDEN --checkpoints out --steps 10:20"
    html = render_history(HistoryResult(run, [], None, line, "GOLDEN: a golden batch")).render()
    assert f"<pre>{line}</pre>" in html and "GOLDEN: a golden batch" in html
