"""The hook probes moved out of the experiments: `EmbeddingInputs`, `ModuleCalls`, `StepGrads`, `NonFiniteGrads` and
`StepCalls` record what they watch and leave no hook behind, even when the step raises."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from signalchain.probes.embedding_inputs import EmbeddingInputs
from signalchain.probes.module_calls import ModuleCalls
from signalchain.probes.non_finite_grads import NonFiniteGrads
from signalchain.probes.step_calls import StepCalls
from signalchain.probes.step_grads import StepGrads


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


def _module_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _step_hooks(opt: torch.optim.Optimizer) -> int:
    return len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks)


def test_embedding_inputs_records_ids_and_outputs_and_unhooks_on_error() -> None:
    model = _Tiny()
    ids = torch.tensor([[1, 2, 3]])
    with EmbeddingInputs(model, outputs=True).attached_to() as probe:
        model(ids)
    (call,) = probe.calls
    assert call.name == "emb" and torch.equal(call.ids, ids) and call.output is not None
    assert call.output.shape == (1, 3, 4) and _module_hooks(model) == 0
    with pytest.raises(IndexError):
        with EmbeddingInputs(model).attached_to() as probe:
            model(torch.tensor([[11]]))  # out of range: the lookup never returns
    assert [c.output for c in probe.calls] == [None] and _module_hooks(model) == 0


def test_module_calls_counts_every_forward_and_unhooks_on_error() -> None:
    model = _Tiny()
    names: list[str] = []
    with pytest.raises(RuntimeError, match="boom"):
        with ModuleCalls(model, on_call=lambda name, module, output: names.append(name)).attached_to() as calls:
            model(torch.tensor([[1, 2]]))
            raise RuntimeError("boom")
    assert calls.count == 3 and names == ["emb", "out", ""] and _module_hooks(model) == 0


def test_step_grads_sees_the_gradients_at_step_time_and_unhooks_on_error() -> None:
    model = _Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="boom"):
        with StepGrads(opt).attached_to() as probe:
            model(torch.tensor([[1, 2]])).sum().backward()
            opt.step()
            opt.zero_grad()
            opt.step()  # gradients cleared before this step are lost to it
            raise RuntimeError("boom")
    assert probe.at_step == [{"with_grad": 3, "params": 3}, {"with_grad": 0, "params": 3}]
    assert _step_hooks(opt) == 0


def test_step_calls_counts_steps_until_closed() -> None:
    model = _Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[int] = []
    probe = StepCalls(opt, on_step=lambda: seen.append(1))
    opt.step()
    opt.step()
    probe.close()
    opt.step()
    assert probe.count == 2 and seen == [1, 1] and _step_hooks(opt) == 0


def test_non_finite_grads_names_the_parameter_and_unhooks() -> None:
    model = _Tiny()
    with NonFiniteGrads(model).attached_to() as grads:
        (model(torch.tensor([[1]])).sum() * torch.tensor(float("inf"))).backward()
    assert set(grads.bad) == {"emb.weight", "out.weight", "out.bias"}
    model.zero_grad()
    with NonFiniteGrads(model).attached_to() as grads:
        model(torch.tensor([[1]])).sum().backward()
    assert grads.bad == []
    assert all(not q._post_accumulate_grad_hooks for q in model.parameters())
