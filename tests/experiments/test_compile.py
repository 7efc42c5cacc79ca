"""The compile experiment and family on a tiny pipeline of our own: a compiled model fed variable
lengths recompiles per update under dynamic=False (and is found at the stage that varies), not under
dynamo's default; an eager model is "not compiled"; dynamo's caches are reset only when needed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import signalchain.experiments.compile as exp
from signalchain import StepOutput
from signalchain.experiments.context import Budget, Context
from signalchain.experiments.doctor import run_doctor, select_families

dynamo = pytest.importorskip("torch._dynamo")


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.out = nn.Linear(8, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


class CropPipeline:
    """Crops a fixed or a per-batch length; compiles the model with `compile_kw` (None: eager)."""

    name = "crops"

    def __init__(self, variable: bool, compile_kw: dict[str, Any] | None, loader: bool = True) -> None:
        self.variable, self.compile_kw = variable, compile_kw
        if not loader:
            self.loader = None

    def golden_batch(self, seed: int) -> dict[str, Any]:
        return {"length": 12, "seed": seed}

    def loader(self, split: str = "train") -> Iterator[dict[str, Any]]:
        for i in range(100):
            yield {"length": 10 + 3 * i if self.variable else 12, "seed": i}

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        m = Model()
        if self.compile_kw is not None:
            m.compile(backend="eager", **self.compile_kw)
        return m

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def step(self, model: nn.Module, batch: dict[str, Any], tap: Any) -> StepOutput:
        g = torch.Generator().manual_seed(batch["seed"])
        audio = tap("audio.original", torch.randn(2, 1, 400, generator=g))
        tap("crop", torch.tensor([[0, batch["length"]]] * 2))
        tokens = tap("tokens", (audio[:, 0, : batch["length"]].abs() * 10).long().clamp(max=15))
        logits = tap("logits", model(tokens))
        loss = tap("loss", nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()))
        return StepOutput(loss=loss)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def _ctx(p: Any, steps: int = 6) -> Context:
    return Context(pipeline=p, budget=Budget("economy", compile_steps=steps))


def test_static_compile_on_variable_lengths_recompiles_per_update_and_stops_once_settled() -> None:
    rec = exp.measure_compile(_ctx(CropPipeline(True, {"dynamic": False})))
    assert [c.step for c in rec.compilations] == [0, 1, 2, 3]  # 3 of 5 later updates: settled
    assert rec.shapes["tokens"][:2] == [[2, 10], [2, 13]]


def test_default_compile_on_variable_lengths_compiles_twice_over_all_updates() -> None:
    rec = exp.measure_compile(_ctx(CropPipeline(True, {})))
    assert rec.steps == 6 and [c.step for c in rec.compilations] == [0, 1]


def test_eager_model_stops_after_two_updates() -> None:
    rec = exp.measure_compile(_ctx(CropPipeline(True, None)))
    assert rec.steps == exp.IDLE_STEPS and rec.compilations == []


def test_without_a_loader_the_golden_batch_is_used() -> None:
    rec = exp.measure_compile(_ctx(CropPipeline(True, {"dynamic": False}, loader=False)))
    assert rec.steps == 6 and [c.step for c in rec.compilations] == [0]


def test_dynamo_is_reset_before_only_when_something_was_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = exp.reset_dynamo
    monkeypatch.setattr(exp, "reset_dynamo", lambda: calls.append(1) or real())
    exp.measure_compile(_ctx(CropPipeline(True, None)))
    assert calls == []  # nothing compiled before, nothing compiled here: nothing to reset
    exp.measure_compile(_ctx(CropPipeline(False, {})))
    assert calls == [1]  # compiled here: cleared after
    users = Model()
    users.compile(backend="eager")
    users(torch.zeros(1, 3, dtype=torch.long))  # the process holds compiled code already
    rec = exp.measure_compile(_ctx(CropPipeline(False, {})))
    assert len(calls) == 3 and "before" in rec.reset
    assert [c.step for c in rec.compilations] == [0]  # the model's own first compilation, not a "recompile"


@pytest.mark.parametrize("variable, kw, ids", [
    (True, {"dynamic": False}, ["perf.recompile"]),
    (False, {"dynamic": False}, []),
    (True, {}, []),
    (True, None, ["perf.not_compiled"]),
])
def test_the_family_fires_only_on_per_update_recompiles(variable: bool, kw: Any, ids: list[str]) -> None:
    r = run_doctor(CropPipeline(variable, kw), families=["compile"], budget=Budget("economy", compile_steps=6))
    assert [f.id for f in r.findings] == ids
    assert all(f.severity.value != "error" for f in r.findings)
    if ids == ["perf.recompile"]:
        assert r.findings[0].stage == "tokens"  # the first tapped value whose shape changes (crop is [B, 2])


def test_slow_symptom_runs_the_compile_family() -> None:
    assert "compile" in select_families(symptom="slow")[0]


def test_the_zoo_tallies_compile_findings_under_the_compile_family() -> None:
    from signalchain.experiments.scoring import family_of

    assert family_of({"id": "perf.recompile", "severity": "warning", "check": "checks.compile"}) == "compile"
