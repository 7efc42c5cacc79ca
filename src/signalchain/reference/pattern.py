"""MusicGen's "delay" codebook pattern.

A codec frame has K codes, one per residual codebook. The delay pattern shifts codebook k right by
k steps, so that at pattern step s the model emits codebook 0 of frame s, codebook 1 of frame s-1,
and so on: each finer codebook is predicted after the coarser codes of its frame are known.

    codes [B, K, T]                  pattern [B, K, T + K - 1]   (_ = special)
    k=0:  a0 a1 a2                   a0 a1 a2 _  _
    k=1:  b0 b1 b2          ->       _  b0 b1 b2 _
    k=2:  c0 c1 c2                   _  _  c0 c1 c2
"""

from __future__ import annotations

import torch
from torch import Tensor


def build_delay_pattern(codes: Tensor, special: int) -> Tensor:
    """codes [B, K, T] -> pattern [B, K, T + K - 1] with out[:, k, t + k] = codes[:, k, t]."""
    if codes.dim() != 3:
        raise ValueError(f"codes must be [B, K, T], got shape {tuple(codes.shape)}")
    B, K, T = codes.shape
    out = codes.new_full((B, K, T + K - 1), special)
    for k in range(K):
        out[:, k, k : k + T] = codes[:, k]
    return out


def revert_delay_pattern(x: Tensor) -> Tensor:
    """x [B, K, S, ...] -> [B, K, S - K + 1, ...] with out[:, k, t] = x[:, k, t + k].

    Works for codes and for logits (any trailing dims): logits computed over the pattern come back
    aligned with the frames they predict. Returns a view of x: clone it before writing into it.
    """
    if x.dim() < 3:
        raise ValueError(f"x must be [B, K, S, ...], got shape {tuple(x.shape)}")
    K, S = x.shape[1], x.shape[2]
    T = S - K + 1
    if T < 0:
        raise ValueError(f"a delay pattern over K={K} codebooks needs S >= {K - 1} steps, got {S}")
    # A strided view, no copy: element (b, k, t) sits at offset b*s0 + k*(s1 + s2) + t*s2.
    # Its backward avoids the K slice-scatters into full-size zero buffers that indexing costs.
    B, strides = x.shape[0], x.stride()
    return x.as_strided(
        (B, K, T, *x.shape[3:]),
        (strides[0], strides[1] + strides[2], *strides[2:]),
        x.storage_offset(),
    )


def pattern_valid_mask(K: int, T: int, device: torch.device | str | None = None) -> Tensor:
    """[K, T + K - 1] bool: True where the pattern holds a real code, False where it is special."""
    steps = torch.arange(T + K - 1, device=device)  # [S]
    delays = torch.arange(K, device=device).unsqueeze(1)  # [K, 1]
    return (steps >= delays) & (steps < delays + T)  # [K, S]
