"""`checks.instability_live` on synthetic histories: a spike that recovers is a warning, a run that
diverges is an error, noisy but healthy runs (from scratch, or a fine-tune that starts low) say nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from signalchain.checks.instability_live import InstabilityJudge, judge_instability


def healthy(seed: int, n: int = 300, start: float = 6.0, end: float = 2.0, noise: float = 0.08) -> list[float]:
    """A loss falling from `start` to `end`, with multiplicative batch noise."""
    rng = np.random.default_rng(seed)
    curve = end + (start - end) * np.exp(-np.arange(n) / (n / 5))
    return list(curve * np.exp(rng.normal(0, noise, n)))


def ids(findings, severity=None):
    return [(f.id, f.severity.value) for f in findings if severity is None or f.severity.value == severity]


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_decreasing_loss_is_silent(seed) -> None:
    rng = np.random.default_rng(100 + seed)
    norms = list(np.exp(rng.normal(0, 0.3, 300)) * 2.0)  # log-normal gradient-norm noise
    assert judge_instability(healthy(seed), norms) == []


@pytest.mark.parametrize("seed", range(8))
def test_a_fine_tune_that_starts_low_and_noisy_is_silent(seed) -> None:
    # a trained model: the loss starts near 0.05 and each batch differs by a factor of ~2 (heavy-ish tails),
    # the first batch may be a lucky one far below the rest
    rng = np.random.default_rng(seed)
    losses = list(0.05 * np.exp(rng.normal(0, 0.45, 400)))
    losses[0] = 0.004
    assert judge_instability(losses) == []


def test_a_spike_then_recovery_is_one_warning_at_its_step() -> None:
    losses = healthy(0, n=120)
    losses[60:63] = [40.0, 55.0, 30.0]  # three steps out, then back
    found = judge_instability(losses)
    assert ids(found) == [("loss.spike", "warning")]
    spike = found[0]
    assert spike.evidence["step"] == 60 and spike.stage == "loss"
    assert "step 60" in spike.message and "median" in spike.message
    assert spike.evidence["window_median"] == pytest.approx(np.median(losses[60 - 32:60]))
    assert spike.hint and "learning rate" in spike.hint


def test_two_separate_spikes_are_two_episodes() -> None:
    losses = healthy(1, n=200)
    losses[50] = losses[150] = 50.0
    found = judge_instability(losses)
    assert [f.evidence["step"] for f in found] == [50, 150]
    assert all(f.severity.value == "warning" for f in found)


def test_a_run_that_diverges_is_an_error_once() -> None:
    losses = healthy(2, n=40) + [3.0 * 1.6 ** k for k in range(1, 40)]  # explodes from step 40 and keeps going
    found = judge_instability(losses)
    warnings, errors = ids(found, "warning"), [f for f in found if f.severity.value == "error"]
    assert ("loss.spike", "warning") in warnings
    assert len(errors) == 1 and errors[0].id == "loss.spike" and errors[0].stage == "optimizer"
    warned = next(f for f in found if f.severity.value == "warning").evidence["step"]
    assert warned < errors[0].evidence["step"]
    assert errors[0].evidence["loss"] >= 10 * errors[0].evidence["start"]
    assert "diverges" in errors[0].message


def test_a_nan_after_a_spike_is_divergence_but_alone_it_is_not_ours() -> None:
    losses = healthy(3, n=40) + [60.0, 500.0, math.nan]
    found = judge_instability(losses)
    assert ids(found) == [("loss.spike", "warning"), ("loss.spike", "error")]
    assert found[1].evidence["step"] == 42 and found[1].evidence["flagged_at"] == 40
    # a NaN with no instability before it is the non-finite locator's, not this judge's
    assert judge_instability(healthy(3, n=40) + [math.nan]) == []


def test_an_explosion_from_the_first_update_is_named_at_step_0_by_the_update_ratio() -> None:
    judge = InstabilityJudge()
    found = judge.step(0, loss=4.19, update_ratio=24.7, lr=10.0)
    assert ids(found) == [("optim.lr_too_large", "warning")]
    assert found[0].evidence["step"] == 0 and "24.7" in found[0].message and "learning rate 10" in found[0].message
    for step, loss in enumerate([900.0, 24410.0, 8000.0, 15000.0, 30000.0], start=1):
        found += judge.step(step, loss=loss)
    errors = [f for f in found if f.severity.value == "error"]
    assert len(errors) == 1 and errors[0].evidence["step"] == 5 and errors[0].evidence["start"] == 4.19


def test_update_ratio_growth_per_unit_learning_rate() -> None:
    judge = InstabilityJudge()
    assert judge.step(0, update_ratio=1e-3, lr=1e-3) == []
    assert judge.step(20, update_ratio=1e-2, lr=1e-2) == []  # warm-up: ten times the rate, same ratio per rate
    found = judge.step(40, update_ratio=0.2, lr=1e-2)  # twenty times the ratio per unit rate
    assert ids(found) == [("optim.lr_too_large", "warning")] and found[0].evidence["step"] == 40
    assert judge.step(60, update_ratio=0.3, lr=1e-2) == []  # the same episode: said once


def test_gradient_norm_jump_is_a_warning_and_staying_up_is_an_error() -> None:
    rng = np.random.default_rng(4)
    norms = list(np.exp(rng.normal(0, 0.2, 50)))
    found = judge_instability([2.0] * 53, norms + [40.0, 1.0, 1.0])
    assert ids(found) == [("grad.exploding", "warning")] and found[0].evidence["step"] == 50
    found = judge_instability([2.0] * 60, norms + [1e3 * 3 ** k for k in range(10)])
    assert ids(found) == [("grad.exploding", "warning"), ("grad.exploding", "error")]
    assert found[1].evidence["step"] == 54 and found[1].evidence["grad_norm"] >= 100 * found[1].evidence["start"]


def test_nonfinite_gradient_norms_of_skipped_fp16_steps_are_silent() -> None:
    norms = [1.0, math.inf, 1.1, 0.9, math.inf, 1.0] * 10
    assert judge_instability([2.0] * len(norms), norms) == []


def test_one_skipped_fp16_step_is_silent_and_a_collapsing_scale_is_named() -> None:
    judge = InstabilityJudge()
    scales = [32768.0, 16384.0, 8192.0] + [8192.0] * 30 + [4096.0] + [4096.0] * 30  # settle, then one skip
    assert [f for s, x in enumerate(scales) for f in judge.step(s, scale=x)] == []
    found = []
    for k in range(1, 12):  # it keeps halving: the gradients keep overflowing
        found += judge.step(len(scales) + k, scale=4096.0 / 2 ** k)
    assert ids(found) == [("amp.scale_collapse", "warning")]
    assert found[0].evidence["settled"] == 8192.0 and found[0].evidence["halvings"] == 8


def test_negative_losses_are_judged_on_spread_only() -> None:
    rng = np.random.default_rng(5)
    losses = list(-3.0 + rng.normal(0, 0.1, 100))  # a log-likelihood loss below zero
    assert judge_instability(losses) == []
    losses[70] = 5.0
    assert ids(judge_instability(losses)) == [("loss.spike", "warning")]


def test_an_oscillating_unstable_stretch_is_one_episode() -> None:
    losses = healthy(6, n=80) + [9.0, 2.5, 11.0, 2.4, 8.0, 2.6, 12.0] + healthy(7, n=60, start=2.0)
    found = judge_instability(losses)
    assert ids(found) == [("loss.spike", "warning")] and found[0].evidence["step"] == 80


def test_a_nan_long_after_a_recovered_spike_is_not_divergence() -> None:
    losses = healthy(8, n=200)
    losses[40] = 60.0
    losses[190] = math.nan
    assert ids(judge_instability(losses)) == [("loss.spike", "warning")]


def test_a_loss_that_settles_at_a_new_level_is_watched_again_from_there() -> None:
    # a spike to a plateau 4x higher that stays (below the divergence bar), then a real spike from it
    losses = [2.0 * x for x in healthy(9, n=60, start=2.0, end=2.0)] + healthy(10, n=120, start=16.0, end=16.0)
    losses[150] = 400.0
    found = judge_instability(losses)
    assert [(f.id, f.severity.value, f.evidence["step"]) for f in found] == [
        ("loss.spike", "warning", 60), ("loss.spike", "warning", 150)]
