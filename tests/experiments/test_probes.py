"""The probes plane: the `Probe` base (pause, module stack, handle removal) and `collect`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from signalchain.probes.base import Probe
from signalchain.probes.collect import collect
from signalchain.probes.graph_watch import GraphWatch
from signalchain.probes.non_finite_watch import NonFiniteWatch
from signalchain.probes.op_recorder import OpRecorder


class _Counting(Probe):
    """A probe that notes, per tap, whether it ran paused and which module was running."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, bool, str]] = []

    def on_tap(self, stage, value):
        self.seen.append((stage, self.paused, self.modules[-1] if self.modules else ""))


class _Tapping(nn.Module):
    def __init__(self, tap):
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.tap = tap

    def forward(self, x):
        return self.tap("inner.out", self.inner(x))


def _forward_hooks() -> int:
    return len(torch.nn.modules.module._global_forward_hooks) + len(torch.nn.modules.module._global_forward_pre_hooks)


def test_probe_counts_taps_pauses_while_ours_runs_and_keeps_the_module_path() -> None:
    probe = _Counting()
    inner_paused: list[bool] = []

    def inner(stage, value, /, **meta):
        inner_paused.append(probe.paused)
        return value

    tap = probe.tap_wrapper(inner)
    model = _Tapping(tap)
    with probe.tracking_modules(model):
        y = model(torch.ones(1, 2))
    assert y.shape == (1, 2)  # the tap returns the value
    assert probe.taps == 1
    assert probe.seen == [("inner.out", True, "_Tapping")]  # after `inner` returned: the root, by its class
    assert inner_paused == [True]  # the inner tap is our recorder by default
    assert probe.paused is False and probe.modules == []
    with probe.ours():
        with probe.ours():
            assert probe.paused
        assert probe.paused  # nested: the outer pause still holds
    assert not probe.paused


def test_module_stack_names_the_running_module() -> None:
    probe = _Counting()
    model = nn.Sequential(nn.Linear(2, 2), _Tapping(probe.tap_wrapper()))
    with probe.tracking_modules(model):
        model(torch.ones(1, 2))
    assert probe.seen == [("inner.out", True, "1")]


def test_handles_are_removed_on_exit_even_when_the_step_raises() -> None:
    probe = _Counting()
    model = nn.Linear(2, 2)
    before = _forward_hooks()
    with pytest.raises(RuntimeError, match="boom"):
        with probe.attached(), probe.tracking_modules(model):
            probe.hook(model.register_forward_hook(lambda m, a, o: None))
            assert _forward_hooks() == before + 2 and len(model._forward_hooks) == 1
            raise RuntimeError("boom")
    assert _forward_hooks() == before
    assert len(model._forward_hooks) == 0


def test_non_finite_watch_removes_its_hooks_when_the_step_raises() -> None:
    model = nn.Linear(2, 2)
    watch = NonFiniteWatch()
    before = _forward_hooks()
    hooked = watch.hook(model.weight.register_post_accumulate_grad_hook(lambda q: None))
    with pytest.raises(ValueError):
        with watch.active(model):
            assert _forward_hooks() == before + 2
            raise ValueError("the step refused")
    assert _forward_hooks() == before
    assert hooked not in watch._handles and not watch._handles


def test_watchers_do_not_see_the_inner_tap_of_signalchain() -> None:
    rec = OpRecorder(span=(0, 99))
    model = nn.Linear(2, 2)

    def ours(stage, value, /, **meta):
        value.detach().double().sum()  # our recording's own ops
        return value

    with torch.no_grad(), rec.tracking_modules(model), rec:
        tap = rec.tap_wrapper(ours)
        tap("x", model(torch.ones(1, 2)))
    assert rec.taps == 1
    assert all("double" not in o.op and "_to_copy" not in o.op for o in rec.ops)  # ours was not recorded
    assert any("addmm" in o.op for o in rec.ops)  # the step's op was


def test_graph_watch_orders_stages_and_ignores_the_recording_copy() -> None:
    watch = GraphWatch()
    w = torch.ones(2, requires_grad=True)

    def ours(stage, value, /, **meta):
        value.detach().numpy()  # our copy out of the graph: not a break
        return value

    tap = watch.tap_wrapper(ours)
    with watch:
        tap("a", w * 2)
        tap("b", w * 3)
    assert watch.breaks == []
    assert list(watch.stage_order) == ["a", "b"] and watch.stage_order["a"] < watch.stage_order["b"]


class _Stepper:
    """A pipeline step that taps four stages, records how far it got, and can raise."""

    def __init__(self, fail_at: str | None = None):
        self.fail_at = fail_at
        self.reached: list[str] = []

    def step(self, model, batch, tap):
        for stage in ("audio.original", "caption", "tokens", "loss"):
            if stage == self.fail_at:
                raise KeyError(stage)
            self.reached.append(stage)
            tap(stage, batch[stage])
            if stage == "audio.original":
                batch[stage] *= 0  # the step edits its value in place after the tap
        return "done"


def _batch() -> dict:
    return {"audio.original": np.ones((1, 1, 4), np.float32), "caption": ["a"], "tokens": np.arange(3),
            "loss": 0.5}


def test_collect_stops_after_the_stage_and_returns_the_values() -> None:
    p = _Stepper()
    got = collect(p, None, _batch(), {"audio.original", "tokens"}, stop_after="tokens", copy=True)
    assert got.stopped and got.out is None
    assert p.reached == ["audio.original", "caption", "tokens"]  # the loss was never computed
    assert [t.stage for t in got.taps] == ["audio.original", "tokens"]
    assert float(got.first("audio.original").value.sum()) == 4.0  # copied at tap time, before the edit
    assert got.first("audio.original").dtype == np.float32 and "caption" not in got


def test_collect_runs_the_whole_step_without_a_stop_and_takes_a_predicate() -> None:
    p = _Stepper()
    got = collect(p, None, _batch(), lambda s: s != "caption")
    assert not got.stopped and got.out == "done"
    assert [t.stage for t in got.taps] == ["audio.original", "tokens", "loss"]
    p = _Stepper()
    got = collect(p, None, _batch(), None, stop_after=lambda stage, so_far: len(so_far) == 2)
    assert got.stopped and [t.stage for t in got.taps] == ["audio.original", "caption"]


def test_collect_lets_a_step_error_propagate() -> None:
    p = _Stepper(fail_at="tokens")
    with pytest.raises(KeyError, match="tokens"):
        collect(p, None, _batch(), {"tokens"}, stop_after="loss")
    assert p.reached == ["audio.original", "caption"]


def test_collect_runs_under_no_grad_when_asked() -> None:
    class Grad:
        def step(self, model, batch, tap):
            return tap("loss", torch.is_grad_enabled())

    assert collect(Grad(), None, None, None, no_grad=True).out is False
    assert collect(Grad(), None, None, None).out is True
