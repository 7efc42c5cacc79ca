"""`history.nonfinite`: an error when the run dies, a warning when the bad steps were skipped and it
learned on (or the logged loss is an accumulator one batch poisoned while the gradient norm lives on),
info for a scaler's skips (DESIGN §4 trap)."""

from __future__ import annotations

import numpy as np

from _history_curves import Recipe, build, clean_base, recipe_run
from signalchain.checks.history import judge


def _one(run):
    (f,) = [f for f in judge(run) if f.id == "history.nonfinite"]
    return f


def test_a_loss_that_comes_back_finite_is_a_warning_dated_at_the_bad_step() -> None:
    run, a = clean_base()
    a["loss"][150] = np.nan  # one batch with an empty target; the step was skipped
    f = _one(build(run, a))
    assert f.severity.value == "warning" and f.evidence["step"] == 151 and f.evidence["recovered"] is True


def test_a_loss_nan_to_the_end_is_an_error_with_the_loss_scale_collapse_before_it() -> None:
    run, a = clean_base()
    a["loss"][300:] = np.nan
    a["grad"][300:] = np.nan  # the weights went non-finite too: the run is dead
    run = build(run, a)
    from signalchain.records.history import Series

    scale = np.full(400, 65536.0)
    scale[270:300] = 65536.0 / 2.0 ** np.arange(1, 31)
    run.add(Series("loss_scale", a["steps"], scale, role="loss_scale"))
    f = _one(run)
    assert f.severity.value == "error" and f.evidence["step"] == 301
    assert any("loss scale fell" in b for b in f.evidence["before"])


def test_a_nan_loss_with_a_live_gradient_norm_is_a_poisoned_running_total() -> None:
    run, a = clean_base()
    a["loss"][300:] = np.nan  # HF Trainer's tr_loss after one NaN batch; the gradient norm lives on
    f = _one(build(run, a))
    assert f.severity.value == "warning" and f.evidence["step"] == 301 and f.evidence["weights_alive"] is True


def test_a_scaler_calibrating_is_info_and_one_skipping_half_the_run_is_a_warning() -> None:
    f = _one(recipe_run(Recipe(points=100, calibration=True), 0))
    assert f.severity.value == "info" and "scaler" in f.message
    run, a = clean_base()
    a["grad"][200::2] = np.inf  # every other step skipped through the second half
    f = _one(build(run, a))
    assert f.severity.value == "warning" and f.evidence["step"] == 201
