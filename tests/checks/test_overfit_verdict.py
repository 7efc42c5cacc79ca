"""The overfit verdict when no rate memorises one batch: capacity needs a plateau (the loss fell, then
stopped falling), never slow progress. Curves are made here with the shapes the two cases have: a
LoRA fine-tune of a trained model falls steadily (each third of the run about as much as the one
before), a model too small for the task falls fast, then flattens."""

from __future__ import annotations

import numpy as np
import pytest

from signalchain.checks.optimisation.curves import PLATEAU, curve_shape, judge_overfit
from signalchain.records.optimisation import CurveMeasurement


def steady(start: float, per_step: float, n: int = 61) -> list[float]:
    """A loss falling by about the same amount every step (slow progress)."""
    return [start - per_step * i for i in range(n)]


def saturating(start: float, floor: float, rate: float, n: int = 61) -> list[float]:
    """A loss that falls fast, then settles on `floor` (a plateau)."""
    return [floor + (start - floor) * float(np.exp(-rate * i)) for i in range(n)]


def curve(configured: list[float], refits: list[tuple[float, list[float]]], entropy: float = 4.2) -> CurveMeasurement:
    c = CurveMeasurement(losses=configured, grad_norms=[], steps=len(configured), unigram_entropy=entropy)
    c.refit_lrs = [lr for lr, _ in refits]
    c.refit_losses = [ls for _, ls in refits]
    return c


def loud(findings) -> list[tuple[str, str]]:
    return sorted((f.id, f.severity.value) for f in findings if f.severity.value != "info")


def test_the_shape_reads_the_last_third_against_the_first() -> None:
    assert curve_shape(steady(2.0, 0.005))[0] == "falling"
    shape, first, last = curve_shape(saturating(5.5, 3.9, 0.2))
    assert shape == "plateau" and last < PLATEAU * first
    assert curve_shape([2.0] * 61)[0] == "flat"
    # a spike is no progress: the best-so-far loss is read
    spiky = saturating(5.5, 3.9, 0.2)
    spiky[55] = 6.0
    assert curve_shape(spiky)[0] == "plateau"


def test_a_trained_start_still_falling_at_every_rate_is_info_not_capacity() -> None:
    # the shape of ref-ft-lora: configured 2e-4 barely moves; 0.01 and 0.001 fall steadily, neither halves it
    c = curve(steady(2.14, 0.0012), [(0.01, saturating(2.14, 0.9, 0.012)), (0.001, steady(2.14, 0.005))])
    found = judge_overfit(c, [])
    assert loud(found) == []
    (f,) = found
    assert f.id == "overfit.unfinished" and f.stage == "model"
    assert "still falling" in f.message and "connected" in f.message and "below the targets' unigram" in f.message
    assert "plateau" not in {s["shape"] for s in f.evidence["shapes"]}


@pytest.mark.parametrize("plateau_at", ["configured", "refit"])
def test_a_plateau_above_the_target_is_capacity(plateau_at: str) -> None:
    flat_top = saturating(5.54, 3.93, 0.25)
    slow = steady(5.54, 0.025)  # the lower rate still falling does not excuse a plateau at the higher
    c = curve(flat_top if plateau_at == "configured" else steady(5.54, 0.006), [(0.2, flat_top if plateau_at == "refit"
                                                                                   else slow), (0.02, slow)])
    found = judge_overfit(c, [])
    assert loud(found) == [("model.capacity", "warning"), ("overfit.failed", "error")]
    cap = next(f for f in found if f.id == "model.capacity")
    assert "stopped falling at 3.93" in cap.message and cap.evidence["plateau"] == pytest.approx(3.93, abs=0.01)


def test_a_loss_that_falls_at_no_rate_is_a_failure_without_a_capacity_claim() -> None:
    c = curve([3.0] * 61, [(0.1, [3.0] * 61), (0.01, [3.0] * 61)])
    found = judge_overfit(c, [])
    assert loud(found) == [("overfit.failed", "error")]
    assert "at no rate tried does the loss fall" in found[0].message
