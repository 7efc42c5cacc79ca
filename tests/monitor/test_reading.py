"""`monitor/_reading.py`: a loss is judged on every element, against numpy as the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch import nn

from signalchain import Monitor
from signalchain.monitor._reading import read_loss, reduced, scaler_guards, visible

torch.set_num_threads(1)

floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
losses = hnp.arrays(dtype=st.sampled_from([np.float32, np.float64]),
                    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5), elements=floats)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(losses)
def test_read_loss_judges_every_element_like_numpy(a: np.ndarray) -> None:
    r = read_loss(torch.from_numpy(a.copy()))
    finite = bool(np.isfinite(a).all())
    assert r.finite is finite and r.elements == a.size
    assert r.nonfinite == int((~np.isfinite(a)).sum())
    if finite:
        assert r.value == pytest.approx(float(a.astype(np.float64).mean()), rel=1e-6, abs=1e-30)
    else:
        assert not math.isfinite(r.value)


@pytest.mark.parametrize("value,finite", [
    (1.5, True), (float("nan"), False), (float("-inf"), False), (3, True), (np.float32(2.0), True),
    (np.array([1.0, np.nan]), False), ({"loss": torch.tensor(float("inf"))}, False), ({"loss": 0.5}, True),
    (torch.tensor([3, 4]), True),
])
def test_read_loss_reads_numbers_and_containers(value: object, finite: bool) -> None:
    assert read_loss(value).finite is finite


@pytest.mark.parametrize("value", [None, "0.1", b"x", True, object(), {"total": 1.0}, [1.0, 2.0],
                                   torch.zeros(0), torch.tensor([True])],
                         ids=lambda v: type(v).__name__)
def test_what_read_loss_cannot_read_is_said_not_guessed(value: object) -> None:
    r = read_loss(value)
    assert r.finite is None and r.reason and "loss passed to check()" in r.reason


@settings(max_examples=40, deadline=None, derandomize=True)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), data=st.data())
def test_check_refuses_any_unreduced_loss_with_a_bad_element(shape: tuple[int, ...], data: st.DataObject) -> None:
    """A [*shape] loss with one NaN/inf element (gradients finite): check says False and nothing moves;
    without one: True, and the update happens."""
    n = math.prod(shape)
    where = data.draw(st.integers(0, n - 1))
    bad = data.draw(st.sampled_from([None, float("nan"), float("inf"), float("-inf")]))
    torch.manual_seed(0)
    model = nn.Linear(6, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    mon = Monitor(model, opt, replay=lambda m, b: nn.functional.cross_entropy(
        m(b[0]).reshape(-1, 4), b[1].reshape(-1), reduction="none"), on_finding=lambda f: None)
    x, y = torch.randn(*shape, 6), torch.randint(0, 4, shape)
    with mon.step((x, y)):
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 4), y.reshape(-1), reduction="none").reshape(shape)
        if bad is not None:
            offset = torch.zeros(shape)
            offset.view(-1)[where] = bad
            loss = loss + offset
        loss.mean().backward()
        before = [q.detach().clone() for q in model.parameters()]
        ok = mon.check(loss)
        if ok:
            opt.step()
        opt.zero_grad()
    moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert ok is (bad is None) and moved is ok
    assert all(bool(torch.isfinite(q).all()) for q in model.parameters())


def test_only_an_enabled_torch_grad_scaler_is_trusted_with_an_overflow() -> None:
    class Sub(torch.amp.GradScaler):
        def step(self, optimizer, *args, **kwargs):
            return optimizer.step()

    class Duck:
        def is_enabled(self) -> bool:
            return True

        def step(self, opt) -> None:
            opt.step()

    assert scaler_guards(torch.amp.GradScaler("cpu"))
    assert not scaler_guards(torch.amp.GradScaler("cpu", enabled=False))
    assert not scaler_guards(Sub("cpu")) and not scaler_guards(Duck()) and not scaler_guards(None)


def test_reduced_makes_an_unreduced_replay_loss_scalar_and_keeps_its_nan() -> None:
    loss = torch.tensor([[1.0, float("nan")], [2.0, 3.0]])
    assert reduced(loss).dim() == 0 and math.isnan(float(reduced(loss)))
    out = reduced({"loss": loss, "logits": 1})
    assert out["loss"].dim() == 0 and out["logits"] == 1
    assert reduced(torch.tensor(2.0)).item() == 2.0


def test_visible_sees_gradients_and_parameters_by_name() -> None:
    model = nn.Linear(2, 2)
    model.weight.grad = torch.tensor([[0.0, float("inf")], [0.0, 0.0]])
    with torch.no_grad():
        model.bias[0] = float("nan")
    assert visible(torch.tensor(1.0), model) == (True, ["weight"], ["bias"])
    assert visible(None, model)[0] is None
