"""Gradient reach on stacks that differ from the reference (DESIGN §3): a loss computed inside the
model from a tensor the returned logits are only a sibling view of, logits returned detached, a
frozen codec inside the model. A tiny pipeline written here, with a codec named so that no name
gives it away."""

import pytest
import torch
from torch import nn

from signalchain.checks.optimisation.gradients import codec_parameters, judge_gradients
from signalchain.experiments.context import BUDGETS, Context
from signalchain.experiments.optimisation.gradients import measure_gradients
from signalchain.pipeline import ProtocolView, StepOutput

B, K, T, V, D = 2, 2, 6, 8, 16


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # The audio-to-codes network, deliberately big (most of the values) and named neutrally.
        self.backbone = nn.ModuleDict({"down": nn.Linear(4, 256), "up": nn.Linear(256, 4)})
        self.embed = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)


class Toy:
    """loss: "sibling" (the loss from [B, K, T, V], the [B*K, T, V] reshape returned, as HF does),
    "detached" (the returned logits a detached copy), "zeroed" (the loss from a one-hot of the
    targets, the logits kept in the graph times 0), "direct" (the loss from the returned logits)."""

    name = "toy"

    def __init__(self, loss: str = "sibling", freeze: tuple[str, ...] = ("backbone",)):
        self.loss, self.freeze = loss, freeze

    def golden_batch(self, seed: int) -> torch.Tensor:
        return torch.randn(B, T, 4, generator=torch.Generator().manual_seed(seed))

    def build_model(self, seed: int) -> Model:
        torch.manual_seed(seed)
        model = Model()
        for name in self.freeze:
            getattr(model, name).requires_grad_(False)
        return model

    def build_optimizer(self, model: Model) -> torch.optim.Optimizer:
        return torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.1)

    def step(self, model: Model, batch: torch.Tensor, tap) -> StepOutput:
        with torch.no_grad():  # the codec only makes the targets
            z = model.backbone["down"](batch)  # [B, T, 256]
            codes = torch.stack([z[..., :V].argmax(-1), z[..., V : 2 * V].argmax(-1)], dim=1)  # [B, K, T]
        tap("tokens", codes)
        logits4 = model.head(model.embed(codes))  # [B, K, T, V]
        targets = codes.roll(1, dims=-1)
        if self.loss == "zeroed":
            onehot = nn.functional.one_hot(targets, V).float() * 10
            loss = nn.functional.cross_entropy(onehot.reshape(-1, V), targets.reshape(-1)) + 0.0 * logits4.sum()
        else:
            loss = nn.functional.cross_entropy(logits4.reshape(-1, V), targets.reshape(-1))
        logits = logits4.reshape(B * K, T, V)  # [B*K, T, V], a sibling of what the loss read
        if self.loss == "detached":
            logits = logits.detach()
        if self.loss == "direct":
            logits = logits4
        tap("logits", logits)
        tap("loss", loss)
        return StepOutput(loss=loss, logits=logits, targets=targets)


def run(p: Toy):
    r = measure_gradients(Context(ProtocolView(p), seed=0, budget=BUDGETS["economy"]))
    return r, judge_gradients(r)


def loud(findings):
    return sorted((f.id, f.severity.value) for f in findings if f.severity.value != "info")


@pytest.mark.parametrize("loss,via", [("direct", "logits"), ("sibling", "graph"), ("detached", "detached")])
def test_the_loss_depends_on_the_output_whatever_view_is_returned(loss, via):
    r, found = run(Toy(loss))
    assert r.loss_depends_on_logits is True and r.depends_via == via
    assert loud(found) == []


def test_a_loss_that_only_multiplies_the_output_by_zero_is_independent_of_it():
    r, found = run(Toy("zeroed"))
    assert r.loss_depends_on_logits is False
    hit = [f for f in found if f.id == "loss.independent_of_output"]
    assert hit and hit[0].severity.value == "error" and hit[0].stage == "loss"


def test_a_frozen_codec_is_recognised_by_where_it_runs_not_by_its_name():
    r, found = run(Toy())
    codec, idle = codec_parameters(r)
    assert {q.name for q in codec} == {"backbone.down.weight", "backbone.down.bias", "backbone.up.weight",
                                       "backbone.up.bias"}  # `up` never runs: inside the codec's module
    assert idle == []
    frozen = [f for f in found if f.id == "optim.param_frozen"]
    assert [f.severity.value for f in frozen] == ["info"] and frozen[0].evidence["role"] == "codec"
    assert loud(found) == []


def test_freezing_the_model_itself_is_still_a_warning_beside_the_codec():
    _, found = run(Toy(freeze=("backbone", "head")))
    frozen = {f.severity.value: f for f in found if f.id == "optim.param_frozen"}
    assert set(frozen) == {"info", "warning"}
    assert frozen["warning"].evidence["share"] > 0.5 and "head" in frozen["warning"].evidence["modules"]


def test_without_a_tokens_tap_every_frozen_value_counts():
    class NoTokensTap(Toy):
        def step(self, model, batch, tap):
            return super().step(model, batch, lambda s, v, **m: None if s == "tokens" else tap(s, v, **m))

    _, found = run(NoTokensTap())
    assert [f.severity.value for f in found if f.id == "optim.param_frozen"] == ["warning"]
