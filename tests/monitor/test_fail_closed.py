"""The Monitor fails closed: whatever the loop hands it, a NaN step is never applied and check() never raises.

Every case drives a small loop the way the README documents it (check after backward, skip the update
when it says False) over four batches, the third of which is the NaN step, and asserts:
- check() never raises (the loop would stop);
- the NaN step is refused (check() says False) and the parameters after it equal those before it;
- no step that was applied wrote a non-finite value into a parameter that was finite;
- training goes on: the healthy steps are applied;
- where the Monitor could not judge, a finding says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from signalchain import Monitor
from signalchain.monitor import monitor as monitor_module

torch.set_num_threads(1)
NAN = float("nan")
NAN_AT = 2  # the step whose values go non-finite
STEPS = 4


class Net(nn.Module):
    """A tiny classifier; `bug` decides how the flagged batch goes non-finite."""

    def __init__(self, bug: str = "input"):
        super().__init__()
        self.bug = bug
        self.enc = nn.Linear(6, 16)
        self.head = nn.Linear(16, 4)
        self.spare = nn.Parameter(torch.zeros(3))  # never used by forward: no gradient

    def forward(self, x: torch.Tensor, flagged: bool = False) -> torch.Tensor:
        h = torch.tanh(self.enc(x))
        if flagged and self.bug == "grad":  # a "safe" sqrt: finite forward, 0 / (2·sqrt(<0)) = NaN backward
            h = torch.where(h > 0, h.sqrt(), torch.zeros_like(h))
        if flagged and self.bug == "weights":  # a forward that writes into its own weights
            with torch.no_grad():
                self.head.weight[0, 0] = NAN
        return self.head(h)


def batches(bug: str, shape: tuple[int, ...] = (8,)) -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(STEPS):
        x = torch.randn(*shape, 6, generator=g)
        if i == NAN_AT and bug == "input":
            x.view(-1, 6)[1, 2] = NAN  # one bad value in one example
        out.append((x, torch.randint(0, 4, shape, generator=g), i == NAN_AT))
    return out


def per_example(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y, flagged = batch
    logits = model(x, flagged)
    return nn.functional.cross_entropy(logits.reshape(-1, 4), y.reshape(-1), reduction="none").reshape(y.shape)


def mean_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    return per_example(model, batch).mean()


@dataclasses.dataclass
class Record:
    ok: bool
    before: list[torch.Tensor]
    after: list[torch.Tensor]


def params(model: nn.Module) -> list[torch.Tensor]:
    return [q.detach().clone() for q in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(bool(((x == y) | (x.isnan() & y.isnan())).all()) for x, y in zip(a, b))


def newly_nonfinite(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    return any(bool((torch.isfinite(x) & ~torch.isfinite(y)).any()) for x, y in zip(before, after))


def drive(model: nn.Module, opt: Any, mon: Monitor, data: list, *, loss_of: Callable = per_example,
          passed: Callable[[torch.Tensor], Any] = lambda loss: loss, scaler: Any = None,
          between: Callable[[int], None] | None = None) -> list[Record]:
    """The documented loop: forward, backward, check, update only when check() says True."""
    out = []
    for i, batch in enumerate(data):
        if between is not None:
            between(i)
        with mon.step(batch):
            loss = loss_of(model, batch)
            total = loss.mean() if loss.dim() else loss
            (scaler.scale(total) if scaler is not None else total).backward()
            if scaler is not None:
                scaler.unscale_(opt)
            before = params(model)
            ok = mon.check(passed(loss))  # must never raise
            assert isinstance(ok, bool)
            if ok:
                try:
                    scaler.step(opt) if scaler is not None else opt.step()
                except RuntimeError as exc:  # an optimizer whose step raises: the user's exception, not ours
                    assert "optimizer is down" in str(exc)
            if scaler is not None:
                scaler.update()
            opt.zero_grad()
        out.append(Record(ok, before, params(model)))
    return out


def assert_closed(records: list[Record], mon: Monitor, refused: set[int] = frozenset({NAN_AT})) -> None:
    applied_nan_steps = 0
    for i, r in enumerate(records):
        if i in refused and (r.ok or not same(r.before, r.after)):
            applied_nan_steps += 1
        if not r.ok:
            assert same(r.before, r.after), f"step {i}: refused, yet the parameters changed"
        assert not newly_nonfinite(r.before, r.after), f"step {i}: an applied step wrote a NaN"
    assert applied_nan_steps == 0
    assert any(r.ok and not same(r.before, r.after) for i, r in enumerate(records) if i not in refused), \
        "the healthy steps must still train"
    assert NAN_AT in mon.fired


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def make(bug: str = "input") -> Net:
    torch.manual_seed(0)
    return Net(bug)


def quiet(model: nn.Module, opt: Any, **kw: Any) -> Monitor:
    return Monitor(model, opt, on_finding=lambda f: None, **kw)


# ---- unreduced losses: judged on every element ---------------------------------------------------------

@pytest.mark.parametrize("shape", [(8,), (4, 5), (2, 3, 4), (1, 8)], ids=str)
@pytest.mark.parametrize("bug", ["input", "element_nan", "element_inf", "element_neginf"])
def test_an_unreduced_loss_with_one_bad_element_is_a_nan_step(shape: tuple[int, ...], bug: str) -> None:
    model = make()
    opt = sgd(model)
    value = {"element_nan": NAN, "element_inf": math.inf, "element_neginf": -math.inf}.get(bug)

    def loss_of(m: nn.Module, batch: Any) -> torch.Tensor:
        loss = per_example(m, batch)
        if value is not None and batch[2]:  # one element bad, the gradients still finite
            offset = torch.zeros_like(loss)
            offset.view(-1)[-1] = value
            loss = loss + offset
        return loss

    mon = quiet(model, opt, replay=per_example)
    records = drive(model, opt, mon, batches("input" if bug == "input" else "none", shape), loss_of=loss_of)
    assert_closed(records, mon)
    f = next(f for f in mon.findings if f.id == "nonfinite.loss")
    assert f.evidence["step"] == NAN_AT
    assert not math.isfinite(mon.history["loss"][NAN_AT]) and len(mon.history["loss"]) == STEPS


# ---- a loss that is not a tensor ------------------------------------------------------------------------

LOSS_FORMS: dict[str, Callable[[torch.Tensor], Any]] = {
    "float": lambda loss: float(loss.mean()),
    "dict_with_loss": lambda loss: {"loss": loss.mean(), "acc": 0.5},
    "dict_without_loss": lambda loss: {"total": loss.mean()},
    "none": lambda loss: None,
    "string": lambda loss: "nan-ish",
    "object": lambda loss: object(),
    "empty_tensor": lambda loss: loss[:0],
    "bool_tensor": lambda loss: loss > 0,
}


@pytest.mark.parametrize("form", sorted(LOSS_FORMS))
def test_a_loss_that_is_not_a_tensor_still_refuses_the_nan_step(form: str) -> None:
    model = make()
    opt = sgd(model)
    mon = quiet(model, opt, replay=mean_loss)
    records = drive(model, opt, mon, batches("input"), passed=LOSS_FORMS[form])
    assert_closed(records, mon)
    if form not in ("float", "dict_with_loss"):  # unreadable: judged on gradients and weights, and said so
        f = next(f for f in mon.findings if f.id == "internal.check_failed")
        assert "could not judge the loss" in f.message and f.evidence["reason"]
        assert mon.unjudged == list(range(STEPS))


# ---- optimizers that are only duck-typed, or broken ------------------------------------------------------

class DuckSGD:
    """A hand-rolled optimizer: param_groups and step, nothing else torch's have."""

    def __init__(self, model: nn.Module, lr: float = 0.1, groups: bool = True, raising: bool = False):
        self.params = list(model.parameters())
        if groups:
            self.param_groups = [{"params": self.params, "lr": lr}]
        self.lr, self.raising = lr, raising

    @torch.no_grad()
    def step(self) -> None:
        for q in self.params:
            if q.grad is not None:
                q.add_(q.grad, alpha=-self.lr)
        if self.raising:
            raise RuntimeError("optimizer is down (after its update)")

    def zero_grad(self) -> None:  # no set_to_none argument
        for q in self.params:
            q.grad = None


class RaisingSGD(torch.optim.SGD):
    def step(self, closure: Any = None) -> Any:
        raise RuntimeError("optimizer is down")


OPTIMIZERS: dict[str, Callable[[nn.Module], Any]] = {
    "no_state_dict": lambda m: DuckSGD(m),
    "no_param_groups": lambda m: DuckSGD(m, groups=False),
    "step_raises_after_update": lambda m: DuckSGD(m, raising=True),
    "torch_step_raises": lambda m: RaisingSGD(m.parameters(), lr=0.1),
}


@pytest.mark.parametrize("snapshot", [False, True], ids=["plain", "snapshot"])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_an_odd_optimizer_does_not_open_the_monitor(kind: str, snapshot: bool) -> None:
    model = make()
    opt = OPTIMIZERS[kind](model)
    mon = quiet(model, opt, replay=mean_loss, snapshot=snapshot, scan_every=1 if snapshot else 0)
    records = drive(model, opt, mon, batches("input"))
    if kind == "torch_step_raises":  # nothing ever trains: the step never happens
        assert [r.ok for r in records] == [True, True, False, True]
        assert all(same(r.before, r.after) for r in records) and NAN_AT in mon.fired
    else:
        assert_closed(records, mon)
    assert any(f.id in ("nonfinite.first", "nonfinite.input", "nonfinite.loss") for f in mon.findings)


# ---- parameters that go non-finite; gradients that do while the loss does not -----------------------------

def test_a_forward_that_poisons_its_weights_is_refused() -> None:
    model = make("weights")
    opt = sgd(model)
    mon = quiet(model, opt, replay=mean_loss)
    assert_closed(drive(model, opt, mon, batches("weights")), mon)


def test_an_unreadable_loss_with_a_non_finite_parameter_is_refused() -> None:
    model = make()
    opt = sgd(model)
    mon = quiet(model, opt, replay=mean_loss)

    def poison(i: int) -> None:
        if i == NAN_AT:
            with torch.no_grad():
                model.spare[1] = NAN  # a parameter the forward never reads: loss and gradients stay finite

    records = drive(model, opt, mon, batches("none"), passed=lambda loss: None, between=poison)
    assert [r.ok for r in records] == [True, True, False, False]  # the weights stay non-finite
    assert all(same(r.before, r.after) for r in records[NAN_AT:])
    assert any(f.id == "nonfinite.state" and "spare" in f.message for f in mon.findings)


def test_nan_gradients_with_a_finite_loss_are_refused() -> None:
    model = make("grad")
    opt = sgd(model)
    mon = quiet(model, opt, replay=mean_loss)
    records = drive(model, opt, mon, batches("grad"), loss_of=mean_loss)
    assert_closed(records, mon)
    assert math.isfinite(mon.history["loss"][NAN_AT]) and not math.isfinite(mon.history["grad_norm"][NAN_AT])


# ---- an exception inside the Monitor's own measurement ---------------------------------------------------

def boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("internal measurement exploded")


INTERNALS = ["norm_of", "read_loss", "nonfinite_names", "judge_locate", "replay_step", "scaler_guards",
             "scan_state", "Snapshot.take"]


@pytest.mark.parametrize("loss_form", ["tensor", "none"])
@pytest.mark.parametrize("internal", INTERNALS)
def test_an_exception_inside_the_monitor_fails_closed(monkeypatch: pytest.MonkeyPatch, internal: str,
                                                      loss_form: str) -> None:
    if internal == "Snapshot.take":
        monkeypatch.setattr(monitor_module.Snapshot, "take", classmethod(boom))
    else:
        monkeypatch.setattr(monitor_module, internal, boom)
    model = make()
    opt = sgd(model)
    mon = quiet(model, opt, replay=mean_loss, snapshot=True, scan_every=1)
    records = drive(
        model, opt, mon, batches("input"), passed=(lambda loss: None) if loss_form == "none" else (lambda x: x)
    )
    assert_closed(records, mon)
    assert mon.findings and len(mon.history["loss"]) == len(mon.history["grad_norm"]) == STEPS


@pytest.mark.parametrize("replay", ["raises", "returns_none"])
def test_a_replay_that_fails_keeps_the_verdict_and_shows_its_error(replay: str) -> None:
    def broken(m: nn.Module, batch: Any) -> Any:
        if replay == "raises":
            raise KeyError("the replay reads batch['x'], the loop's batches are tuples")
        return None

    model = make()
    opt = sgd(model)
    mon = quiet(model, opt, replay=broken)
    assert_closed(drive(model, opt, mon, batches("input")), mon)
    f = next(f for f in mon.findings if f.id == "nonfinite.loss")
    expected = "batch['x']" if replay == "raises" else "returned None"
    assert expected in f.message and expected in f.evidence["replay_error"] and "fix the replay" in f.hint


# ---- a scaler that lies ---------------------------------------------------------------------------------

class DuckScaler:
    """Looks like a GradScaler, but its step applies whatever gradients there are."""

    def __init__(self, scale: Any = 1024.0, raising: bool = False):
        self.value, self.raising = scale, raising

    def get_scale(self) -> Any:
        if self.raising:
            raise RuntimeError("scale unavailable")
        return self.value

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def step(self, opt: Any) -> None:
        opt.step()

    unscale_ = update = lambda self, *args: None  # noqa: E731


class EagerScaler(torch.amp.GradScaler):
    """A GradScaler subclass whose step never skips."""

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step()


SCALERS: dict[str, Callable[[], Any]] = {
    "duck": lambda: DuckScaler(),
    "duck_nan_scale": lambda: DuckScaler(scale=NAN),
    "duck_garbage_scale": lambda: DuckScaler(scale="big"),
    "duck_get_scale_raises": lambda: DuckScaler(raising=True),
    "torch_disabled": lambda: torch.amp.GradScaler("cpu", enabled=False),
    "torch_subclass_never_skips": lambda: EagerScaler("cpu"),
}


@pytest.mark.parametrize("kind", sorted(SCALERS))
def test_a_scaler_that_lies_is_not_trusted_with_a_nan(kind: str) -> None:
    model = make("grad")
    opt = sgd(model)
    scaler = SCALERS[kind]()
    mon = quiet(model, opt, scaler=scaler, replay=mean_loss)
    assert_closed(drive(model, opt, mon, batches("grad"), loss_of=mean_loss, scaler=scaler), mon)


def test_an_honest_grad_scaler_is_left_the_overflow_and_skips_it() -> None:
    model = make("grad")
    opt = sgd(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    mon = quiet(model, opt, scaler=scaler, replay=mean_loss)
    records = drive(model, opt, mon, batches("grad"), loss_of=mean_loss, scaler=scaler)
    assert [r.ok for r in records] == [True] * STEPS  # the scaler's to skip, as documented
    assert same(records[NAN_AT].before, records[NAN_AT].after)  # ...and it did
    assert not any(newly_nonfinite(r.before, r.after) for r in records) and mon.skipped == 1


# ---- strict mode: the one place an exception reaches the loop ------------------------------------------------

@pytest.mark.parametrize("case", ["unreduced", "replay_raises", "internal"])
def test_strict_raises_non_finite_error_on_the_nan_step_only(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    from signalchain.monitor import NonFiniteError

    def broken(m: nn.Module, batch: Any) -> Any:
        raise KeyError("no such field")

    if case == "internal":
        monkeypatch.setattr(monitor_module, "norm_of", boom)
    model = make()
    opt = sgd(model)
    mon = Monitor(model, opt, replay=broken if case == "replay_raises" else per_example, strict=True,
                  on_finding=lambda f: None)
    data = batches("input")
    if case == "internal":  # strict surfaces the monitor's own failure on a healthy step...
        with pytest.raises(RuntimeError, match="internal measurement exploded"):
            drive(model, opt, mon, data[:1])
    else:
        drive(model, opt, mon, data[:NAN_AT])  # the healthy steps pass, strict or not
    with pytest.raises(NonFiniteError, match=f"step {mon.steps}: .*(not finite|non-finite)"):  # ...a NaN step
        drive(model, opt, mon, data[NAN_AT:NAN_AT + 1])
