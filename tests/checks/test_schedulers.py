"""Configured LR schedulers against the steps taken (issue 41: Lightning manual optimisation never
steps them, so-vits-svc-fork#291). The live side runs in the real-bug bed's Lightning reproduction."""

from signalchain.checks.optimisation.schedulers import ScheduleState, judge_schedulers


def ids(states, steps, epochs=0, manual=False):
    return [(f.id, f.severity.value) for f in judge_schedulers(states, steps, epochs, manual)]


def test_a_step_scheduler_that_never_stepped_is_named_with_manual_optimisation():
    never = ScheduleState("LambdaLR", "step", 1, 0, lr=2e-4)
    assert ids([never], 40, manual=True) == [("optim.scheduler_not_stepped", "warning")]
    (f,) = judge_schedulers([never], 40, 0, True)
    assert "manual optimisation" in f.message and "lr_schedulers()" in f.hint and "0.0002" in f.message


def test_schedulers_that_step_or_are_not_due_are_silent():
    assert ids([ScheduleState("LambdaLR", "step", 1, 39)], 40) == []  # steps every update
    assert ids([ScheduleState("LambdaLR", "step", 1, 0)], 10) == []  # too early to say
    assert ids([ScheduleState("StepLR", "step", 50, 0)], 40) == []  # frequency 50: not due yet
    assert ids([ScheduleState("CosineAnnealingLR", "epoch", 1, 0)], 400, epochs=1) == []  # one epoch
    assert ids([ScheduleState("CosineAnnealingLR", "epoch", 1, 0)], 400, epochs=3) == [
        ("optim.scheduler_not_stepped", "warning")]
