"""A small user pipeline written here, to judge learning rates on code the reference never saw.

Next-token prediction of a fixed permutation (learnable, unigram entropy ≈ ln V) by an MLP with
biases and a LayerNorm, trained by the optimizer, rate and schedule a user picks:
`RatePipeline(opt="adamw", lr=1e-3, warmup=4000, total=100_000, schedule="cosine", pretrained=True)`.
A pretrained start trains the model to a low loss first (from its own seed), as a fine-tune does.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from signalchain import StepOutput, tap

V, K, T, B, D = 32, 1, 24, 8, 48


def _no_tap(stage: str, value: Any, /, **meta: Any) -> Any:
    return value


class RatePipeline:
    name = "rate-user"

    def __init__(self, opt: str = "adamw", lr: float = 1e-3, warmup: int = 0, total: int = 0,
                 schedule: str | None = None, pretrained: bool = False, weight_decay: float = 0.01,
                 lr_lambda: Any = None):
        self.opt, self.lr, self.warmup, self.total, self.schedule = opt, lr, warmup, total, schedule
        self.pretrained, self.weight_decay, self.lr_lambda = pretrained, weight_decay, lr_lambda
        self.perm = torch.randperm(V, generator=torch.Generator().manual_seed(123))
        self._schedulers: dict[int, Any] = {}

    def golden_batch(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, V, (B, K, T), generator=g)

    def build_model(self, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Embedding(V, D), nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D), nn.Linear(D, V))
        if self.pretrained:  # a model that already knows the task, as a fine-tune starts from
            opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
            for i in range(150):
                loss = self.step(model, self.golden_batch(1000 + i % 8), _no_tap).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        return model

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        params, lr, wd = model.parameters(), self.lr, self.weight_decay
        if self.opt == "adamw":
            opt: torch.optim.Optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        elif self.opt == "adam":
            opt = torch.optim.Adam(params, lr=lr)
        elif self.opt == "sgd":
            opt = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
        elif self.opt == "adafactor":
            from transformers.optimization import Adafactor

            opt = Adafactor(params, lr=lr, relative_step=False, scale_parameter=False, warmup_init=False,
                            weight_decay=wd)
        else:
            raise ValueError(self.opt)
        w, n = self.warmup, self.total
        if self.lr_lambda is not None:
            sched: Any = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_lambda)
        elif self.schedule == "cosine":
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: s / max(1, w) if s < w else 0.5 * (1 + math.cos(math.pi * (s - w) / max(1, n - w))))
        elif self.schedule == "linear":
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: s / max(1, w) if s < w else max(0.0, (n - s) / max(1, n - w)))
        else:
            sched = None
        self._schedulers[id(opt)] = sched
        return opt

    def step(self, model: nn.Module, batch: torch.Tensor, tap: Any = tap) -> StepOutput:
        tokens = tap("tokens", batch, cardinality=V)
        targets = tap("targets", self.perm[tokens])  # [B, K, T]
        mask = tap("mask.loss", torch.ones_like(targets, dtype=torch.bool))
        logits = tap("logits", model(tokens))  # [B, K, T, V]
        loss = tap("loss", nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)))
        return StepOutput(loss=loss, logits=logits, targets=targets, mask=mask)

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor,
                   tap: Any = _no_tap) -> StepOutput:
        model.train()
        out = self.step(model, batch, tap)
        out.loss.backward()
        tap("grad.norm", torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        sched = self._schedulers.get(id(optimizer))
        if sched is not None:
            sched.step()
        optimizer.zero_grad(set_to_none=True)
        return out
