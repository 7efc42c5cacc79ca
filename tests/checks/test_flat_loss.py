"""`loss.flat`: the loss on the golden batch does not move at all over the overfit run, and whether the
parameters moved says which half of the path is cut."""

from __future__ import annotations

import math

import pytest
import torch

from signalchain.checks.optimisation.curves import judge_flat_loss
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.optimisation.overfit import measure_overfit
from signalchain.pipeline import ProtocolView
from signalchain.records.optimisation import CurveMeasurement
from signalchain.reference import ReferencePipeline
from signalchain.reference.config import RefConfig

torch.set_num_threads(1)


def curve(losses, moved=None, error=None):
    return CurveMeasurement(losses=list(losses), grad_norms=[], steps=len(losses), params_moved=moved, error=error)


@pytest.mark.parametrize("moved, words", [(True, "although the parameters changed"),
                                          (False, "no parameter changed"), (None, "")])
def test_a_loss_that_never_moves_is_flat_and_says_which_half_is_cut(moved, words):
    (f,) = judge_flat_loss(curve([4.158883] * 6, moved))
    assert (f.id, f.stage, f.severity.value) == ("loss.flat", "loss", "warning")
    assert f.evidence["steps"] == 6 and f.evidence["span"] == 0.0 and f.evidence["params_moved"] is moved
    assert words in f.message


@pytest.mark.parametrize("losses", [[4.16, 4.10, 3.9, 3.2],  # learning
                                    [4.16, 4.16, 4.16 + 1e-3],  # slow, but it moves
                                    [4.16, 4.16],  # too short to call
                                    [4.16, 4.16, math.nan, 4.16]])  # a non-finite run is the numerics family's
def test_a_loss_that_moves_or_cannot_be_judged_is_not_flat(losses):
    assert judge_flat_loss(curve(losses, moved=True)) == []


def test_a_crashed_run_is_not_called_flat():
    assert judge_flat_loss(curve([3.0] * 5, moved=False, error="RuntimeError: boom")) == []


SMALL = RefConfig(batch_size=4, segment_seconds=1.0, dim=32, layers=1, warmup_steps=1)


def _overfit(*faults: str) -> CurveMeasurement:
    ctx = Context(ProtocolView(ReferencePipeline(SMALL, faults=list(faults))), seed=0,
                  budget=BUDGETS["economy"])
    return measure_overfit(ctx)


def test_the_overfit_run_measures_whether_the_parameters_moved():
    clean = _overfit()
    assert clean.params_moved is True and judge_flat_loss(clean) == []
    never = _overfit("grad_accumulation_never_steps")  # optimizer.step() is never reached
    assert never.params_moved is False
    (f,) = judge_flat_loss(never)
    assert f.id == "loss.flat" and "no parameter changed" in f.message


def test_a_rate_at_which_nothing_can_learn_explains_the_flat_loss():
    from signalchain.checks.base import make

    def rate(sev):
        return make("optim.lr_too_small", sev, "optimizer", "the learning rate is 0", "checks.rates")

    assert judge_flat_loss(curve([4.158883] * 6, False), [rate("error")]) == []
    assert [f.id for f in judge_flat_loss(curve([4.158883] * 6, False), [rate("info")])] == ["loss.flat"]
