"""`signalchain.Monitor` in a user's own loop: silent when healthy, locating when not, never breaking it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import signalchain
from signalchain import Monitor, tap
from signalchain.monitor import NonFiniteError

torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self, bug: str | None = None):
        super().__init__()
        self.bug = bug
        self.enc = nn.Linear(6, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bug == "rsqrt":  # a hand-written RMS normalisation without eps: an all-zero row -> 0 * inf
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
        x = tap("features", x)
        return self.head(torch.tanh(self.enc(x)))


def batches(n: int, zero_row_at: int | None = None):
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        x = torch.randn(8, 6, generator=g)
        if i == zero_row_at:
            x[3] = 0.0  # a silent example
        yield x, torch.randint(0, 4, (8,), generator=g)


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return tap("loss", nn.functional.cross_entropy(model(x), y))


def train(model: nn.Module, monitor: Monitor, data, opt) -> list[bool]:
    ok = []
    for batch in data:
        with monitor.step(batch):
            loss = loss_fn(model, batch)
            loss.backward()
            ok.append(monitor.check(loss))
            if ok[-1]:
                opt.step()
            opt.zero_grad()
    return ok


def make(bug: str | None = None):
    torch.manual_seed(0)
    model = Net(bug)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_monitor_is_public_and_silent_on_a_healthy_loop() -> None:
    assert "Monitor" in signalchain.__all__ and signalchain.Monitor is Monitor
    model, opt = make()
    mon = Monitor(model, opt, replay=loss_fn)
    assert train(model, mon, batches(5), opt) == [True] * 5
    assert mon.findings == [] and mon.summary() == {"steps": 5, "fired": [], "skipped": 0, "scaler_skipped": 0,
                                                  "errors": 0}


def test_monitor_locates_the_first_bad_op_and_leaves_the_loop_state_alone() -> None:
    model, opt = make("rsqrt")
    mon = Monitor(model, opt, replay=loss_fn, on_finding=lambda f: None)
    ok = train(model, mon, batches(4, zero_row_at=2), opt)
    assert ok == [True, True, False, True] and mon.fired == [2]
    assert mon.summary() == {"steps": 4, "fired": [2], "skipped": 1, "scaler_skipped": 0, "errors": 2}
    first = next(f for f in mon.findings if f.id == "nonfinite.first")
    assert first.stage == "features" and first.evidence["op"] == "aten.rsqrt.default"
    assert first.evidence["module"] == "Net" and first.evidence["step"] == 2  # the root's own forward: its class
    assert any(f.id == "nonfinite.loss" for f in mon.findings)
    assert all(bool(torch.isfinite(q).all()) for q in model.parameters())  # the update was skipped


def test_without_a_replay_the_monitor_still_reports_the_step() -> None:
    model, opt = make("rsqrt")
    mon = Monitor(model, opt, on_finding=lambda f: None)
    train(model, mon, batches(3, zero_row_at=1), opt)
    (f,) = mon.findings
    assert f.id == "nonfinite.loss" and f.evidence["step"] == 1 and "replay=" in f.hint


def test_strict_monitor_raises_after_locating() -> None:
    model, opt = make("rsqrt")
    mon = Monitor(model, opt, replay=loss_fn, strict=True, on_finding=lambda f: None)
    with pytest.raises(NonFiniteError, match="step 0: nonfinite.first @ features"):
        train(model, mon, batches(1, zero_row_at=0), opt)


def test_monitor_failures_become_findings_not_exceptions() -> None:
    model, opt = make()

    def broken_callback(f):
        raise RuntimeError("logging is down")

    mon = Monitor(model, opt, replay=loss_fn, on_finding=broken_callback)
    with mon.step(None):
        assert mon.check("not a loss") is True  # the loop goes on
    assert [f.id for f in mon.findings] == ["internal.check_failed"]


class SignSGD(torch.optim.Optimizer):
    """A hand-written sign update, g / |g|: 0 / 0 = NaN wherever a gradient is exactly 0."""

    def __init__(self, params, lr: float = 0.01):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for q in group["params"]:
                if q.grad is not None:
                    q.add_(q.grad / q.grad.abs(), alpha=-group["lr"])


def test_snapshot_replays_an_update_that_poisons_the_weights() -> None:
    model, _ = make()
    opt = SignSGD(model.parameters())
    mon = Monitor(model, opt, replay=loss_fn, snapshot=True, scan_every=1, on_finding=lambda f: None)
    data = [(x.index_fill(1, torch.tensor([5]), 0.0), y) for x, y in batches(2)]  # a feature that is always 0
    train(model, mon, data, opt)
    state = next(f for f in mon.findings if f.id == "nonfinite.state")
    assert state.stage == "optimizer" and state.evidence["phase"] == "optimizer"
    assert state.evidence["target"] == "enc.weight.grad" and state.evidence["cause"] == "division_by_zero"
    assert "exact zeros" in state.message


def test_monitor_counts_skipped_steps_of_a_scaler() -> None:
    model, _ = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**60)  # scaled float16 gradients overflow
    mon = Monitor(model, opt, scaler=scaler, replay=loss_fn, on_finding=lambda f: None)
    for batch in batches(10):
        with mon.step(batch):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = loss_fn(model, batch)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            assert mon.check(loss)  # an overflowing scaled gradient is the scaler's to skip
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert mon.skipped >= 8 and [f.id for f in mon.findings] == ["amp.steps_skipped"]


def test_monitor_measures_the_update_ratio_and_keeps_a_history() -> None:
    model, opt = make()
    mon = Monitor(model, opt, replay=loss_fn, ratio_every=2)
    train(model, mon, batches(5), opt)
    h = mon.history
    assert len(h["loss"]) == len(h["grad_norm"]) == 5 and mon.losses is h["loss"]
    assert h["ratio_steps"] == [1.0, 3.0, 5.0] and len(h["update_ratio"]) == 3
    # SGD: |Δθ| = lr · |g| exactly on the measured step, so the ratio is checkable independently
    params = [q.detach().clone() for q in model.parameters()]
    before = float(torch.cat([q.flatten() for q in params]).norm())
    assert all(0 < r < 1 for r in h["update_ratio"])
    assert h["update_ratio"][-1] == pytest.approx(0.1 * h["grad_norm"][-1] / before, rel=0.05)
    assert mon.findings == []


def loop_with(model: nn.Module, opt: torch.optim.Optimizer, mon: Monitor, *, clear_before_step: bool = False,
              accumulate: int = 1) -> None:
    for i, batch in enumerate(batches(6)):
        with mon.step(batch):
            loss = loss_fn(model, batch) / accumulate
            loss.backward()
            mon.check(loss)
            if clear_before_step:
                opt.zero_grad()  # the bug: gradients cleared between backward and step
            if (i + 1) % accumulate == 0:
                opt.step()
                opt.zero_grad()


@pytest.mark.parametrize("bug", ["clear_before_step", "lr_zero"])
def test_an_optimizer_step_that_changes_nothing_is_said_once(bug: str) -> None:
    model, opt = make()
    if bug == "lr_zero":
        for g in opt.param_groups:
            g["lr"] = 0.0
    mon = Monitor(model, opt, ratio_every=1, on_finding=lambda f: None)
    loop_with(model, opt, mon, clear_before_step=bug == "clear_before_step")
    skipped = [f for f in mon.findings if f.id == "optim.step_skipped"]
    assert len(skipped) == 1 and skipped[0].stage == "optimizer" and skipped[0].evidence["grad_norm"] > 0
    assert mon.history["update_ratio"] == [0.0] * 6


def test_gradient_accumulation_is_not_a_skipped_step() -> None:
    model, opt = make()
    mon = Monitor(model, opt, ratio_every=1)
    loop_with(model, opt, mon, accumulate=3)
    ratios = mon.history["update_ratio"]
    assert ratios[0] == ratios[1] == 0.0 and ratios[2] > 0 and mon.findings == []
    mon.close()
    assert mon._hook is None


def test_a_run_that_stays_broken_is_replayed_once_and_counted_every_step() -> None:
    model, opt = make("rsqrt")
    mon = Monitor(model, opt, replay=loss_fn, on_finding=lambda f: None)
    zero = [(x.index_fill(0, torch.tensor([1]), 0.0), y) for x, y in batches(4)]  # every batch has a silent row
    assert train(model, mon, zero, opt) == [False] * 4
    assert mon.fired == [0, 1, 2, 3] and len(mon.reports) == 1
    assert len([f for f in mon.findings if f.id == "nonfinite.first"]) == 1


class Wrapped(torch.optim.Optimizer):
    """A wrapper in the style of Accelerate's `AcceleratedOptimizer`: a `torch.optim.Optimizer` subclass
    that never calls its `__init__` (so `register_step_post_hook` on it raises) and holds the real one."""

    def __init__(self, inner: torch.optim.Optimizer) -> None:  # no super().__init__, as Accelerate's
        self.optimizer = inner

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def step(self, closure=None):
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state) -> None:
        self.optimizer.load_state_dict(state)


def test_a_wrapped_optimizer_is_hooked_through_its_inner_one() -> None:
    """Monitor(model, accelerator.prepare(optimizer)) raised AttributeError out of its constructor: the
    hook went on the wrapper, and the failure's own report read a field not set yet."""
    model, opt = make()
    mon = Monitor(model, Wrapped(opt), ratio_every=1, on_finding=lambda f: None)
    assert mon.findings == [] and mon._hook is not None
    loop_with(model, Wrapped(opt), mon, clear_before_step=True)  # steps counted inside: the skip is seen
    assert [f.id for f in mon.findings] == ["optim.step_skipped"]


def test_a_real_accelerated_optimizer_is_watched_silently() -> None:
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    model, opt = make()
    try:
        wrapped = Accelerator(cpu=True).prepare_optimizer(opt)
        mon = Monitor(model, wrapped, replay=loss_fn, ratio_every=1)
        assert train(model, mon, batches(3), wrapped) == [True] * 3
    finally:  # the process-wide state an Accelerator leaves would decide later tests' precision
        AcceleratorState._reset_state(reset_partial_state=True)
    assert mon.findings == [] and all(r > 0 for r in mon.history["update_ratio"])


def test_an_optimizer_hook_that_fails_is_a_finding_not_an_exception() -> None:
    class Refuses(torch.optim.SGD):
        def register_step_post_hook(self, hook):
            raise RuntimeError("no hooks here")

    model = Net()
    mon = Monitor(model, Refuses(model.parameters(), lr=0.1), on_finding=lambda f: None)
    assert [f.id for f in mon.findings] == ["internal.check_failed"]
    assert "no hooks here" in mon.findings[0].message
