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
