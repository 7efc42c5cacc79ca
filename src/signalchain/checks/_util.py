"""Small numeric helpers shared by checks (no torch, no I/O)."""

from __future__ import annotations

import numpy as np

from ..trace import Trace

__all__ = ["value", "as_bool_mask", "unigram_entropy", "temporal_mutual_information", "shift_agreement"]


def value(trace: Trace, name: str) -> np.ndarray | None:
    """The value of a stage as an array, or None when absent or recorded without values."""
    rec = trace.get(name)
    if rec is None or rec.value is None:
        return None
    return np.asarray(rec.value)


def as_bool_mask(mask: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """Broadcast a loss/padding mask to `shape` ([B, K, T]); all True when there is none.

    A mask whose shape cannot broadcast is cut or padded (with False) to `shape`: the shape
    disagreement itself is reported by `judge_shapes`, and the other checks still get an answer.
    """
    if mask is None:
        return np.ones(shape, dtype=bool)
    m = mask.astype(bool)
    if m.ndim == len(shape) - 1:  # [B, T] -> [B, 1, T]
        m = m[:, None, :]
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        out = np.zeros(shape, dtype=bool)
        if m.ndim != len(shape):
            return out
        src = m[tuple(slice(0, min(a, b)) for a, b in zip(m.shape, shape))]
        src = np.broadcast_to(src, tuple(min(a, b) if a != 1 else b for a, b in zip(src.shape, shape)))
        out[tuple(slice(0, n) for n in src.shape)] = src
        return out


def unigram_entropy(tokens: np.ndarray, mask: np.ndarray) -> float:
    """Entropy (nats) of the token distribution over valid positions, averaged over codebooks [B, K, T]."""
    out = []
    for k in range(tokens.shape[1]):
        vals = tokens[:, k][mask[:, k]]
        if vals.size == 0:
            continue
        _, counts = np.unique(vals, return_counts=True)
        p = counts / counts.sum()
        out.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(out)) if out else 0.0


def temporal_mutual_information(tokens: np.ndarray) -> float:
    """Mean over codebooks of I(x_t; x_{t+1}) in nats, with a shuffled-order baseline subtracted.

    Codec tokens of real audio are strongly predictable from the previous frame; random ids are not.
    The baseline (same tokens, time order shuffled) removes the small-sample bias of the estimate.
    """
    rng = np.random.default_rng(0)

    def mi(x: np.ndarray) -> float:
        a, b = x[:, :-1].ravel(), x[:, 1:].ravel()
        if a.size == 0:
            return 0.0
        _, ai = np.unique(a, return_inverse=True)
        _, bi = np.unique(b, return_inverse=True)
        joint = np.zeros((ai.max() + 1, bi.max() + 1))
        np.add.at(joint, (ai, bi), 1.0)
        joint /= joint.sum()
        pa, pb = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
        nz = joint > 0
        return float((joint[nz] * np.log(joint[nz] / (pa @ pb)[nz])).sum())

    vals = []
    for k in range(tokens.shape[1]):
        x = tokens[:, k]
        shuffled = x[:, rng.permutation(x.shape[1])]
        vals.append(mi(x) - mi(shuffled))
    return float(np.mean(vals)) if vals else 0.0


def shift_agreement(targets: np.ndarray, tokens: np.ndarray, mask: np.ndarray, shift: int) -> np.ndarray:
    """Per codebook, the share of valid positions where targets[..., t] == tokens[..., t + shift]."""
    T = targets.shape[-1]
    lo, hi = max(0, -shift), min(T, T - shift)
    if hi <= lo:
        return np.zeros(targets.shape[1])
    a = targets[..., lo:hi]
    b = tokens[..., lo + shift : hi + shift]
    m = mask[..., lo:hi]
    eq = (a == b) & m
    denom = m.sum(axis=(0, 2))
    return np.where(denom > 0, eq.sum(axis=(0, 2)) / np.maximum(denom, 1), 0.0)
