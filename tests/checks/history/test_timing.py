"""`history.resume_jump` and `history.throughput_drop`: dated at the resume / the first slow step
(tolerance: 5 logged points for the drop), silent on a correct resume and on pauses."""

from __future__ import annotations

import numpy as np

from _history_curves import build, clean_base
from signalchain.checks.history import judge


def _ids(run, id_):
    return [f for f in judge(run) if f.id == id_]


def _reloaded(a, died=300, back_to=200):
    """The run died at `died` and was resumed from the checkpoint at `back_to`: those steps logged twice."""
    idx = np.concatenate([np.arange(died), np.arange(back_to, len(a["steps"]))])
    out = {k: v[idx] for k, v in a.items()}
    out["wall"] = 1.7e9 + np.cumsum(np.full(len(idx), 0.5))
    # the replay: the same model at those steps, new batches (fresh noise around the clean base's level)
    t = out["steps"][died:] - 1.0
    out["loss"][died:] = (3.0 + 3.0 * np.exp(-t / 100)) * np.exp(np.random.default_rng(11).normal(0, 0.05, len(t)))
    return out, died


def test_a_resume_that_lost_the_optimizer_after_reloading_an_earlier_checkpoint() -> None:
    run, a = clean_base()
    b, at = _reloaded(a)
    b["loss"][at:] *= 1.5  # the replay starts far above what the run had at those steps
    (f,) = _ids(build(run, b), "history.resume_jump")
    assert f.evidence["step"] == 201 and f.evidence["steps_went_back"] is True


def test_a_correct_reload_of_an_early_checkpoint_during_the_steep_fall_is_silent() -> None:
    run, a = clean_base()
    b, _ = _reloaded(a, died=120, back_to=40)  # the loss fell a lot between 40 and 120: the replay is higher
    assert _ids(build(run, b), "history.resume_jump") == []


def test_a_requeued_run_that_continued_is_silent_and_one_that_jumped_is_not() -> None:
    run, a = clean_base()
    a["wall"][200:] += 7200
    assert _ids(build(run, a), "history.resume_jump") == []
    run, a = clean_base()
    a["wall"][200:] += 7200
    a["loss"][200:] *= 0.7  # loaded another (better) checkpoint than the one it stopped at
    (f,) = _ids(build(run, a), "history.resume_jump")
    assert f.evidence["step"] == 201 and f.evidence["after"] < f.evidence["before"]


def test_slow_steps_that_stay_and_pauses_that_do_not() -> None:
    run, a = clean_base()
    gaps = np.diff(a["wall"], prepend=a["wall"][0] - 0.5)
    gaps[::40] += 30.0  # an evaluation every 40 steps
    a["wall"] = 1.7e9 + np.cumsum(gaps)
    assert _ids(build(run, a), "history.throughput_drop") == []
    gaps[300:] *= 3.0  # a dead loader worker from step 301
    a["wall"] = 1.7e9 + np.cumsum(gaps)
    (f,) = _ids(build(run, a), "history.throughput_drop")
    assert 296 <= f.evidence["step"] <= 306


def test_a_reload_that_restored_the_model_only_jumps_then_relearns() -> None:
    # fresh Adam moments after reloading checkpoint-200: the loss leaps at the first update and decays
    # back over ~15 points; the judge reads the replay step for step against the first pass
    run, a = clean_base()
    b, at = _reloaded(a)
    b["loss"][at + 1 :] *= 1 + 0.35 * np.exp(-np.arange(len(b["loss"]) - at - 1) / 5)
    (f,) = _ids(build(run, b), "history.resume_jump")
    assert f.evidence["step"] == 201 and f.evidence["after"] > f.evidence["before"]
