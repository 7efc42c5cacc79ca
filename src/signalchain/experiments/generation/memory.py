"""Nearest training example to each generated sample: is the model replaying what it was trained on?

Fingerprints are log-mel spectrograms (audio/features.py) at 50 frames/s; two clips are compared by
the best correlation of their spectrograms over time shifts (a copy may start anywhere).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...audio.features import log_mel
from ...audio.resample import resample
from ...records.generation import NearestExample
from ...stats import as_batch_audio

__all__ = ["fingerprint", "copy_similarity", "nearest_examples", "examples_from_pipeline"]

RATE = 16000  # fingerprints are taken at one rate so that mel bands mean the same Hz everywhere


def fingerprint(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Log-mel [32, F] of the mono mix, per-band standardised (a gain change is no difference)."""
    x = np.asarray(audio, dtype=np.float64)
    x = x.mean(axis=0) if x.ndim > 1 else x
    x = resample(x, int(sample_rate), RATE, method="poly")
    m = log_mel(x, RATE, n_fft=1024, hop=RATE // 50, n_mels=32)
    return (m - m.mean(1, keepdims=True)) / (m.std(1, keepdims=True) + 1e-6)


def copy_similarity(a: np.ndarray, b: np.ndarray, min_overlap: float = 0.6) -> float:
    """Best mean correlation of fingerprints `a` [M, Fa] and `b` [M, Fb] over shifts keeping at least
    `min_overlap` of the shorter one."""
    short, long_ = (a, b) if a.shape[1] <= b.shape[1] else (b, a)
    fs, fl = short.shape[1], long_.shape[1]
    need = max(2, int(min_overlap * fs))
    best = -1.0
    for shift in range(-(fs - need), fl - need + 1):
        lo, hi = max(0, shift), min(fl, shift + fs)
        if hi - lo < need:
            continue
        x, y = short[:, lo - shift : hi - shift], long_[:, lo:hi]
        x, y = x - x.mean(), y - y.mean()
        d = float(np.sqrt((x * x).sum() * (y * y).sum()))
        if d > 0:
            best = max(best, float((x * y).sum() / d))
    return best


def nearest_examples(samples: np.ndarray, sample_rate: int, examples: list[tuple[str, np.ndarray, int]]
                     ) -> tuple[list[NearestExample], list[int]]:
    """For each generated sample [B, C, T]: the most similar example, and its index in `examples`."""
    prints = [fingerprint(x, sr) for _, x, sr in examples]
    out, which = [], []
    for i, x in enumerate(as_batch_audio(samples)):
        fp = fingerprint(x, sample_rate)
        if fp.shape[1] < 4 or not prints:
            continue
        sims = np.array([copy_similarity(fp, q) for q in prints])
        order = np.argsort(-sims)
        second = float(sims[order[1]]) if len(order) > 1 else None
        out.append(NearestExample(sample=i, example=examples[order[0]][0], similarity=float(sims[order[0]]),
                                  audio_similarity_second=second))
        which.append(int(order[0]))
    return out, which


def examples_from_pipeline(pipeline: Any, limit: int) -> list[tuple[str, np.ndarray, int]]:
    """Up to `limit` of `training_examples()`, evenly spread, as (label, audio [C, T], rate) when the
    examples expose audio (an `.audio` array or an "audio" key) and a rate."""
    items = list(pipeline.training_examples())
    if not items or limit <= 0:
        return []
    picks = np.linspace(0, len(items) - 1, min(limit, len(items))).round().astype(int)
    out = []
    for i in dict.fromkeys(picks.tolist()):
        item = items[i]
        get = item.get if isinstance(item, dict) else lambda k, it=item: getattr(it, k, None)
        audio, sr = get("audio"), get("sample_rate") or getattr(pipeline, "sample_rate", None)
        if audio is None or not sr:
            continue
        label = get("caption") or f"training example {i}"
        out.append((str(label), np.asarray(audio, dtype=np.float32), int(sr)))
    return out
