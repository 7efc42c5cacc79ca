"""The Monitor's update judges (`monitor/_update.py`): a warm-up's first update at a scheduled learning
rate of 0 is no skipped step (HF's and Lightning's warm-ups start there: the strangers' bed found it
warned on every clean warm-up run); a rate the user set to 0, or a schedule that stays at 0, still is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from signalchain import Monitor

torch.set_num_threads(1)


def run(opt_rate: float = 0.1, schedule=None, steps: int = 4, ratio_every: int = 1):
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=opt_rate)
    sched = schedule(opt) if schedule else None
    mon = Monitor(model, opt, ratio_every=ratio_every, on_finding=lambda f: None)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        with mon.step((x, y)):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if mon.check(loss):
                opt.step()
            if sched is not None:  # after the optimizer, as every trainer does
                sched.step()
            opt.zero_grad()
    return mon, [f for f in mon.findings if f.id == "optim.step_skipped"]


def hf_linear_warmup(opt):
    transformers = pytest.importorskip("transformers")
    return transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)


@pytest.mark.parametrize("schedule", [hf_linear_warmup, lambda opt: torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min(1.0, s / 3))], ids=["hf_linear_warmup", "torch_lambda_warmup"])
def test_a_warm_up_from_zero_is_not_a_skipped_step(schedule) -> None:
    mon, skipped = run(schedule=schedule)
    assert skipped == [] and mon.findings == []
    ratios = mon.history["update_ratio"]
    assert ratios[0] == 0.0 and all(r > 0 for r in ratios[1:])  # the first update really was empty


def test_a_schedule_that_stays_at_zero_is_said_on_its_second_measured_step() -> None:
    mon, skipped = run(schedule=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0))
    assert len(skipped) == 1 and skipped[0].evidence["step"] == 1
    assert skipped[0].evidence["learning_rates"] == [0.0] and "again" in skipped[0].message


def test_a_rate_set_to_zero_is_said_at_the_first_step_with_its_rate() -> None:
    mon, skipped = run(opt_rate=0.0)
    assert len(skipped) == 1 and skipped[0].severity.value == "warning"
    assert skipped[0].evidence["step"] == 0 and skipped[0].message.startswith("step 0:")  # 0-based, as `fired`
    assert skipped[0].evidence["learning_rates"] == [0.0] and "learning rate 0" in skipped[0].message


def test_a_skip_with_a_nonzero_rate_names_no_rate() -> None:
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, opt, ratio_every=1, on_finding=lambda f: None)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    with mon.step((x, y)):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        mon.check(loss)
        opt.zero_grad()  # the bug: gradients cleared between backward and step
        opt.step()
    (found,) = [f for f in mon.findings if f.id == "optim.step_skipped"]
    assert "learning_rates" not in found.evidence and found.evidence["step"] == 0


def test_after_a_warm_ups_empty_first_update_the_next_one_is_measured() -> None:
    """With `ratio_every=20` the first measured update of a warm-up is empty by design; the next one is
    measured at once, so an oversized update (lr 10 behind a warm-up) is not left unseen for 20 steps."""
    mon, skipped = run(schedule=hf_linear_warmup, steps=4, ratio_every=20)
    assert skipped == [] and mon.history["ratio_steps"] == [1.0, 2.0]
    assert mon.history["update_ratio"][0] == 0.0 and mon.history["update_ratio"][1] > 0
