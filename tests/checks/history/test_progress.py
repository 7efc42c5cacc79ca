"""`history.plateau`, `history.codebook_stalled`, `history.epoch_boundary`: each fires where its fault
shows (tolerances stated per test), and only with the numbers it needs from the configuration."""

from __future__ import annotations

import math

import numpy as np

from _history_curves import build, clean_base, epoch_run, make_run
from signalchain.checks.history import judge
from signalchain.history.roles import assign
from signalchain.records.history import Series


def _ids(run, id_):
    return [f for f in judge(run) if f.id == id_]


def test_flat_at_the_unigram_entropy_only_when_the_configuration_gives_it() -> None:
    h = 3.2  # the targets' token-frequency entropy
    curve = h + (6.0 - h) * np.exp(-np.arange(400) / 15)
    curve = curve * np.exp(np.random.default_rng(3).normal(0, 0.01, 400))
    run, a = clean_base()
    a["loss"] = curve
    assert [f for f in _ids(build(run, a), "history.plateau") if f.evidence["kind"] == "unigram"] == []
    run, a = clean_base()
    a["loss"] = curve
    run.config["unigram_entropy"] = h
    (f,) = _ids(build(run, a), "history.plateau")
    # it was never below h: the fault shows from the first step; it settles within 2 % of h about 3 time
    # constants in (step ~45 of 400, tolerance 20 steps)
    assert f.evidence["kind"] == "unigram" and f.severity.value == "warning" and f.evidence["step"] == 1
    assert 25 <= f.evidence["settles_at"] <= 65


def test_an_epoch_axis_run_at_ln_v_is_info_on_so_few_points() -> None:
    run = epoch_run(0)
    flat = math.log(2048) * np.exp(np.random.default_rng(0).normal(0, 0.002, 8))
    run.add(Series("train/ce", np.arange(1, 9), flat))
    run.config["card"] = 2048
    (f,) = _ids(assign(run), "history.plateau")
    assert f.evidence["kind"] == "uniform" and f.severity.value == "info"


def test_a_codebook_that_stops_falling_is_dated_where_it_stops() -> None:
    run = make_run("codebooks", 0)
    s = run.series["train/ce_q2"]
    stalled = s.values.copy()
    stalled[20:] = stalled[20] * np.exp(np.random.default_rng(1).normal(0, 0.02, len(s) - 20))
    run.add(Series("train/ce_q2", s.steps, stalled))
    (f,) = _ids(assign(run), "history.codebook_stalled")
    # it stops falling at step 20 (tolerance 10 steps); the others (time constant 100 steps) have made
    # half their fall near step 70, where they part (tolerance 30 steps)
    assert f.evidence["codebook"] == 1 and 10 <= f.evidence["step"] <= 30
    assert 40 <= f.evidence["parts_at"] <= 100


def test_epoch_sawtooth_from_the_configured_steps_per_epoch() -> None:
    run, a = clean_base()
    within = np.tile(np.exp(-np.arange(100) / 30), 4)
    a["loss"] = (3.0 + 1.0 * within) * np.exp(np.random.default_rng(2).normal(0, 0.01, 400))
    run = build(run, a)
    del run.series["epoch"]  # no epoch counter logged: the configuration says 100 steps per epoch
    assert _ids(run, "history.epoch_boundary") == []
    run.config["steps_per_epoch"] = 100
    (f,) = _ids(run, "history.epoch_boundary")
    assert f.evidence["step"] == 101 and "running mean" in f.hint


def test_flat_from_the_start_on_a_heavy_tailed_noisy_curve() -> None:
    run, a = clean_base()
    a["loss"] = 5.0 * np.exp(0.08 * np.random.default_rng(4).standard_t(4, 400))
    (f,) = _ids(build(run, a), "history.plateau")
    assert f.evidence["kind"] == "from_start" and f.evidence["step"] == 1


def test_a_loss_that_was_below_ln_v_and_comes_back_is_dated_where_it_settles() -> None:
    run, a = clean_base()
    lnv = math.log(1024)
    a["loss"] = np.where(np.arange(400) < 200, 5.0, lnv) * np.exp(np.random.default_rng(5).normal(0, 0.01, 400))
    run.config["vocab_size"] = 1024
    (f,) = _ids(build(run, a), "history.plateau")
    # back at ln V from step 201 (tolerance: the running median's half-window, 10 steps)
    assert f.evidence["kind"] == "uniform" and 195 <= f.evidence["step"] <= 211
