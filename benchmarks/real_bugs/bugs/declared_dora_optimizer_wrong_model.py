"""Adapters added to one model, the optimizer built over another's parameters: nothing trains.

rasbt/dora-from-scratch#1: in the from-scratch LoRA/DoRA notebook the DoRA model was trained with an
optimizer built as `torch.optim.Adam(model_lora.parameters())`, a copy-paste from the LoRA run; the
DoRA adapters were never updated (the author: "This explains why I got some weird results"). The
fix: build the optimizer over the DoRA model's parameters. Reproduced on a pretrained reference
model with hand-written LoRA and DoRA wrappers on the decoder's attention projections, base frozen.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from real_bugs.bed import RealBug
from signalchain.reference import ReferencePipeline
from signalchain.reference.zoo.pretrained import pretrained_state
from signalchain.reference.zoo.reference import REF_PRETRAIN

BUG = RealBug(
    name="declared_dora_optimizer_wrong_model", thread="https://github.com/rasbt/dora-from-scratch/pull/1",
    library="torch (LoRA/DoRA from scratch)", idiom="hand-written LoRA/DoRA wrappers, pretrained reference model",
    cls="declared-vs-done",
    cause="the optimizer of the DoRA run is built over the LoRA model's parameters: the trained model's "
          "adapters are in no optimizer, its loss never moves",
    fix="build the optimizer over the DoRA model's own (trainable) parameters",
    stages=("optimizer",), cause_ids=("optim.param_not_in_optimizer",), symptom="flat-loss")


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0):
        super().__init__()
        self.base = base
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(rank))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.A.T @ self.B.T) * self.scale


class DoRALinear(LoRALinear):
    """Weight decomposed into a magnitude (trained) and a direction (base + low-rank update)."""

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0):
        super().__init__(base, rank, alpha)
        self.m = nn.Parameter(base.weight.detach().norm(dim=1, keepdim=True).clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.base.weight + self.scale * (self.B @ self.A)
        w = self.m * w / w.norm(dim=1, keepdim=True)
        return nn.functional.linear(x, w, self.base.bias)


def wrap(model: nn.Module, kind: type[LoRALinear]) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.blocks:
        block.self_attn.qkv = kind(block.self_attn.qkv)
        block.self_attn.out = kind(block.self_attn.out)
        block.cross_attn.q = kind(block.cross_attn.q)
        block.cross_attn.kv = kind(block.cross_attn.kv)
    return model


class AdapterRuns(ReferencePipeline):
    def __init__(self, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.name = "dora-finetune"
        self.model_lora: nn.Module | None = None

    def build_model(self, seed: int) -> Any:
        base = super().build_model(seed)
        state, _ = pretrained_state(REF_PRETRAIN)
        base.load_state_dict(state)
        torch.manual_seed(seed)
        self.model_lora = wrap(copy.deepcopy(base), LoRALinear)  # the notebook's first run
        return wrap(copy.deepcopy(base), DoRALinear)  # the run being trained

    def build_optimizer(self, model: Any) -> torch.optim.Optimizer:
        return super().build_optimizer(model if self.fixed else self.model_lora)


def pipeline(fixed: bool) -> AdapterRuns:
    return AdapterRuns(fixed)


def shows(fixed: bool) -> tuple[bool, str]:
    """After 3 updates: did any trainable parameter of the trained (DoRA) model change?"""
    p = pipeline(fixed)
    model = p.build_model(0)
    opt = p.build_optimizer(model)
    train = [q for q in model.parameters() if q.requires_grad]
    before = [q.detach().clone() for q in train]
    in_opt = {id(q) for g in opt.param_groups for q in g["params"]}
    loader = p.loader("train", seed=0)
    for _ in range(3):
        p.train_step(model, opt, next(loader))
    moved = max(float((q - b).abs().max()) for q, b in zip(train, before))
    n_in = sum(id(q) in in_opt for q in train)
    return moved == 0.0, f"{n_in}/{len(train)} trainable DoRA tensors in the optimizer; max |change| after 3 steps {moved:.2e}"
