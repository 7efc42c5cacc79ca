"""`history.lr_schedule`: each kind fires at the step where the schedule goes wrong (tolerance: the
logging interval), and the look-alikes of healthy recipes stay silent."""

from __future__ import annotations

import numpy as np

from _history_curves import build, clean_base
from signalchain.checks.history import judge


def _kinds(run) -> dict[str, object]:
    return {f.evidence["kind"]: f for f in judge(run) if f.id == "history.lr_schedule"}


def test_a_decay_whose_total_is_half_the_run_sits_at_zero_for_the_second_half() -> None:
    run, a = clean_base()
    a["lr"] = np.concatenate([a["lr"][::2], np.zeros(200)])  # num_training_steps = half the real steps
    f = _kinds(build(run, a))["stuck_zero"]
    assert f.severity.value == "warning" and 195 <= f.evidence["step"] <= 201


def test_zero_for_the_first_third_then_training() -> None:
    run, a = clean_base()
    a["lr"][:130] = 0.0  # a warm-up that multiplies by 0 for 130 steps
    f = _kinds(build(run, a))["stuck_zero"]
    assert f.severity.value == "warning" and f.evidence["step"] == 1 and f.evidence["points"] == 130


def test_a_warmup_from_zero_for_a_few_points_is_normal() -> None:
    run, a = clean_base()
    a["lr"][:3] = 0.0
    assert "stuck_zero" not in _kinds(build(run, a))


def test_stuck_at_the_peak_only_when_a_decaying_scheduler_was_configured() -> None:
    run, a = clean_base()
    a["lr"] = np.where(np.arange(400) < 20, a["lr"], 3e-4)  # warm-up, then never decays
    assert "stuck_peak" not in _kinds(build(run, a))  # no configuration: a constant rate is a recipe
    run, a = clean_base()
    a["lr"] = np.where(np.arange(400) < 20, a["lr"], 3e-4)
    run.config["lr_scheduler_type"] = "cosine"
    f = _kinds(build(run, a))["stuck_peak"]
    assert f.severity.value == "warning" and 18 <= f.evidence["step"] <= 21
    run, a = clean_base()
    a["lr"] = np.where(np.arange(400) < 20, a["lr"], 3e-4)
    run.config["lr_scheduler_type"] = "constant_with_warmup"
    assert "stuck_peak" not in _kinds(build(run, a))


def test_a_scheduler_rebuilt_after_reloading_an_earlier_checkpoint() -> None:
    # died at step 300, resumed from checkpoint-200: steps 201..300 are logged twice; the rebuilt
    # scheduler starts its warm-up again at step 201
    run, a = clean_base()
    idx = np.concatenate([np.arange(300), np.arange(200, 400)])
    a = {k: v[idx] for k, v in a.items()}
    a["lr"][300:] = clean_base()[1]["lr"][:200]
    a["wall"] = 1.7e9 + np.cumsum(np.full(500, 0.5))
    f = _kinds(build(run, a))["restarted_on_resume"]
    assert f.evidence["step"] == 201 and f.evidence["after"] < f.evidence["before"]


def test_a_correct_resume_from_an_earlier_checkpoint_replays_the_same_rates() -> None:
    run, a = clean_base()
    idx = np.concatenate([np.arange(300), np.arange(200, 400)])
    a = {k: v[idx] for k, v in a.items()}
    a["wall"] = 1.7e9 + np.cumsum(np.full(500, 0.5))
    assert _kinds(build(run, a)) == {}


def test_a_step_decay_on_a_long_evaluation_pause_is_not_a_restart() -> None:
    run, a = clean_base()
    a["lr"] = np.where(np.arange(400) < 250, 3e-4, 3e-5)
    a["wall"][250:] += 900  # the evaluation at the end of an epoch, where StepLR decays
    assert "restarted_on_resume" not in _kinds(build(run, a))


def test_the_configured_rate_is_not_judged_below_while_the_warmup_still_climbs() -> None:
    run, a = clean_base()
    a["lr"] = 3e-4 * np.arange(1, 401) / 1000  # a warm-up of 1000 steps; the run died at step 400
    run.config["learning_rate"] = 3e-4
    assert "differs_from_config" not in _kinds(build(run, a))
    run, a = clean_base()
    run.config["learning_rate"] = 3e-3  # the schedule peaked and decays: 10x below what was configured
    f = _kinds(build(run, a))["differs_from_config"]
    assert f.evidence["step"] == 20 and abs(f.evidence["logged_peak"] / 3e-4 - 1) < 1e-9


def test_no_warmup_is_info_at_most() -> None:
    run, a = clean_base()
    a["lr"] = np.full(400, 3e-4)
    run.config["warmup_steps"] = 50
    f = _kinds(build(run, a))["no_warmup"]
    assert f.severity.value == "info" and f.evidence["step"] == 1


def test_a_restart_that_shows_one_point_after_the_resume_and_starts_from_zero() -> None:
    # requeued at step 200 without the scheduler's state: the rate logged at 200 is still the old one,
    # the fresh warm-up (from exactly 0) shows from 201
    run, a = clean_base()
    a["wall"][199:] += 7200
    a["lr"][:20] = 3e-4 * np.arange(0, 20) / 20  # the run's own warm-up starts at 0
    a["lr"][200:] = np.minimum(3e-4 * np.arange(0, 200) / 20, 3e-4)  # ... and again from step 201
    f = _kinds(build(run, a))["restarted_on_resume"]
    assert f.evidence["step"] == 201 and f.evidence["after"] == 0.0
