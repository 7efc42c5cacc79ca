"""The history bed's model and data: K codebooks of tokens from seeded Markov chains, and a per-codebook
bigram model that learns them in a few hundred CPU-milliseconds.

Each codebook's chain has a low-entropy transition matrix (each token has a few likely successors), so a
clean run's cross-entropy falls from ln(V) towards the chain's entropy, per codebook, and faults have
real consequences: random targets stay at ln(V), a head without gradient stays where it started, a
tiny training set is memorised.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["K", "V", "T", "Chains", "BigramLM", "per_codebook_ce"]

K, V, T = 4, 64, 32  # codebooks, cardinality, frames


class Chains:
    """K Markov chains over V tokens; `sample(n, g)` gives [n, K, T] int64."""

    def __init__(self, seed: int = 0, successors: int = 3):
        g = torch.Generator().manual_seed(seed)
        logits = torch.full((K, V, V), -1e9)
        for k in range(K):
            for v in range(V):
                nxt = torch.randperm(V, generator=g)[:successors]
                logits[k, v, nxt] = torch.randn(successors, generator=g)
        self.probs = torch.softmax(logits, dim=-1)  # [K, V, V]

    def sample(self, n: int, g: torch.Generator) -> torch.Tensor:
        x = torch.empty(n, K, T, dtype=torch.long)
        x[:, :, 0] = torch.randint(0, V, (n, K), generator=g)
        for t in range(1, T):
            p = self.probs[torch.arange(K)[None, :], x[:, :, t - 1]]  # [n, K, V]
            x[:, :, t] = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(n, K)
        return x

    def typical(self, n: int, g: torch.Generator) -> torch.Tensor:
        """[n, K, T] sequences that always take the most likely successor: the chain's easiest clips."""
        x = torch.empty(n, K, T, dtype=torch.long)
        x[:, :, 0] = torch.randint(0, V, (n, K), generator=g)
        best = self.probs.argmax(-1)  # [K, V]
        for t in range(1, T):
            x[:, :, t] = best[torch.arange(K)[None, :], x[:, :, t - 1]]
        return x

    def entropy(self) -> float:
        p = self.probs.clamp_min(1e-12)
        return float(-(p * p.log()).sum(-1).mean())


class BigramLM(nn.Module):
    """Per codebook: embed the previous token, predict the next one. forward(input_ids [B, K, T]) ->
    {"loss", "logits" [B, K, T-1, V]}; HF Trainer calls it with `input_ids` and `labels` (the same ids)."""

    def __init__(self, dim: int = 32, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.ModuleList(nn.Embedding(V, dim) for _ in range(K))
        self.head = nn.ModuleList(nn.Linear(dim, V) for _ in range(K))
        self.drop = nn.Dropout(dropout)

    def logits(self, ids: torch.Tensor, gain: torch.Tensor | None = None) -> torch.Tensor:
        g = 1.0 if gain is None else gain.reshape(-1, 1, 1).to(torch.float32)  # a per-clip level, [B, 1, 1]
        out = [self.head[k](self.drop(self.embed[k](ids[:, k, :-1]) * g)) for k in range(K)]
        return torch.stack(out, dim=1)  # [B, K, T-1, V]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                gain: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.logits(input_ids, gain)
        targets = (labels if labels is not None else input_ids)[:, :, 1:]
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return {"loss": loss, "logits": logits}


def per_codebook_ce(logits: torch.Tensor, targets: torch.Tensor) -> list[float]:
    """Cross-entropy of each codebook: logits [B, K, T-1, V], targets [B, K, T-1]."""
    with torch.no_grad():
        ce = nn.functional.cross_entropy(logits.permute(0, 3, 1, 2), targets, reduction="none")  # [B, K, T-1]
        return [float(x) for x in ce.mean(dim=(0, 2))]


LN_V = math.log(V)
