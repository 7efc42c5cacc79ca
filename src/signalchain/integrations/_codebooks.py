"""Per-codebook cross-entropy and perplexity from what a model's forward returned.

Taken, in order of trust, from a per-codebook loss the model reports itself ([K] under one of
`PER_CODEBOOK_KEYS`), else from logits and labels in a codebook layout: logits [B, K, T, V] or
[B*K, T, V] with labels [B, K, T] (or HF MusicGen's [B, T, K]). Positions labelled -100 are ignored,
as by the trainers' own losses. A plain language model ([B, T, V] with [B, T]) has no codebooks:
nothing is computed. Only called every `every` steps: it reads the values off the device.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..probes.forward_tap import field

__all__ = ["PER_CODEBOOK_KEYS", "per_codebook_ce", "field"]

PER_CODEBOOK_KEYS = ("loss_per_codebook", "per_codebook_loss", "ce_per_codebook", "codebook_losses")
IGNORE = -100


def _layout(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """logits [B, K, T, V] and labels [B, K, T], or None when the shapes are not a codebook layout."""
    if labels.dim() != 3:
        return None
    if logits.dim() == 3:  # [B*K, T, V], K read from the labels' codebook axis, whichever it is
        b = labels.shape[0]
        if logits.shape[0] == b * labels.shape[1] and logits.shape[1] == labels.shape[2]:  # labels [B, K, T]
            logits = logits.reshape(b, labels.shape[1], *logits.shape[1:])
        elif logits.shape[0] == b * labels.shape[2] and logits.shape[1] == labels.shape[1]:  # HF's [B, T, K]
            logits = logits.reshape(b, labels.shape[2], *logits.shape[1:])
            labels = labels.transpose(1, 2)
    if logits.dim() != 4:
        return None
    if tuple(labels.shape) != tuple(logits.shape[:3]):
        if tuple(labels.shape) == (logits.shape[0], logits.shape[2], logits.shape[1]):  # [B, T, K]
            labels = labels.transpose(1, 2)
        else:
            return None
    return logits, labels


def per_codebook_ce(output: Any, labels: Any = None) -> list[float] | None:
    """Cross-entropy per codebook (nats), or None when the output gives no codebook values."""
    for key in PER_CODEBOOK_KEYS:
        given = field(output, key)
        if given is not None:
            values = torch.as_tensor(given).detach().float().reshape(-1)
            return [float(v) for v in values.cpu()]
    logits = field(output, "logits")
    labels = labels if labels is not None else field(output, "labels")
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return None
    shaped = _layout(logits.detach(), labels.detach())
    if shaped is None:
        return None
    logits, labels = shaped
    with torch.no_grad():
        b, k, t, v = logits.shape
        flat = logits.float().permute(1, 0, 2, 3).reshape(k, b * t, v)  # [K, B*T, V]
        target = labels.permute(1, 0, 2).reshape(k, b * t).long()  # [K, B*T]
        valid = target != IGNORE
        nll = torch.nn.functional.cross_entropy(flat.reshape(-1, v), target.clamp_min(0).reshape(-1),
                                                reduction="none").reshape(k, b * t)
        total = (nll * valid).sum(1)
        counts = valid.sum(1)
    return [float(s) / int(c) if int(c) else math.nan for s, c in zip(total.cpu(), counts.cpu())]
