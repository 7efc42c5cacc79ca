"""Sampling REMI ids from the symbolic bed's model: BOS, then one token at a time until EOS.

Classifier-free guidance runs the caption rows and null-caption rows together and mixes their logits
(`uncond + cfg_coef * (cond - uncond)`); greedy, temperature, top-k and top-p as the reference's
sampler. No KV cache: each step re-runs the prefix, fast enough at this size.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from .model import SymbolicLM

__all__ = ["Sampling", "Generated", "sample_next", "generate_ids"]


@dataclass
class Sampling:
    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.0
    cfg_coef: float = 3.0
    max_frames: int = 128  # tokens to generate after BOS (the audio beds' name for the length)
    seed: int = 0

    @classmethod
    def from_dict(cls, defaults: dict[str, Any], overrides: dict[str, Any] | None) -> Sampling:
        names = {f.name for f in fields(cls)}
        merged = {**defaults, **(overrides or {})}
        unknown = sorted(set(merged) - names)
        if unknown:
            raise ValueError(f"unknown sampling setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        s = cls(**merged)
        if s.temperature < 0 or s.top_k < 0 or not 0.0 <= s.top_p <= 1.0 or s.max_frames < 1:
            raise ValueError(f"invalid sampling {s}")
        return s


def sample_next(logits: Tensor, s: Sampling, generator: torch.Generator) -> Tensor:
    """logits [N, V] -> ids [N]."""
    if s.greedy or s.temperature == 0:
        return logits.argmax(dim=-1)
    scores = (logits.float() - logits.float().amax(dim=-1, keepdim=True)) / s.temperature
    if 0 < s.top_k < scores.shape[-1]:
        kth = scores.topk(s.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if 0 < s.top_p < 1:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        drop_sorted = probs.cumsum(dim=-1) - probs > s.top_p
        scores = scores.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
    return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(-1)


@dataclass
class Generated:
    ids: Tensor  # [B, 1 + n]: BOS, then the sampled ids; PAD after each row's EOS
    logits: Tensor  # [B, 1 + n, V] what the sampler saw (after guidance); NaN at BOS and after EOS
    cond_logits: Tensor | None  # the caption rows' logits when guided, else None
    uncond_logits: Tensor | None  # the null-caption rows'


@torch.no_grad()
def generate_ids(model: SymbolicLM, memory: Tensor, memory_mask: Tensor, null_memory: Tensor,
                 null_mask: Tensor, s: Sampling, bos: int, eos: int, pad: int) -> Generated:
    B = memory.shape[0]
    steps = min(s.max_frames, model.config.max_len - 1)
    ids = torch.full((B, 1), bos, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    gen = torch.Generator().manual_seed(int(s.seed))
    guided = s.cfg_coef != 1.0
    seen: list[Tensor] = []
    conds: list[Tensor] = []
    unconds: list[Tensor] = []
    for _ in range(steps):
        if guided:
            both = model(ids.repeat(2, 1), None, torch.cat([memory, null_memory]), torch.cat([memory_mask, null_mask]))
            cond, uncond = both[:B, -1], both[B:, -1]
            logits = uncond + s.cfg_coef * (cond - uncond)
            conds.append(cond.masked_fill(done[:, None], float("nan")))
            unconds.append(uncond.masked_fill(done[:, None], float("nan")))
        else:
            logits = model(ids, None, memory, memory_mask)[:, -1]
        seen.append(logits.masked_fill(done[:, None], float("nan")))
        nxt = sample_next(logits, s, gen)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        done |= nxt == eos
        if bool(done.all()):
            break

    def aligned(rows: list[Tensor]) -> Tensor:
        first = torch.full_like(rows[0], float("nan"))  # nothing is sampled at BOS
        return torch.stack([first, *rows], dim=1)

    return Generated(ids, aligned(seen), aligned(conds) if guided else None, aligned(unconds) if guided else None)
