"""Each history judge fires on its planted fault, at the step where the fault shows."""

from __future__ import annotations

import numpy as np

from _history_curves import build, clean_base, epoch_run, make_run
from signalchain.checks.history import judge
from signalchain.history.roles import assign
from signalchain.records.history import Series


def _one(run, id_):
    hits = [f for f in judge(run) if f.id == id_]
    assert hits, [(f.id, f.severity.value, f.message) for f in judge(run)]
    return hits[0]


def test_nan_after_the_gradient_norm_rises() -> None:
    run, a = clean_base()
    a["grad"][230:250] *= np.geomspace(2, 200, 20)
    a["loss"][250:] = np.nan
    a["grad"][250:] = np.nan
    f = _one(build(run, a), "history.nonfinite")
    assert f.severity.value == "error" and f.evidence["step"] == 251
    assert any("gradient norm rose" in b for b in f.evidence["before"])


def test_fp16_skips_are_info_not_an_error() -> None:
    run = make_run("fp16_skips", 0)
    f = _one(run, "history.nonfinite")
    assert f.severity.value == "info" and "scaler" in f.message


def test_a_spike_that_recovers_and_one_that_does_not() -> None:
    run, a = clean_base()
    a["loss"][200] *= 4
    f = _one(build(run, a), "history.loss_spike")
    assert f.evidence["step"] == 201 and f.evidence["recovered"] is True and f.severity.value == "warning"
    run, a = clean_base()
    a["loss"][200:] *= 3
    f = _one(build(run, a), "history.loss_spike")
    assert f.evidence["step"] == 201 and f.evidence["recovered"] is False and f.severity.value == "error"


def test_gradient_explosion_is_sustained_only() -> None:
    run, a = clean_base()
    a["grad"][300] *= 1000  # one clipped outlier: not reported
    assert not [f for f in judge(build(run, a)) if f.id == "history.grad_explosion"]
    run, a = clean_base()
    a["grad"][300:] *= 1000
    assert _one(build(run, a), "history.grad_explosion").evidence["step"] == 301


def test_lr_stuck_at_zero_restarted_on_resume_warmup_again_and_not_as_configured() -> None:
    run, a = clean_base()
    a["lr"][:] = 0.0
    f = _one(build(run, a), "history.lr_schedule")
    assert f.evidence["kind"] == "stuck_zero" and f.severity.value == "error"

    run, a = clean_base()
    a["wall"][200:] += 7200  # resumed two hours later, with a scheduler built afresh
    a["lr"][200:] = a["lr"][:200]
    f = _one(build(run, a), "history.lr_schedule")
    assert f.evidence["kind"] == "restarted_on_resume" and f.evidence["step"] == 201

    run, a = clean_base()
    a["lr"][150:] = np.concatenate([a["lr"][:20], a["lr"][20:250]])  # warm-up again at step 151
    f = _one(build(run, a), "history.lr_schedule")
    assert f.evidence["kind"] == "warmup_restarted" and 140 <= f.evidence["step"] <= 152

    run, a = clean_base()
    run.config["learning_rate"] = 3e-5
    f = _one(build(run, a), "history.lr_schedule")
    assert f.evidence["kind"] == "differs_from_config" and abs(f.evidence["logged_peak"] / 3e-4 - 1) < 1e-9


def test_flat_from_the_start_and_flat_at_ln_v() -> None:
    run, a = clean_base()
    a["loss"] = 5.0 * np.exp(np.random.default_rng(1).normal(0, 0.05, 400))
    f = _one(build(run, a), "history.plateau")
    assert f.evidence["kind"] == "from_start" and f.evidence["step"] == 1
    run, a = clean_base()
    a["loss"] = np.log(64) + (6 - np.log(64)) * np.exp(-np.arange(400) / 20)
    run.config["vocab_size"] = 64
    assert _one(build(run, a), "history.plateau").evidence["kind"] == "uniform"


def test_one_codebook_not_learning() -> None:
    run = make_run("codebooks", 0)
    s = run.series["train/ce_q3"]
    run.add(
        Series("train/ce_q3", s.steps, np.full(len(s), 5.5) * np.exp(np.random.default_rng(0).normal(0, 0.02, len(s))))
    )
    f = _one(assign(run), "history.codebook_stalled")
    assert f.evidence["codebook"] == 2 and f.stage == "train/ce_q3"


def test_epoch_axis_codebook_not_learning() -> None:
    run = epoch_run(0)
    run.add(Series("train/ce_q1", np.arange(1, 9), np.full(8, 5.0)))
    assert _one(assign(run), "history.codebook_stalled").evidence["codebook"] == 0


def test_overfitting_leakage_and_a_constant_eval() -> None:
    run, a = clean_base()
    ev = a["steps"][19::20]
    val = np.concatenate([np.linspace(5.0, 4.0, 10), np.linspace(4.05, 4.6, 10)])
    f = _one(build(run, a, (ev, val)), "history.overfit_gap")
    assert f.evidence["step"] == int(ev[9])
    run, a = clean_base()
    lvl = np.interp(ev, a["steps"], a["loss"])
    f = _one(build(run, a, (ev, 0.6 * lvl)), "history.valid_below_train")
    assert f.evidence["step"] == int(ev[0])
    run, a = clean_base()
    val = 1.02 * lvl
    val[8:] = val[8]
    f = _one(build(run, a, (ev, val)), "history.valid_constant")
    assert f.evidence["step"] == int(ev[8])


def test_loss_steps_at_each_epoch_boundary() -> None:
    run, a = clean_base()
    # 4 epochs of 100 steps, data in the same order: each epoch relearns it, the loss climbs back at each start
    within = np.tile(np.exp(-np.arange(100) / 30), 4)
    a["loss"] = (3.0 + 1.0 * within) * np.exp(np.random.default_rng(2).normal(0, 0.01, 400))
    f = _one(build(run, a), "history.epoch_boundary")
    assert f.evidence["step"] == 101


def test_throughput_drop_that_stays_and_a_resume_jump() -> None:
    run, a = clean_base()
    a["wall"][250:] += np.cumsum(np.full(150, 1.5))  # 2.5 s a step from step 251
    f = _one(build(run, a), "history.throughput_drop")
    assert 245 <= f.evidence["step"] <= 255
    run, a = clean_base()
    a["wall"][200:] += 7200
    a["loss"][200:] *= 1.6  # the resumed run lost its optimizer state
    f = _one(build(run, a), "history.resume_jump")
    assert f.evidence["step"] == 201


def test_reader_notes_become_one_info_per_file() -> None:
    from signalchain.records.history import ReadNote

    run, a = clean_base()
    run.notes += [ReadNote("a.csv", "cut", 3), ReadNote("a.csv", "bad cell", 9), ReadNote("b.json", "empty")]
    notes = [f for f in judge(build(run, a)) if f.id == "history.unread"]
    assert [f.evidence["path"] for f in notes] == ["a.csv", "b.json"] and all(f.severity.value == "info" for f in notes)


def test_a_spike_that_comes_back_after_more_than_a_window_is_recovered() -> None:
    run, a = clean_base()
    a["loss"][200:260] *= 6  # high for 60 points (a window is 20), then back to its level
    f = _one(build(run, a), "history.loss_spike")
    assert f.evidence["recovered"] is True and f.severity.value == "warning"


def test_a_non_finite_gradient_with_a_runaway_loss_is_an_error_not_an_fp16_skip() -> None:
    run, a = clean_base()
    a["grad"][300] = np.inf
    a["loss"][300:] = 1e27  # a nan/inf filter kept the logged loss finite; the run diverged
    f = _one(build(run, a), "history.nonfinite")
    assert f.severity.value == "error" and f.evidence["step"] == 301 and f.evidence["loss_ratio"] > 10
