"""Tiny models and data shared by the live-session and trainer-callback tests.

`Tiny` normalises its input with a hand-written RMS norm without eps: an all-zero row gives
0 * rsqrt(0) = 0 * inf = NaN at `features`, the op the Monitor's replay must name
(`aten.rsqrt.default`). Which step sees the zero row is fixed by the data, so the step is known.
"""

from __future__ import annotations

import torch
from torch import nn

from signalchain import tap

DIM, CLASSES, BATCH = 6, 4, 4


class Tiny(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.enc = nn.Linear(DIM, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
        x = tap("features", x)
        logits = self.head(torch.tanh(self.enc(x)))
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def examples(steps: int, bad_step: int | None = None, seed: int = 0, per_step: int = BATCH) -> list[dict]:
    """`steps * per_step` examples in order; one row of the `bad_step`-th group is all zeros."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(steps * per_step):
        x = torch.randn(DIM, generator=g)
        if bad_step is not None and i == bad_step * per_step + 1:
            x = torch.zeros(DIM)
        out.append({"x": x, "labels": torch.randint(0, CLASSES, (), generator=g)})
    return out


def collate(items: list[dict]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
