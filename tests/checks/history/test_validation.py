"""`history.valid_constant`, `history.valid_below_train`, `history.overfit_gap` against their healthy
look-alikes: a log that rounds, dropout, a model that stopped changing."""

from __future__ import annotations

import numpy as np

from _history_curves import build, clean_base
from signalchain.checks.history import judge


def _ids(run, id_):
    return [f for f in judge(run) if f.id == id_]


def _evals(a, factor=1.02, decimals=None, seed=5):
    ev = a["steps"][19::20]
    level = 3.0 + 3.0 * np.exp(-(ev - 1) / 100)  # the clean base's level at each evaluation
    val = factor * level * np.exp(np.random.default_rng(seed).normal(0, 0.01, len(ev)))
    return ev, (np.round(val, decimals) if decimals is not None else val)


def test_a_stale_evaluation_is_dated_at_its_first_repeat() -> None:
    run, a = clean_base()
    ev, val = _evals(a)
    val[5:] = val[5]
    (f,) = _ids(build(run, a, (ev, val)), "history.valid_constant")
    assert f.evidence["step"] == int(ev[5]) and f.evidence["evaluations"] >= 3


def test_a_rounded_log_repeating_at_its_plateau_is_not_a_stale_evaluation() -> None:
    run, a = clean_base()
    a["loss"][250:] = 3.0 * np.exp(np.random.default_rng(6).normal(0, 0.05, 150))  # converged
    ev, val = _evals(a, decimals=1)
    assert (np.diff(val[-6:]) == 0).sum() >= 2  # the log does repeat
    assert _ids(build(run, a, (ev, val)), "history.valid_constant") == []


def test_evaluations_of_a_model_that_no_longer_changes_repeat_without_a_finding() -> None:
    run, a = clean_base()
    a["loss"] = 4.0 * np.exp(np.random.default_rng(7).normal(0, 0.05, 400))  # nothing is learned
    ev, _ = _evals(a)
    val = np.full(len(ev), 4.1)
    assert _ids(build(run, a, (ev, val)), "history.valid_constant") == []


def test_validation_far_below_training_names_the_benign_reading() -> None:
    run, a = clean_base()
    ev, val = _evals(a, factor=0.6)
    (f,) = _ids(build(run, a, (ev, val)), "history.valid_below_train")
    assert f.severity.value == "warning" and f.evidence["step"] == int(ev[0])
    assert "dropout or augmentation" in f.message


def test_dropout_puts_validation_a_little_below_training_silently() -> None:
    run, a = clean_base()
    ev, val = _evals(a, factor=0.9)
    assert _ids(build(run, a, (ev, val)), "history.valid_below_train") == []


def test_the_gap_opens_at_the_validation_minimum() -> None:
    run, a = clean_base()
    ev, val = _evals(a)
    val[12:] = val[11] * np.exp(0.03 * np.arange(1, 9))  # rises 3 % an evaluation from the 13th
    (f,) = _ids(build(run, a, (ev, val)), "history.overfit_gap")
    assert f.evidence["step"] == int(ev[11])
