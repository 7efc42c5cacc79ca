"""`optim.lr_too_small` from what the configured rate does at the user's horizon: an error only where
no learning can happen (a zero rate, updates below float resolution), else at most info with the
short-horizon caveat. The judge on hand-made records here; measured on real pipelines in
tests/experiments/test_rates.py."""

from __future__ import annotations

import pytest

from signalchain.checks.optimisation.curves import CAVEAT
from signalchain.checks.optimisation.rates import judge_rates, lost_at
from signalchain.probes.step_rates import RATE_GRID
from signalchain.records.optimisation import CurveMeasurement, GroupRate, SweepMeasurement, UpdateMeasurement


def group(lost_at_1: float = 0.0, *, index: int = 0, values: int = 1000, configured: float | None = 1e-3,
          lrs=(1e-3, 1e-3, 1e-3), edge: float = 1e-8, stuck: int = 0, eps_share: float | None = None) -> GroupRate:
    """A group whose share lost to rounding is 1 below `edge`, `lost_at_1` above it."""
    return GroupRate(group=index, tensors=2, values=values, dtype="float32", sampled=values, configured_lr=configured,
                     step_lrs=list(lrs), with_grad=3 * values, stuck=stuck, ratio=1e-3, unit_ratio=1.0,
                     lost_step=0.0, lost_at=[[r, 1.0 if r < edge else lost_at_1] for r in RATE_GRID],
                     eps=1e-8, eps_share=eps_share)


def update(*groups: GroupRate) -> UpdateMeasurement:
    return UpdateMeasurement(steps=3, changed={}, had_grad={}, configured_lr=[], effective_lr=[], groups=list(groups))


def curve(step_lrs, losses=(4.0, 3.0, 2.0, 1.5, 1.0, 0.8)) -> CurveMeasurement:
    return CurveMeasurement(losses=list(losses), grad_norms=[], steps=len(losses), step_lrs=[list(s) for s in step_lrs],
                            params_moved=True)


def test_the_lost_share_is_read_at_the_grid_rate_at_or_above_the_rate() -> None:
    g = group(0.02, edge=1e-8)
    assert lost_at(g, 0.0) == 1.0 and lost_at(g, None) is None
    assert lost_at(g, 5e-9) == 1.0 and lost_at(g, 1e-8) == 0.02 and lost_at(g, 1e-3) == 0.02


def test_a_configured_rate_of_zero_is_an_error_naming_the_steps() -> None:
    (f,) = judge_rates(update(group(configured=0.0, lrs=(0.0, 0.0, 0.0))), curve([[0.0]] * 60))
    assert (f.id, f.severity.value, f.stage) == ("optim.lr_too_small", "error", "optimizer")
    assert "configured learning rate is 0" in f.message and "63 optimizer steps" in f.message
    assert "batch // 256" in f.hint and f.evidence["steps"] == 63


def test_a_schedule_that_holds_the_rate_at_zero_is_an_error_naming_the_configured_rate() -> None:
    (f,) = judge_rates(update(group(configured=3e-3, lrs=(0.0, 0.0, 0.0))), curve([[0.0]] * 60))
    assert f.severity.value == "error" and "although the configured rate is 0.003" in f.message
    assert "step 0 to step 62" in f.hint and "get_last_lr" in f.hint


def test_a_warm_up_from_zero_is_not_a_zero_rate() -> None:
    """A linear warm-up starts at 0 and rises: learning happens, so at most an info."""
    warm = [[1e-4 * s / 4000] for s in range(60)]
    found = judge_rates(update(group(configured=1e-4, lrs=(0.0, 2.5e-8, 5e-8))), curve(warm))
    assert all(f.severity.value == "info" for f in found)


def test_updates_that_rounding_loses_are_an_error_with_their_numbers() -> None:
    g = group(0.6, configured=1e-9, lrs=(1e-10, 2e-10, 3e-10), edge=1e-10, stuck=2400)
    (f,) = judge_rates(update(g), curve([[1e-9]] * 60))
    assert f.severity.value == "error" and "float32 rounding loses 60% of the intended update" in f.message
    assert "80% of the values with a non-zero gradient were left bit-identical" in f.message
    assert f.evidence["rate"] == 1e-9 and f.evidence["lost"] == 0.6


def test_rounding_is_judged_at_the_largest_rate_the_run_reaches() -> None:
    """The first steps of a warm-up lose their update to rounding; the configured rate does not."""
    g = group(0.01, configured=1e-5, lrs=(0.0, 2.5e-9, 5e-9), edge=1e-8)
    assert not [f for f in judge_rates(update(g), curve([[1e-5 * s / 4000] for s in range(60)]))
                if f.severity.value != "info"]


def test_a_small_group_does_not_decide_for_the_model() -> None:
    big, small = group(0.0, values=10_000), group(0.9, index=1, values=100, configured=1e-9, lrs=(1e-9,) * 3,
                                                    edge=1e-8)
    assert not [f for f in judge_rates(update(big, small)) if f.severity.value != "info"]


@pytest.mark.parametrize("kind", ["rounding", "eps", "flat", "sweep"])
def test_what_merely_suggests_a_small_rate_is_info_with_the_caveat(kind: str) -> None:
    g = group(0.08 if kind == "rounding" else 0.0, eps_share=0.9 if kind == "eps" else 0.01)
    c = curve([[1e-3]] * 6, losses=[4.0, 3.999, 3.998, 3.997, 3.996, 3.995]) if kind == "flat" else None
    s = (SweepMeasurement(lrs=[1e-5, 1e-3, 1e-1], losses=[[4.0, 3.99], [4.0, 3.9], [4.0, 2.0]], initial=4.0,
                          configured=1e-5) if kind == "sweep" else None)
    (f,) = judge_rates(update(group(0.0) if kind == "sweep" else g), c, s)
    assert (f.id, f.severity.value) == ("optim.lr_too_small", "info")
    assert CAVEAT in f.message and f.evidence["caveat"] == CAVEAT
    words = {"rounding": "float32 rounding loses 8%", "eps": "eps 1e-08 is above √v̂ for 90%",
             "flat": "the loss goes from 4 to 3.995", "sweep": "0.1 lowers it by 2"}[kind]
    assert words in f.message
    assert "raise it towards" not in f.hint


def test_a_healthy_rate_gets_nothing() -> None:
    assert judge_rates(update(group(0.0)), curve([[1e-3]] * 6)) == []


def test_a_relative_step_is_judged_at_the_rate_it_computes_never_at_zero() -> None:
    """transformers' Adafactor with relative_step: lr None in every group and at every step. Its
    rounding is read off the steps it made (`lost_step`), never off a rate of 0."""
    own = group(configured=None, lrs=(None, None, None), edge=1.0)  # the grid would say 100% lost below 1
    assert judge_rates(update(own), curve([[None]] * 60)) == []
    own.lost_step = 0.2
    (f,) = judge_rates(update(own), curve([[None]] * 60))
    assert f.severity.value == "info" and "20% of the update at the rate the optimizer computes itself" in f.message
    assert f.message.startswith("the learning rate the optimizer computes itself") and "fixed rate" in f.hint
    assert f.evidence["groups"][0]["rate"] is None
