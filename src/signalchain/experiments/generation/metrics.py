"""Numbers for generated (and training) token sequences and audio: how repetitive, how diverse, and
how the sampler turned the model's predictions into tokens. Pure numpy; no model, no pipeline.

Tokens are codec codes `[B, K, T]` (rows, codebooks, frames); a *frame* is the K codes of one time step.
"""

from __future__ import annotations

import numpy as np

from ...audio.features import log_mel
from ...records.generation import SamplerFit, TokenStats
from ...records.symbolic import EosStats

__all__ = ["token_stats", "sampler_fit", "guidance_coefficient", "frame_entropy", "audio_loop",
           "logit_entropy", "eos_stats"]

NGRAM = 4  # repeated 4-frame phrases: long enough not to count sustained notes as loops


def _frames(codes: np.ndarray) -> np.ndarray:
    """[B, K, T] -> [B, T] ids, one per distinct frame (all K codes equal <=> same id)."""
    b, k, t = codes.shape
    flat = codes.transpose(0, 2, 1).reshape(b * t, k)
    _, ids = np.unique(flat, axis=0, return_inverse=True)
    return ids.reshape(b, t)


def _longest_repeat(row: np.ndarray) -> int:
    """Length of the longest span of frames that occurs twice in `row` (the copies may overlap)."""
    best = 0
    for lag in range(1, len(row)):
        eq = np.concatenate([[0], (row[lag:] == row[:-lag]).astype(np.int8), [0]])
        edges = np.flatnonzero(np.diff(eq))  # run starts and ends, alternating
        if edges.size:
            best = max(best, int((edges[1::2] - edges[::2]).max()))
    return best


def frame_entropy(codes: np.ndarray, valid: np.ndarray | None = None) -> float:
    """Mean over codebooks of the entropy (nats) of each row's tokens: the variety *within* an example."""
    valid = np.ones(codes.shape[::2], bool) if valid is None else valid  # [B, T]
    vals = []
    for b in range(codes.shape[0]):
        for k in range(codes.shape[1]):
            x = codes[b, k][valid[b]]
            if x.size:
                _, c = np.unique(x, return_counts=True)
                p = c / c.sum()
                vals.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(vals)) if vals else 0.0


def token_stats(codes: np.ndarray, frame_rate: float | None = None) -> TokenStats:
    """Repetition and diversity of token sequences `[B, K, T]`."""
    codes = np.asarray(codes)
    b, k, t = codes.shape
    entropy = []
    for j in range(k):  # pooled over rows: how many different codes each codebook uses
        _, c = np.unique(codes[:, j], return_counts=True)
        p = c / c.sum()
        entropy.append(float(-(p * np.log(p)).sum()))
    ids = _frames(codes)
    grams = [tuple(r[i : i + NGRAM]) for r in ids for i in range(t - NGRAM + 1)]
    ngram_rep = 1.0 - len(set(grams)) / len(grams) if grams else 0.0
    longest = max((_longest_repeat(r) for r in ids), default=0) / max(t, 1)
    same_as_previous = float((ids[:, 1:] == ids[:, :-1]).mean()) if t > 1 else 0.0
    # Loop period: the lag L >= 2 at which most frames equal the frame L steps earlier.
    period, strength = 0, 0.0
    for lag in range(2, max(2, t // 2) + 1):
        if lag >= t:
            break
        share = float((ids[:, lag:] == ids[:, :-lag]).mean())
        if share > strength + 1e-9:
            period, strength = lag, share
    seconds = period / frame_rate if frame_rate and period else None
    return TokenStats(rows=b, frames=t, entropy=entropy, ngram_repetition=float(ngram_rep),
                      longest_repeat=float(longest), same_as_previous=same_as_previous,
                      loop_period=period, loop_strength=strength, loop_seconds=seconds,
                      distinct_frames=int(ids.max() + 1) if ids.size else 0,
                      within_entropy=frame_entropy(codes))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def logit_entropy(logits: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Mean entropy (nats) of softmax(logits) over positions `[..., C]` (finite rows, `mask` True)."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1, logits.shape[-1])
    keep = np.isfinite(z).all(-1)
    if mask is not None:
        keep &= np.broadcast_to(mask, logits.shape[:-1]).reshape(-1)
    if not keep.any():
        return float("nan")
    lp = _log_softmax(z[keep])
    return float(-(np.exp(lp) * lp).sum(-1).mean())


_TAUS = np.exp(np.linspace(np.log(0.005), np.log(5.0), 100))


def sampler_fit(logits: np.ndarray, tokens: np.ndarray, max_rows: int = 4000) -> SamplerFit:
    """How the sampler chose `tokens [N]` from the `logits [N, C]` it was given.

    Faithful sampling (temperature 1, no truncation) picks the top token about as often as the
    distribution says (`top1` ≈ `top1_expected`). Greedy picks it always. A low temperature fits a
    small effective temperature. Top-k/top-p truncation never picks beyond some rank or mass while a
    softmax at the fitted temperature would have: `beyond_expected` such tokens, none seen.
    """
    g = np.asarray(logits, dtype=np.float64).reshape(-1, logits.shape[-1])
    x = np.asarray(tokens).reshape(-1)
    # NaN marks a position nothing was sampled at; -inf a token a logits processor ruled out.
    keep = ~np.isnan(g).any(-1) & (x >= 0) & (x < g.shape[-1])
    g, x = g[keep][:max_rows], x[keep][:max_rows]
    n = len(x)
    if n == 0:
        return SamplerFit(n=0)
    finite = np.isfinite(g)
    top = np.where(finite, g, -np.inf).max(-1, keepdims=True)
    # A token more than 50 nats under the best has probability < 1e-21: a processor ruled it out.
    support = float((finite & (g > top - 50.0)).sum(-1).mean()) / g.shape[-1]
    g = np.where(finite, g, top - 1e4)
    gx = np.take_along_axis(g, x[:, None], 1)[:, 0]
    rank = 1 + (g > gx[:, None]).sum(1)
    lp = _log_softmax(g)
    p = np.exp(lp)
    fit = SamplerFit(n=n, top1=float((rank == 1).mean()), top1_expected=float(p.max(1).mean()),
                     entropy=float(-(p * lp).sum(1).mean()),
                     surprisal=float(-np.take_along_axis(lp, x[:, None], 1).mean()),
                     max_rank=int(rank.max()), support=support)
    r = fit.max_rank
    if r < 2:
        return fit  # every pick was the top token: no temperature to fit
    gs = -np.sort(-g, axis=1)  # [N, C] descending

    def loglik(tau: float) -> float:
        # Likelihood of the picks *within the top r*: what a truncated sampler still does faithfully.
        z = gs[:, :r] / tau
        zmax = z.max(1)
        return float((gx / tau - zmax - np.log(np.exp(z - zmax[:, None]).sum(1))).sum())

    lls = [loglik(t) for t in _TAUS]
    tau = float(_TAUS[int(np.argmax(lls))])
    q = np.exp(_log_softmax(gs / tau))  # [N, C] at the fitted temperature
    before = np.cumsum(q, 1) - q  # mass of strictly better tokens
    picked_before = np.take_along_axis(before, (rank - 1)[:, None], 1)[:, 0]
    mass = float(picked_before.max())
    fit.temperature = tau
    fit.beyond_rank_expected = float(q[:, r:].sum())
    fit.max_mass_before = mass
    fit.beyond_mass_expected = float((q * (before > mass + 1e-12)).sum())
    return fit


def guidance_coefficient(guided: np.ndarray, cond: np.ndarray, uncond: np.ndarray) -> float | None:
    """The c in guided = uncond + c * (cond - uncond), by least squares over finite positions.

    Logits are centred per position first (softmax ignores a constant shift).
    """
    keep = np.isfinite(guided).all(-1) & np.isfinite(cond).all(-1) & np.isfinite(uncond).all(-1)
    if not keep.any():
        return None
    g, c, u = (np.asarray(a, dtype=np.float64)[keep] for a in (guided, cond, uncond))
    g, c, u = (a - a.mean(-1, keepdims=True) for a in (g, c, u))
    d = c - u
    denom = float((d * d).sum())
    return float(((g - u) * d).sum() / denom) if denom > 1e-12 else None


def audio_loop(audio: np.ndarray, sample_rate: int, min_seconds: float = 0.1) -> dict[str, float]:
    """Self-similarity of spectral frames of mono audio `[T]` or `[C, T]` (50 frames/s log-mel).

    Returns the mean cosine similarity between frames (`self_similarity`, high for static or looping
    audio), and the lag with the strongest frame autocorrelation past `min_seconds` (`loop_seconds`,
    `loop_strength`).
    """
    hop = max(1, sample_rate // 50)
    m = log_mel(audio, sample_rate, n_fft=min(1024, 4 * hop), hop=hop, n_mels=32)  # [M, F]
    f = m.shape[1]
    v = m - m.mean(0, keepdims=True)
    v = v / (np.linalg.norm(v, axis=0, keepdims=True) + 1e-9)
    sim = v.T @ v
    off = sim[~np.eye(f, dtype=bool)] if f > 1 else np.array([1.0])
    z = (m - m.mean(1, keepdims=True)) / (m.std(1, keepdims=True) + 1e-6)
    lo = max(1, int(round(min_seconds * 50)))
    best_lag, best = 0, 0.0
    for lag in range(lo, f // 2 + 1):
        r = float((z[:, lag:] * z[:, : f - lag]).mean())
        if r > best:
            best_lag, best = lag, r
    return {"self_similarity": float(off.mean()), "loop_seconds": best_lag / 50.0, "loop_strength": best}


def eos_stats(codes: np.ndarray, eos_id: int, logits: np.ndarray | None = None) -> EosStats:
    """What a run did with EOS: rows that emitted it (ids `[B, 1, T]`), and from the logits the sampler
    picked from (`[B, 1, T, V]`, NaN where nothing was sampled) its EOS probability at each sampled step.
    A probability of exactly 0 (float64 softmax) is a mask: no model logit lies 745 nats below the best."""
    rows = int(codes.shape[0])
    emitted = int((codes == eos_id).reshape(rows, -1).any(axis=1).sum())
    out = EosStats(eos_id=int(eos_id), rows=rows, emitted=emitted, length=int(codes.shape[-1]))
    if logits is None or logits.ndim != 4 or logits.shape[:3] != codes.shape or not 0 <= eos_id < logits.shape[-1]:
        return out
    z = np.asarray(logits, dtype=np.float64).reshape(-1, logits.shape[-1])
    z = z[~np.isnan(z).any(axis=1)]  # sampled steps only (BOS, prompt and after EOS are NaN)
    z = z[np.isfinite(z.max(axis=1))]
    if not len(z):
        return out
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z[:, eos_id]) / np.exp(z).sum(axis=1)
    out.steps, out.zero_steps = int(len(p)), int((p == 0).sum())
    out.max_probability, out.expected = float(p.max()), float(p.sum())
    out.log_p_none = float(np.log1p(-np.minimum(p, 1 - 1e-12)).sum())
    return out
