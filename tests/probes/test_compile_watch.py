"""CompileWatch on tiny compiled modules: a new graph per step under dynamic=False, one extra under
automatic dynamic shapes, graph breaks with their line, nothing for an eager module, taps' shapes."""

from __future__ import annotations

import pytest
import torch

import signalchain.probes.compile_watch as cw
from signalchain.probes.compile_watch import CompileWatch

dynamo = pytest.importorskip("torch._dynamo")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).mean(1)


class Breaking(Tiny):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum().item() > 1e9:  # a host read: dynamo breaks the graph here
            y = y * 2
        return y.mean(1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def _run(model: torch.nn.Module, lengths: list[int]) -> CompileWatch:
    watch = CompileWatch()
    tap = watch.tap_wrapper()
    for n in lengths:
        with watch.step():
            x = tap("tokens", torch.randn(2, n, 4))
            tap("caption", ["a", "b"])
            tap("loss", model(x).sum())
    return watch


def test_static_shapes_compile_a_new_graph_on_every_new_length() -> None:
    model = Tiny()
    model.compile(backend="eager", dynamic=False)
    rec = _run(model, [5, 6, 7, 8]).record
    assert rec.steps == 4 and [c.step for c in rec.compilations] == [0, 1, 2, 3]
    assert rec.compilations[0].reason is None
    assert all("size mismatch at index 1" in (c.reason or "") for c in rec.compilations[1:])
    assert {c.function for c in rec.compilations} == {"forward"}
    assert rec.compilations[0].location.endswith(f"test_compile_watch.py:{Tiny.forward.__code__.co_firstlineno}")
    assert {c.after_stage for c in rec.compilations} == {"caption"}  # compiled between the taps
    assert rec.shapes["tokens"] == [[2, 5, 4], [2, 6, 4], [2, 7, 4], [2, 8, 4]]
    assert rec.shapes["caption"] == [None] * 4 and rec.order == ["tokens", "caption", "loss"]


def test_automatic_dynamic_shapes_recompile_once() -> None:
    model = Tiny()
    model.compile(backend="eager")
    rec = _run(model, [5, 6, 7, 8]).record
    assert [c.step for c in rec.compilations] == [0, 1]


def test_fixed_shapes_compile_once_and_an_eager_module_never() -> None:
    model = Tiny()
    model.compile(backend="eager", dynamic=False)
    assert [c.step for c in _run(model, [5, 5, 5]).record.compilations] == [0]
    assert _run(Tiny(), [5, 6, 7]).record.compilations == []


def test_graph_breaks_are_seen_with_the_users_line() -> None:
    model = Breaking()
    model.compile(backend="eager")
    rec = _run(model, [5, 5]).record
    (brk,) = rec.graph_breaks
    assert "item()" in brk.reason and brk.step == 0
    line = Breaking.forward.__code__.co_firstlineno + 2
    assert brk.location is not None and brk.location.endswith(f"test_compile_watch.py:{line}")
    assert any(c.function.startswith(cw.RESUME_PREFIX) for c in rec.compilations)


def test_earlier_compilations_in_the_process_are_not_counted() -> None:
    other = Tiny()
    other.compile(backend="eager")
    other(torch.randn(2, 3, 4))
    assert cw.dynamo_state() > 0
    assert _run(Tiny(), [5, 6]).record.compilations == []


def test_without_dynamo_only_shapes_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cw, "_dynamo", lambda: None)
    watch = _run(Tiny(), [5, 6])
    assert watch.record.available is False and watch.record.steps == 2
    assert watch.record.shapes["tokens"] == [[2, 5, 4], [2, 6, 4]] and cw.dynamo_state() == 0


def test_without_compilation_metrics_the_frame_count_still_shows_compilations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamo.utils, "get_compilation_metrics", lambda: [])
    model = Tiny()
    model.compile(backend="eager", dynamic=False)
    rec = _run(model, [5, 6, 7]).record
    assert [c.step for c in rec.compilations] == [0, 1, 2] and {c.location for c in rec.compilations} == {"?"}


def test_the_recompile_limit_is_seen_and_judged_as_giving_up() -> None:
    from signalchain.checks.compile import judge_compile

    model = Tiny()
    model.compile(backend="eager", dynamic=False)
    limit = int(dynamo.config.recompile_limit)
    rec = _run(model, list(range(5, 5 + limit + 2))).record
    failed = [c for c in rec.compilations if c.failed]
    assert failed and "recompile limit" in (failed[0].failed or "") and failed[0].step == limit
    (f,) = [f for f in judge_compile(rec) if f.id == "perf.recompile"]
    assert f.evidence["gave_up"] is True and "eagerly" in f.message
