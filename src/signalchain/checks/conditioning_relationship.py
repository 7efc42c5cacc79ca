"""Do the captions say anything about what they are paired with? Caption words against simple
descriptors of the audio and of the target tokens, scored against random pairings (a permutation
z-score); none near 3 means there is nothing for the condition to teach.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..findings import Finding
from ..records.conditioning import ConditionData
from .base import make
from .conditioning import CHECK, _examples, words

__all__ = ["association", "relationship", "judge_relationship"]


def association(row_words: list[set[str]], features: np.ndarray, permutations: int = 200) -> dict[str, float] | None:
    """How strongly caption words predict a feature matrix, against random pairings.

    For each word in enough captions, the largest standardised difference of any feature between
    examples with and without it; the statistic is the mean of the three largest. Recomputed with
    the captions permuted, it gives a z-score: near 0 when captions say nothing about the features.
    """
    keep = [i for i, f in enumerate(features) if np.isfinite(f).all()]
    n = len(keep)
    if n < 16:
        return None
    F = features[keep].astype(np.float64)
    F = F[:, F.std(axis=0) > 1e-9]
    if F.shape[1] == 0:
        return None
    F = (F - F.mean(axis=0)) / F.std(axis=0)
    counts = Counter(w for i in keep for w in row_words[i])
    vocab = sorted(w for w, c in counts.items() if max(3, 0.05 * n) <= c <= n - 3)
    if len(vocab) < 2:
        return None
    X = np.array([[w in row_words[i] for w in vocab] for i in keep], dtype=np.float64)  # [n, V]

    def stat(X: np.ndarray) -> float:
        n1 = X.sum(axis=0)[:, None]
        d = (X.T @ F / n1 - (1 - X).T @ F / (n - n1)) / np.sqrt(1 / n1 + 1 / (n - n1))  # [V, F]
        return float(np.sort(np.abs(d).max(axis=1))[-3:].mean())

    rng = np.random.default_rng(0)
    null = np.array([stat(X[rng.permutation(n)]) for _ in range(permutations)])
    observed = stat(X)
    return {"z": float((observed - null.mean()) / max(null.std(), 1e-9)), "observed": observed,
            "null_mean": float(null.mean()), "examples": n, "words": len(vocab)}


def relationship(data: ConditionData) -> dict[str, dict[str, float]]:
    """Caption words against the audio and against the target tokens they are paired with."""
    out = {}
    for view, attr in (("audio", "audio_features"), ("targets", "token_features")):
        rows, feats = [], []
        for b in data.batches:
            f = getattr(b, attr)
            if f is not None and len(f) == len(b.captions):
                rows += [set(words(c)) for c in b.captions]
                feats.append(f)
        if feats:
            a = association(rows, np.concatenate(feats))
            if a is not None:
                out[view] = a
    return out


def judge_relationship(data: ConditionData, measured: dict[str, dict[str, float]] | None = None) -> list[Finding]:
    """No caption word predicts the audio or the targets better than random pairings: nothing to learn."""
    views = measured if measured is not None else relationship(data)
    if not views or max(v["z"] for v in views.values()) >= 3.0:
        return []
    n = max(int(v["examples"]) for v in views.values())
    strong = n >= 32 and max(v["z"] for v in views.values()) < 2.0
    told = ", ".join(f"word-{k} z = {v['z']:.1f}" for k, v in views.items())
    return [make("condition.no_relationship", "error" if strong else "warning", "caption",
                 f"caption words predict the paired {' and '.join(views)} no better than random pairings ({told} over "
                 f"{n} examples; a caption that describes its {'audio' if 'audio' in views else 'music'} gives z well "
                 "above 3)", CHECK,
                 hint=f"captions and {_examples(data)} are joined wrongly (by row position after a shuffle, by a stale "
                      "id map); listen to a few examples beside their captions (`signalchain inspect`) and check the "
                      "join key",
                 **{f"z_{k}": v["z"] for k, v in views.items()}, examples=n)]
