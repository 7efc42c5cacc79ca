"""`StepGuard`: a one-shot skip of `optimizer.step`, closure always run, the original restored."""

from __future__ import annotations

import pytest
import torch

from signalchain.integrations._guard import StepGuard


def setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def loss_of(model):
    return model(torch.ones(2, 3)).pow(2).mean()


def test_skip_is_one_shot_and_close_restores() -> None:
    model, opt = setup()
    guard = StepGuard(opt)
    loss_of(model).backward()
    before = model.weight.detach().clone()
    guard.skip_next = True
    opt.step()
    assert torch.equal(model.weight, before) and guard.skipped == [0]
    assert model.weight.grad is None  # withheld by dropping the gradients
    loss_of(model).backward()
    opt.step()
    assert not torch.equal(model.weight, before)
    guard.close()
    assert "step" not in opt.__dict__ and guard.calls == 2
    guard.close()  # idempotent


def test_the_closure_runs_even_when_the_update_is_withheld() -> None:
    model, opt = setup()
    guard = StepGuard(opt)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = loss_of(model)
        loss.backward()
        guard.skip_next = len(calls) == 1  # judged inside the closure, as in Lightning
        return loss

    before = model.weight.detach().clone()
    assert opt.step(closure=closure) is not None and calls == [1]
    assert torch.equal(model.weight, before)
    opt.step(closure)
    assert calls == [1, 1] and not torch.equal(model.weight, before)


def test_an_instance_wrapper_is_put_back() -> None:
    model, opt = setup()
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)  # wraps opt.step on the instance  # noqa: F841
    theirs = opt.__dict__.get("step")
    guard = StepGuard(opt)
    assert getattr(opt.step, "_wrapped_by_lr_sched", None) == getattr(theirs, "_wrapped_by_lr_sched", None)
    guard.close()
    assert opt.__dict__.get("step") is theirs


def test_accelerates_optimizer_wrapper_is_guarded() -> None:
    accelerate = pytest.importorskip("accelerate")
    model, opt = setup()
    wrapped = accelerate.Accelerator(cpu=True).prepare(opt)
    guard = StepGuard(wrapped)
    loss_of(model).backward()
    before = model.weight.detach().clone()
    guard.skip_next = True
    wrapped.step()
    assert torch.equal(model.weight, before)
    loss_of(model).backward()
    wrapped.step()
    assert not torch.equal(model.weight, before)
    guard.close()


def test_a_withheld_step_keeps_a_scalers_bookkeeping_going() -> None:
    # HF's order: backward on the scaled loss, unscale_ (for clipping), step, update; a second unscale_
    # without an update() in between raises, so the withheld step must still reach scaler.update()
    model, opt = setup()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    guard = StepGuard(opt)
    weights = []
    for i in range(3):
        scaler.scale(loss_of(model)).backward()
        scaler.unscale_(opt)
        guard.skip_next = i == 1
        before = model.weight.detach().clone()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        weights.append(torch.equal(before, model.weight))
    assert weights == [False, True, False] and guard.skipped == [1]  # not even weight decay on the skipped one


def test_accelerates_scaler_path_survives_a_withheld_step() -> None:
    # AcceleratedOptimizer with a GradScaler swaps the inner optimizer's step during its own step;
    # the guard sits on the outer one (what HF's Trainer calls) and must not upset that dance
    accelerate = pytest.importorskip("accelerate")
    from accelerate.optimizer import AcceleratedOptimizer

    accelerate.Accelerator(cpu=True)  # the shared state AcceleratedOptimizer reads
    model, opt = setup()
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    wrapped = AcceleratedOptimizer(opt, device_placement=False, scaler=scaler)
    guard = StepGuard(wrapped)
    same = []
    for i in range(3):
        scaler.scale(loss_of(model)).backward()
        scaler.unscale_(opt)  # what HF's clipping does through accelerator.clip_grad_norm_
        guard.skip_next = i == 1
        before = model.weight.detach().clone()
        wrapped.step()
        wrapped.zero_grad()
        same.append(torch.equal(before, model.weight))
    assert same == [False, True, False] and not wrapped.step_was_skipped
    guard.close()
    assert "step" not in wrapped.__dict__ and opt.step == opt.__class__.step.__get__(opt)
