"""Data-path checks on one recorded step: batch sizes, shapes, masks, targets, initial loss.

Each function reads a `Trace` (recorded with values, on a freshly built model) and returns findings.
"""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ..trace import Trace
from ._util import (
    as_bool_mask,
    shift_agreement,
    temporal_mutual_information,
    unigram_entropy,
    value,
)
from .base import make

__all__ = ["check_batch_sizes", "check_shapes", "check_initial_loss", "check_masks", "check_targets", "DATA_CHECKS"]

CHECK = "checks.data"
MAX_SHIFT = 3


def check_batch_sizes(trace: Trace) -> list[Finding]:
    """Audio, captions and metadata must describe the same number of examples."""
    sizes = {n: trace[n].shape[0] for n in ("audio.original", "caption", "metadata") if n in trace and trace[n].shape}
    if len(set(sizes.values())) <= 1:
        return []
    ref_name = next(iter(sizes))
    odd = [n for n, b in sizes.items() if b != sizes[ref_name]]
    return [make("batch.size_mismatch", "error", odd[0],
                 f"{ref_name} holds {sizes[ref_name]} examples but {odd[0]} holds {sizes[odd[0]]}: examples and their "
                 "descriptions no longer pair up", CHECK,
                 hint=f"find where {odd[0]} is built per batch; an item was dropped or duplicated (a filter, a failed "
                      "decode that was skipped for one list only)", sizes=sizes)]


def check_shapes(trace: Trace) -> list[Finding]:
    """Logits [B, K, T, C], targets [B, K, T] and the loss mask [B, K, T] must agree exactly."""
    out: list[Finding] = []
    logits, targets, mask = trace.get("logits"), trace.get("targets"), trace.get("mask.loss")
    if logits is not None and targets is not None and list(logits.shape[:-1]) != list(targets.shape):
        out.append(make("shape.mismatch", "error", "targets",
                        f"targets have shape {targets.shape} but logits predict {logits.shape[:-1]} (+{logits.shape[-1]} classes)",
                        CHECK, hint="the loss may be broadcasting or slicing silently; align targets with logits "
                                    "before the loss (AudioCraft asserts logits.shape[:-1] == targets.shape)",
                        logits=logits.shape, targets=targets.shape))
    if mask is not None and targets is not None and list(mask.shape) != list(targets.shape):
        out.append(make("shape.mismatch", "error", "mask.loss",
                        f"the loss mask has shape {mask.shape} but targets have {targets.shape}: it broadcasts or is sliced",
                        CHECK, hint="build the mask per codebook and frame, [B, K, T], like the targets",
                        mask=mask.shape, targets=targets.shape))
    return out


def check_initial_loss(trace: Trace) -> list[Finding]:
    """A fresh model's cross-entropy should sit near ln(cardinality) for every codebook."""
    loss = trace.get("loss")
    logits = trace.get("logits")
    if loss is None or logits is None or not logits.shape:
        return []
    mask = value(trace, "mask.loss")
    if mask is not None and not mask.any():
        return []  # nothing reaches the loss: mask.empty says so, the loss value means nothing
    card = int(logits.shape[-1])
    expected = math.log(card)
    per = value(trace, "loss.per_codebook")
    values = [float(v) for v in np.atleast_1d(per)] if per is not None else [float(loss.summary.get("value", "nan"))]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return []
    worst = max(values, key=lambda v: abs(v - expected))
    if abs(worst - expected) <= max(1.0, 0.25 * expected):
        return []
    above = worst > expected
    return [make("loss.initial", "warning", "loss",
                 f"initial loss {worst:.3f} is {'above' if above else 'below'} ln({card}) = {expected:.3f} by "
                 f"{abs(worst - expected):.2f} nats on a freshly initialised model", CHECK,
                 hint=("logits are far from uniform at initialisation: check output scaling, temperature or init"
                       if above else "the targets are predictable before any learning: look for targets that leak "
                       "into the inputs, or a loss over very few classes"),
                 per_codebook=values, expected=expected, cardinality=card)]


def check_masks(trace: Trace) -> list[Finding]:
    """The loss must keep real frames (mask.empty) and only real frames (mask.padding_trained)."""
    mask = value(trace, "mask.loss")
    if mask is None:
        return []
    mask = mask.astype(bool)
    padding = value(trace, "mask.padding")
    out: list[Finding] = []
    total, valid = mask.size, int(mask.sum())
    per_k = mask.reshape(mask.shape[0], mask.shape[1], -1).mean(axis=(0, 2)) if mask.ndim == 3 else np.array([mask.mean()])
    pad_frac = float(padding.astype(bool).mean()) if padding is not None else None
    stage = "mask.padding" if pad_frac is not None and pad_frac <= 0.05 else "mask.loss"
    if valid == 0 or (per_k == 0).any():
        empty = [int(k) for k in np.flatnonzero(per_k == 0)]
        out.append(make("mask.empty", "error", stage,
                        f"loss mask keeps {valid} of {total} target positions" + (f"; codebooks {empty} have none" if valid else ""),
                        CHECK, hint="the loss has nothing to learn from; check how the padding mask is built from "
                                    "the valid lengths (an inverted comparison, lengths in samples vs frames)",
                        valid=valid, total=total, per_codebook=per_k.tolist(), padding_valid_fraction=pad_frac))
    elif valid / total < 0.05:
        out.append(make("mask.empty", "warning", stage,
                        f"loss mask keeps only {valid} of {total} target positions ({100 * valid / total:.1f}%)", CHECK,
                        hint="nearly nothing reaches the loss; compare the mask with the clips' valid lengths",
                        valid=valid, total=total, per_codebook=per_k.tolist(), padding_valid_fraction=pad_frac))
    if padding is not None and mask.ndim == 3:
        pad = as_bool_mask(padding, mask.shape)
        trained = int((mask & ~pad).sum())
        if trained:
            out.append(make("mask.padding_trained", "error", "mask.loss",
                            f"{trained} loss positions lie in padding (frames the padding mask marks invalid)", CHECK,
                            hint="AND the loss mask with the padding mask: padding trained as targets teaches the "
                                 "model to emit silence", positions=trained))
    return out


def check_targets(trace: Trace) -> list[Finding]:
    """Targets must be codes of the audio, aligned with the logits, and carry information."""
    targets = value(trace, "targets")
    if targets is None or targets.ndim != 3:
        return []
    tokens = value(trace, "tokens")
    mask = as_bool_mask(value(trace, "mask.loss"), targets.shape)
    card = trace["logits"].shape[-1] if "logits" in trace and trace["logits"].shape else None
    out: list[Finding] = []
    if card is not None and ((targets < 0) | (targets >= card)).any():
        bad = int(((targets < 0) | (targets >= card)).sum())
        out.append(make("tokens.out_of_range", "error", "targets",
                        f"{bad} targets lie outside [0, {card}) (min {int(targets.min())}, max {int(targets.max())})", CHECK,
                        hint="a special/pad id or an unshifted vocabulary leaks into the targets", count=bad, cardinality=card))
    valid = targets[mask]
    if valid.size == 0:
        return out  # an empty loss mask is reported by check_masks; nothing to align here
    per_k = [np.unique(targets[:, k][mask[:, k]]) for k in range(targets.shape[1])]
    if all(u.size <= 1 for u in per_k):
        values = [int(u[0]) for u in per_k if u.size]
        what = f"every one of {valid.size} valid targets is {values[0]}" if len(set(values)) == 1 else \
            f"each codebook's targets are one constant value ({values})"
        return out + [make("targets.constant", "error", "targets", what, CHECK,
                           hint="the targets carry no information: check what is passed as targets (a zero tensor, "
                                "a fill value, the pad id, an index instead of a code)", values=values,
                           count=int(valid.size))]
    expected = int(trace["targets"].meta.get("shift", 0))
    if tokens is not None and tokens.shape == targets.shape:
        agree = {s: shift_agreement(targets, tokens, mask, s) for s in range(-MAX_SHIFT, MAX_SHIFT + 1)}
        best = max(agree, key=lambda s: float(agree[s].mean()))
        best_k = [max(agree, key=lambda s, k=k: float(agree[s][k])) for k in range(targets.shape[1])]
        top = float(agree[best].mean())
        if top < 0.5:
            mi = temporal_mutual_information(targets)
            out.append(make("targets.random", "error", "targets",
                            f"targets match the tokens in at most {100 * top:.0f}% of positions at any shift within "
                            f"±{MAX_SHIFT} frames (temporal information {mi:.3f} nats)", CHECK,
                            hint="the targets are not the codes of this audio: check that targets come from the same "
                                 "batch (no shuffle, no stale buffer, no random init left in place)",
                            best_shift=best, agreement=top, temporal_mi=mi))
        elif best != expected or len(set(best_k)) > 1 or top < 0.98:
            out.append(make("targets.misaligned", "error", "targets",
                            f"targets equal the tokens shifted by {best_k} frames per codebook (expected {expected} "
                            f"everywhere; best agreement {100 * top:.1f}%)", CHECK,
                            hint="the model input and its target are offset wrongly (an off-by-one, or the delay "
                                 "pattern applied twice); logits[t] must predict the token the model has not seen",
                            shift_per_codebook=best_k, expected_shift=expected,
                            agreement={str(s): [round(float(x), 4) for x in a] for s, a in agree.items()}))
    elif tokens is None:
        mi = temporal_mutual_information(targets)
        if mi < 0.02:
            out.append(make("targets.random", "warning", "targets",
                            f"consecutive targets share no information ({mi:.3f} nats); codec tokens of real audio do",
                            CHECK, hint="tap the tokens as well so targets can be matched against them",
                            temporal_mi=mi, unigram_entropy=unigram_entropy(targets, mask)))
    return out


DATA_CHECKS = (check_batch_sizes, check_shapes, check_initial_loss, check_masks, check_targets)
