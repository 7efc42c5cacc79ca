"""The stepped gradient against the loss's gradient (issue 41): each rule fires on the numbers its
cause leaves, and stays silent on what clean updates look like (a user's clipping, an unscaled AMP
step, micro-batches processed apart)."""

import pytest

from signalchain.checks.optimisation.grad_rule import judge_grad_rule
from signalchain.records.optimisation import GradRuleMeasurement

S = 65536.0


def rule(loss_norm, step_norm, cosine=1.0, floor=1.0, scale=None):
    return [(f.id, f.severity.value) for f in judge_grad_rule(
        GradRuleMeasurement(steps=1, params=10, loss_norm=loss_norm, step_norm=step_norm, cosine=cosine, floor=floor,
                            scale=scale))]


@pytest.mark.parametrize("loss_norm", [0.3, 1.38, 7.0])
def test_clipped_while_scaled_leaves_the_clip_norm_times_the_scale(loss_norm):
    assert rule(loss_norm, 1.0 / S, scale=S) == [("amp.clip_before_unscale", "error")]


def test_unscaled_twice_leaves_the_loss_norm_times_the_scale():
    assert rule(1.38, 1.38 / S, scale=S) == [("amp.unscaled_twice", "error")]
    assert rule(1.38, 1.38 / S * 1.05, cosine=0.97, floor=0.97, scale=S) == [("amp.unscaled_twice", "error")]


@pytest.mark.parametrize("loss_norm,step_norm,scale", [
    (1.38, 1.0, S),  # unscale_ then clip_grad_norm_(1.0): the fix
    (1.38, 1.38, S),  # no clipping, unscaled once
    (120.0, 1.0, S),  # a large gradient clipped after unscale_: ratio below TINY, but |g| · S is no clip norm
    (1.38, 1.0, None),  # no scaler, clipped
    (1.38, 1.38 / 8, None),  # loss divided by 8 accumulation steps, one micro-batch: same direction
])
def test_clean_updates_are_silent(loss_norm, step_norm, scale):
    assert rule(loss_norm, step_norm, scale=scale) == []


def test_a_gradient_turned_away_from_the_loss_is_a_warning_beyond_two_backward_passes():
    assert rule(1.0, 0.4, cosine=0.31) == [("optim.grad_not_loss_grad", "warning")]
    assert rule(1.0, 0.7, cosine=0.88) == []  # micro-batches processed apart: their own crops, dropout
    assert rule(1.0, 0.7, cosine=0.31, floor=0.5) == []  # two backward passes disagree (dropout): unreadable


def test_non_finite_or_missing_measurements_are_not_judged():
    assert rule(float("nan"), 1.0) == [] and rule(0.0, 1.0) == [] and judge_grad_rule(None) == []
    assert judge_grad_rule(GradRuleMeasurement(0, 0, 0.0, 0.0, 0.0, 0.0, error="no step")) == []


def _modes(train_mode, dropout):
    m = GradRuleMeasurement(steps=1, params=10, loss_norm=1.0, step_norm=1.0, cosine=1.0, floor=1.0,
                            train_mode=train_mode, dropout=dropout)
    from signalchain.checks.optimisation.grad_rule import judge_train_mode
    return [(f.id, f.severity.value) for f in judge_train_mode(m)]


def test_an_update_in_eval_mode_with_dropout_configured_is_a_warning():
    assert _modes([False], {"blocks.0.drop": 0.1}) == [("model.eval_mode_training", "warning")]
    assert _modes([False, False], {"config.attention_dropout": 0.1}) == [("model.eval_mode_training", "warning")]


def test_train_mode_or_no_dropout_is_silent():
    assert _modes([True], {"blocks.0.drop": 0.1}) == []
    assert _modes([False, True], {"blocks.0.drop": 0.1}) == []  # some forward in train mode: eval on purpose
    assert _modes([False], {}) == []  # nothing train-only to lose
    assert _modes([], {"blocks.0.drop": 0.1}) == []  # no forward seen


def test_configured_dropout_reads_modules_and_hugging_face_configs():
    import torch

    from signalchain.experiments.optimisation.grad_rule import configured_dropout

    class Cfg:
        def __init__(self, **kw):
            self.__dict__.update(kw)

        def to_dict(self):
            return dict(self.__dict__)

    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.2), torch.nn.Dropout(0.0))
    assert configured_dropout(net) == {"1": 0.2}
    net.config = Cfg(dropout=0.0, decoder=Cfg(attention_dropout=0.1, layerdrop=0.0))
    assert configured_dropout(net) == {"1": 0.2, "config.decoder.attention_dropout": 0.1}


def _rec(**kw):
    return GradRuleMeasurement(steps=kw.pop("steps", 1), params=10, loss_norm=1.0, step_norm=1.0, cosine=1.0,
                               floor=1.0, **kw)


def test_a_step_holding_the_marker_is_a_gradient_never_zeroed():
    from signalchain.checks.optimisation.grad_rule import judge_zeroing
    assert [f.id for f in judge_zeroing(_rec(carry=(0.7, 12)))] == ["optim.grad_not_zeroed"]
    assert [f.id for f in judge_zeroing(_rec(carry=(0.25, 12)))] == ["optim.grad_not_zeroed"]
    for clean in ((0.004, 12), (-0.01, 12), (float("nan"), 3)):
        assert judge_zeroing(_rec(carry=clean)) == []
    assert judge_zeroing(_rec()) == [] and judge_zeroing(None) == []  # nothing left behind: not measured


def test_more_scheduler_steps_than_optimizer_steps_is_a_schedule_too_fast():
    from signalchain.checks.optimisation.grad_rule import judge_schedule_steps
    assert [f.id for f in judge_schedule_steps(_rec(scheduler_steps=8))] == ["optim.schedule_too_fast"]
    assert judge_schedule_steps(_rec(scheduler_steps=1)) == []  # once per update
    assert judge_schedule_steps(_rec(scheduler_steps=0)) == []  # per epoch, or none
    assert judge_schedule_steps(_rec(steps=2, scheduler_steps=2)) == []


def test_a_shorter_copy_left_after_the_step_is_clipping_after_the_step():
    from signalchain.checks.optimisation.grad_rule import judge_clip_order
    assert [f.id for f in judge_clip_order(_rec(after_step=(1.0, 0.54)))] == ["optim.clip_after_step"]
    for clean in ((1.0, 1.0), (0.97, 0.5), (1.0, 0.99)):  # the step's own; another gradient; rounding
        assert judge_clip_order(_rec(after_step=clean)) == []
    assert judge_clip_order(_rec()) == []  # zeroed at the end: nothing to compare


def test_a_turned_gradient_over_several_forwards_names_zero_grad_inside_the_accumulation():
    m = GradRuleMeasurement(steps=1, params=10, loss_norm=1.0, step_norm=0.35, cosine=0.31, floor=1.0,
                            train_mode=[True] * 4)
    (f,) = judge_grad_rule(m)
    assert f.id == "optim.grad_not_loss_grad" and "4 forward passes" in f.message and "zero_grad()" in f.message
    assert "once per optimizer step" in f.hint
    (plain,) = judge_grad_rule(GradRuleMeasurement(steps=1, params=10, loss_norm=1.0, step_norm=0.35, cosine=0.31,
                                                   floor=1.0, train_mode=[True]))
    assert "forward passes" not in plain.message
