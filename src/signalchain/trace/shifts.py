"""Shifts between two token arrays: per-codebook delays, lags behind a start token, and what a
tapped `tokens.pattern` or `tokens.input` holds.

Two readings of one tap are common in real code (docs/taps.md): a *delay pattern* (codebook k of
frame t at step t + delay(k), unshifted) and *decoder inputs* (what the model reads: the same, moved
right by one behind a start token, as HF's `shift_tokens_right` makes them). Decoder inputs begin
with a constant column (the start token) and sit one step behind the targets they predict.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ids_to_bkt", "lag_agreement", "best_lags", "confident_delays", "starts_with_constant",
           "holds_decoder_inputs", "edge_delays", "CONFIDENT", "MARGIN"]

CONFIDENT = 0.9  # share of compared positions that must agree for a shift to be read at all
MARGIN = 0.05  # ... and by how much it must beat every other shift (a silence code agrees at any shift)


def ids_to_bkt(x: np.ndarray, b: int | None, k: int | None, t: int | None = None) -> tuple[np.ndarray, str] | None:
    """Integer ids laid as `[B, K, T]`, from `[B, K, T]`, `[B, T, K]` or `[B*K, T]` (HF's three
    layouts), with the layout read; `t` (the targets' time) settles `[B, K, T]` against `[B, T, K]`.
    None when the shape fits none of them for B and K."""
    s = x.shape
    if x.ndim == 3 and (b is None or s[0] == b) and k is not None:
        fits = [o for o, kk, tt in (("BKT", s[1], s[2]), ("BTK", s[2], s[1])) if kk == k]
        if len(fits) == 2 and t is not None:
            fits = [o for o in fits if (s[2] if o == "BKT" else s[1]) == t] or fits
        if fits:
            return (x, "BKT") if fits[0] == "BKT" else (np.swapaxes(x, 1, 2), "BTK")
        return None
    if x.ndim == 3 and k is None:
        return x, "BKT"
    if x.ndim == 2 and b and k and s[0] == b * k:
        return x.reshape(b, k, s[1]), "(BK)T"
    if x.ndim == 2 and (b is None or s[0] == b) and k in (None, 1):
        return x[:, None, :], "BT"
    return None


def lag_agreement(inputs: np.ndarray, targets: np.ndarray, mask: np.ndarray | None, k: int, lag: int) -> float | None:
    """Share of counted target positions t of codebook k where `inputs[:, k, t + lag] == targets[:, k, t]`
    (t + lag inside the inputs). None when nothing is compared."""
    tx, ty = inputs.shape[-1], targets.shape[-1]
    lo, hi = max(0, -lag), min(ty, tx - lag)
    if hi - lo < max(1, ty // 4):
        return None
    y = targets[:, k, lo:hi]
    m = mask[:, k, lo:hi] if mask is not None else np.ones(y.shape, bool)
    n = int(m.sum())
    if n == 0:
        return None
    return float(((inputs[:, k, lo + lag : hi + lag] == y) & m).sum() / n)


def best_lags(inputs: np.ndarray, targets: np.ndarray, mask: np.ndarray | None,
              lags: range) -> list[dict[int, float]]:
    """Per codebook, the agreement at each lag of `lags` (lags with nothing to compare left out)."""
    out = []
    for k in range(min(inputs.shape[1], targets.shape[1])):
        got = {lag: lag_agreement(inputs, targets, mask, k, lag) for lag in lags}
        out.append({lag: a for lag, a in got.items() if a is not None})
    return out


def confident_delays(frames: np.ndarray, delayed: np.ndarray, mask: np.ndarray | None = None,
                     frame_valid: np.ndarray | None = None, lo: int = -3,
                     hi: int | None = None) -> tuple[list[int], list[float]] | None:
    """Per codebook, the one shift d with `delayed[:, k, t + d] == frames[:, k, t]`, when it agrees in
    at least `CONFIDENT` of the compared positions and beats every other shift by `MARGIN` (codes that
    repeat, or silence, agree at many shifts: then no delay is read). `mask` [B, K, T'] limits the
    comparison to positions of `delayed` that count, `frame_valid` [B, T] or [B, K, T] to real frames.
    None when any codebook has no such shift."""
    if frames.ndim != 3 or delayed.ndim != 3 or frames.shape[:2] != delayed.shape[:2]:
        return None
    b, k_, t = frames.shape
    hi = hi if hi is not None else delayed.shape[-1] - t + 3
    valid = None  # real frames only, when the padding mask fits the frames
    if frame_valid is not None:
        fv = frame_valid.astype(bool)
        fv = np.broadcast_to(fv[:, None, :], (b, k_, fv.shape[-1])) if fv.ndim == 2 else fv
        valid = fv if fv.shape == frames.shape else None
    delays, scores = [], []
    for k in range(k_):
        got = {}
        for d in range(lo, hi + 1):
            a = _shift_agree(frames, delayed, mask, valid, k, d)
            if a is not None:
                got[d] = a
        if not got:
            return None
        best = max(got, key=lambda d: (got[d], -abs(d)))
        others = [a for d, a in got.items() if d != best]
        if got[best] < CONFIDENT or (others and max(others) > got[best] - MARGIN):
            return None
        delays.append(int(best))
        scores.append(got[best])
    return delays, scores


def _shift_agree(frames: np.ndarray, delayed: np.ndarray, mask: np.ndarray | None, valid: np.ndarray | None,
                 k: int, d: int) -> float | None:
    t, tp = frames.shape[-1], delayed.shape[-1]
    lo, hi = max(0, -d), min(t, tp - d)
    if hi - lo < max(1, t // 4):
        return None
    a = delayed[:, k, lo + d : hi + d]
    m = np.ones(a.shape, bool)
    if mask is not None:
        m &= mask[:, k, lo + d : hi + d]
    if valid is not None:
        m &= valid[:, k, lo:hi]
    n = int(m.sum())
    return float(((a == frames[:, k, lo:hi]) & m).sum() / n) if n else None


def starts_with_constant(ids: np.ndarray) -> bool:
    """Every codebook's first step holds one id across the batch (a start token), `ids` [B, K, T]."""
    if ids.ndim != 3 or ids.shape[-1] < 2:
        return False
    first = ids[:, :, 0]
    return bool((first == first[:1]).all())


def holds_decoder_inputs(x: np.ndarray, targets: np.ndarray, mask: np.ndarray | None) -> bool | None:
    """Is `x` [B, K, T] the targets moved right by one behind a start token (True), the targets at
    their own positions (False: a pattern, or inputs never shifted), or neither (None)?

    Read on the targets' own time axis (x as long as the targets, or one step longer)."""
    if x.shape[:2] != targets.shape[:2] or x.shape[-1] - targets.shape[-1] not in (0, 1):
        return None
    per_k = best_lags(x, targets, mask, range(0, 2))
    if not per_k or any(0 not in a or 1 not in a for a in per_k):
        return None
    if all(a[1] >= CONFIDENT and a[1] > a[0] for a in per_k) and starts_with_constant(x):
        return True
    if all(a[0] >= CONFIDENT and a[0] > a[1] for a in per_k):
        return False
    return None


def edge_delays(mask: np.ndarray) -> list[int] | None:
    """Where a delay pattern puts each codebook, read from the positions the loss counts alone
    (`mask` [B, K, T'] bool), for targets with no frame-time tokens beside them.

    A delay pattern leaves codebook k empty (ignored) for its first d(k) steps and its last
    D - d(k): over the batch, the first counted step of k is d(k) and the last is T' - 1 - (D - d(k)).
    Both edges must tell the same story (first + trailing gap the same for every codebook; padding
    after a short clip only widens every trailing gap alike), else None: nothing is read. The delays
    are relative to the earliest codebook (a loss that skips a prompt skips it in every codebook)."""
    if mask.ndim != 3 or mask.shape[1] < 2:
        return None
    counted = mask.any(axis=0)  # [K, T']
    if not counted.any(axis=1).all():
        return None
    first = counted.argmax(axis=1)  # [K]
    trailing = counted[:, ::-1].argmax(axis=1)  # [K] steps after the last counted one
    if len(set((first + trailing).tolist())) != 1:
        return None
    lo = int(first.min())
    return [int(f) - lo for f in first]
