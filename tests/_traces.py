"""Build small traces by hand for check tests: `make_trace(("tokens", value, {"cardinality": 8}), ...)`."""

from __future__ import annotations

from typing import Any

import numpy as np

from signalchain import record, tap


def make_trace(*stages: tuple[str, Any, dict[str, Any]] | tuple[str, Any]):
    with record(values=True) as t:
        for item in stages:
            name, value = item[0], item[1]
            meta = item[2] if len(item) > 2 else {}
            tap(name, value, **meta)
    return t


def codec_like_tokens(b: int = 4, k: int = 4, t: int = 50, card: int = 64, seed: int = 0) -> np.ndarray:
    """Tokens with the temporal structure of codec codes: runs of repeated values."""
    rng = np.random.default_rng(seed)
    out = np.empty((b, k, t), dtype=np.int64)
    for i in range(b):
        for j in range(k):
            run = rng.integers(0, card)
            for s in range(t):
                if rng.random() < 0.25:
                    run = rng.integers(0, card)
                out[i, j, s] = run
    return out


def step_trace(tokens: np.ndarray, targets: np.ndarray | None = None, mask: np.ndarray | None = None,
               padding: np.ndarray | None = None, card: int = 64, loss: float | None = None, **extra: Any):
    b, k, t = tokens.shape
    targets = tokens if targets is None else targets
    mask = np.ones((b, k, t), dtype=bool) if mask is None else mask
    padding = np.ones((b, t), dtype=bool) if padding is None else padding
    logits = np.zeros((b, k, t, card), dtype=np.float32)
    stages = [("tokens", tokens, {"cardinality": card}), ("mask.padding", padding), ("targets", targets),
              ("logits", logits), ("mask.loss", mask),
              ("loss", float(np.log(card)) if loss is None else loss),
              ("loss.per_codebook", np.full(k, np.log(card) if loss is None else loss, dtype=np.float32))]
    stages += [(name, value) for name, value in extra.items()]
    return make_trace(*stages)


def hf_step_trace(tokens: np.ndarray, valid_frames: list[int] | None = None, card: int = 64,
                  labels_edit: Any = None, mask_from_labels: bool = True, tap_pattern: bool = True,
                  delays: list[int] | None = None, model_delay: list[int] | None = None):
    """A step laid out as Hugging Face MusicGen trains: the delay pattern (codebook k late by k),
    labels [B, T', K] with -100 on the pattern's empty positions and past each clip's valid frames,
    logits [B*K, T', V], loss mask [B, K, T'] = labels != -100, padding mask [B, T] in frame time."""
    b, k, t = tokens.shape
    delays = list(range(k)) if delays is None else delays
    tp = t + max(delays)
    pad_id = card
    pattern = np.full((b, k, tp), pad_id, dtype=np.int64)
    for j, d in enumerate(delays):
        pattern[:, j, d : d + t] = tokens[:, j]
    valid = np.array(valid_frames if valid_frames is not None else [t] * b)
    frame = np.arange(tp)[None, None, :] - np.array(delays)[None, :, None]
    keep = (pattern != pad_id) & (frame < valid[:, None, None])
    labels = np.where(keep, pattern, -100).transpose(0, 2, 1).copy()  # [B, T', K]
    if labels_edit is not None:
        labels = labels_edit(labels)
    mask = (labels != -100).transpose(0, 2, 1) if mask_from_labels else keep
    padding = np.arange(t)[None, :] < valid[:, None]
    stages = [("tokens", tokens, {"cardinality": card}), ("mask.padding", padding)]
    if tap_pattern:
        meta = {"special": pad_id} | ({"model_delay": model_delay} if model_delay is not None else {})
        stages.append(("tokens.pattern", pattern, meta))
    stages += [("targets", labels, {"ignore_index": -100}),
               ("logits", np.zeros((b * k, tp, card), dtype=np.float32)), ("mask.loss", mask),
               ("loss", float(np.log(card))), ("loss.per_codebook", np.full(k, np.log(card), dtype=np.float32))]
    return make_trace(*stages)
