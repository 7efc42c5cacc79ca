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


CODEBOOKS, CARD, FRAMES = 2, 8, 5


class Codes(nn.Module):
    """A codebook model: logits [B, K, T, V] for labels [B, K, T] (padding -100), as MusicGen-like LMs."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(CARD, 16)
        self.heads = nn.Linear(16, CODEBOOKS * CARD)

    def forward(self, codes: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        b, k, t = codes.shape
        h = self.emb(codes).mean(1)  # [B, T, D]
        logits = self.heads(h).reshape(b, t, k, CARD).transpose(1, 2)  # [B, K, T, V]
        loss = nn.functional.cross_entropy(logits.reshape(-1, CARD), labels.reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


def code_examples(n: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        codes = torch.randint(0, CARD, (CODEBOOKS, FRAMES), generator=g)
        labels = codes.roll(-1, dims=1)
        labels[:, -1] = -100
        out.append({"codes": codes, "labels": labels})
    return out
