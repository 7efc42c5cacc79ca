"""Per-codebook cross-entropy and perplexity from what a model's forward returned.

Taken, in order of trust, from a per-codebook loss the model reports itself ([K] under one of
`PER_CODEBOOK_KEYS`), else from logits and labels in a codebook layout: logits [B, K, T, V] or
[B*K, T, V] with labels [B, K, T] (or HF MusicGen's [B, T, K]). A plain language model ([B, T, V]
with [B, T]) has no codebooks: nothing is computed. Only called every `every` steps: it reads the
values off the device.

Which labels count is the model's convention, not ours: -100 is ignored as by every trainer's loss,
and so is the pad id of an HF MusicGen decoder (`label_ignore_ids`), which its own loss masks before
the cross-entropy (public fine-tuning scripts leave those pad ids in their labels: the delay
pattern's corners, the padding). Any other value outside [0, V) is no label the model's loss would
accept either way; it is left out and counted (`CodebookCE.skipped`), so the caller can say so once,
rather than crash on it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..probes.forward_tap import field

__all__ = ["PER_CODEBOOK_KEYS", "CodebookCE", "per_codebook_ce", "label_ignore_ids", "field"]

PER_CODEBOOK_KEYS = ("loss_per_codebook", "per_codebook_loss", "ce_per_codebook", "codebook_losses")
IGNORE = -100


@dataclasses.dataclass(frozen=True)
class CodebookCE:
    """Cross-entropy per codebook (nats; NaN for a codebook with no counted position), and what was
    left out: `ignored` positions by the model's own convention (`ignore_ids`), `skipped` ones holding
    a value outside [0, V) that no convention explains (`skipped_values`: up to 8 of them)."""

    values: list[float]
    vocab: int | None = None
    positions: int = 0
    ignored: int = 0
    ignore_ids: tuple[int, ...] = (IGNORE,)
    skipped: int = 0
    skipped_values: tuple[int, ...] = ()


def label_ignore_ids(model: Any) -> tuple[int, ...]:
    """The label values the model's own loss ignores: -100, and the decoder's pad id for an HF
    MusicGen found in `model` (itself, a peft wrapper or a LightningModule holding it)."""
    ids = [IGNORE]
    if isinstance(model, torch.nn.Module):
        for m in model.modules():
            dec = getattr(m, "decoder", None)
            if isinstance(dec, torch.nn.Module) and hasattr(dec, "build_delay_pattern_mask"):
                pad = getattr(getattr(dec, "config", None), "pad_token_id", None)
                if isinstance(pad, int) and pad not in ids:
                    ids.append(pad)
                break
    return tuple(ids)


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


def per_codebook_ce(output: Any, labels: Any = None, ignore_ids: tuple[int, ...] = (IGNORE,)) -> CodebookCE | None:
    """Cross-entropy per codebook, or None when the output gives no codebook values. Labels equal to
    one of `ignore_ids` are not counted (the model's convention); other values outside [0, V) are
    left out and counted as `skipped`."""
    for key in PER_CODEBOOK_KEYS:
        given = field(output, key)
        if given is not None:
            values = torch.as_tensor(given).detach().float().reshape(-1)
            return CodebookCE([float(v) for v in values.cpu()])
    logits = field(output, "logits")
    labels = labels if labels is not None else field(output, "labels")
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return None
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        return None  # not class labels
    shaped = _layout(logits.detach(), labels.detach())
    if shaped is None:
        return None
    logits, labels = shaped
    with torch.no_grad():
        b, k, t, v = logits.shape
        flat = logits.float().permute(1, 0, 2, 3).reshape(k, b * t, v)  # [K, B*T, V]
        target = labels.permute(1, 0, 2).reshape(k, b * t).long().to(flat.device)  # [K, B*T]
        ignored = torch.zeros_like(target, dtype=torch.bool)
        for i in ignore_ids:
            ignored |= target == i
        outside = ~ignored & ((target < 0) | (target >= v))
        valid = ~ignored & ~outside
        safe = torch.where(valid, target, torch.zeros_like(target))  # only counted positions reach the CE
        nll = torch.nn.functional.cross_entropy(flat.reshape(-1, v), safe.reshape(-1),
                                                reduction="none").reshape(k, b * t)
        total = (nll * valid).sum(1)
        counts = valid.sum(1)
        odd = torch.unique(target[outside])[:8].tolist() if bool(outside.any()) else []
    values = [float(s) / int(c) if int(c) else math.nan for s, c in zip(total.cpu(), counts.cpu())]
    return CodebookCE(values, vocab=int(v), positions=int(target.numel()), ignored=int(ignored.sum()),
                      ignore_ids=tuple(ignore_ids), skipped=int(outside.sum()),
                      skipped_values=tuple(int(x) for x in odd))
