"""Robust audio fingerprints: find the same recording after gain, resampling, lossy coding, a
shifted crop or added noise, and tell it from another take of similar music.

Two levels, because searching must be cheap and deciding must be exact:

- `frames` `[BANDS, N]`: a 24-band log-mel envelope at 62.5 frames/s (8 kHz mono, 64 ms FFT,
  16 ms hop), in dB below the clip's loudest cell and floored 50 dB down. Gain drops out (the
  floor is relative), resampling and lossy coding barely touch the band below 4 kHz, and noise
  well below the music stays under the floor.
- `windows` `[W, DIM]`: one L2-normalised vector per 1.5 s window (0.5 s hop) for the nearest-
  neighbour index. Each holds, per band group, the magnitude of the envelope's modulation
  spectrum (0.67-5.3 Hz: note and beat rates) plus the group's mean level. A magnitude spectrum
  ignores where the window starts, so a crop shifted by any amount still lands near its source.

`align(a, b)` then decides: the per-band-centred correlation of the two envelopes at the best lag,
with the overlap it covers. Copies score ≥ 0.95; different clips of the same instrument, key and
pattern stay below ~0.86 (measured in benchmarks/bench_audit.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..errors import SignalchainError
from .features import mel_filterbank
from .resample import resample

__all__ = ["Fingerprint", "Alignment", "FRAME_RATE", "DIM", "BANDS", "MIN_RATE", "MAX_RATE", "fingerprint",
           "frame_features", "window_embeddings", "align", "audio_hash", "mono", "resampled_length", "check_rate"]

RATE = 8000  # fingerprints look at 0-4 kHz: what survives every re-encode and resampling
N_FFT = 512
HOP = 128
FRAME_RATE = RATE / HOP  # 62.5 frames per second
BANDS = 24
RANGE_DB = 50.0
WINDOW = 94  # frames: 1.5 s
WINDOW_HOP = 31  # frames: 0.5 s
GROUPS = 8  # band groups in a window vector (3 bands each)
MOD_BINS = 8  # modulation bins 1..8 of a 1.5 s window: 0.67-5.3 Hz
DIM = GROUPS * MOD_BINS + GROUPS
#: Sample rates a fingerprint accepts. Resampling to RATE allocates RATE / rate samples per input
#: sample, so a header claiming 1 Hz would turn 64 KB of audio into gigabytes; no music is below.
MIN_RATE = 1000
MAX_RATE = 768000

_FB = mel_filterbank(RATE, N_FFT, BANDS, 60.0).astype(np.float32)
_STFT_WINDOW = np.hanning(N_FFT).astype(np.float32)
_MOD_WINDOW = np.hanning(WINDOW).astype(np.float32)


@dataclass
class Fingerprint:
    frames: np.ndarray | None  # [BANDS, N] float16 dB; None for digital silence
    windows: np.ndarray  # [W, DIM] float32, rows of unit norm; [0, DIM] when silent
    seconds: float

    @property
    def silent(self) -> bool:
        return self.frames is None


@dataclass(frozen=True)
class Alignment:
    similarity: float  # per-band-centred correlation over the overlap, in [-1, 1]
    lag_seconds: float  # where b starts inside a (negative: b starts before a)
    overlap_seconds: float
    coverage: float  # overlap / the shorter clip's length
    spread_seconds: float = 0.0  # how far the best lag wanders across the overlap (0 for a copy)


def mono(audio: np.ndarray) -> np.ndarray:
    """The channel average `[T]` of `[C, T]` (or `[T]`) audio, float32, non-finite samples zeroed."""
    x = np.asarray(audio, dtype=np.float32)
    x = x.mean(axis=0) if x.ndim == 2 else x.reshape(-1)
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if not np.isfinite(x).all() else x


def audio_hash(audio: np.ndarray) -> str:
    """Exact identity of decoded audio: sha1 of its float32 samples and shape (-0.0 counted as 0.0:
    reductions such as a channel mean turn one into the other)."""
    x = np.asarray(audio, dtype=np.float32) + np.float32(0.0)  # a C-contiguous copy; -0.0 + 0.0 = 0.0
    h = hashlib.sha1(f"{x.shape}".encode())
    h.update(x.tobytes())
    return h.hexdigest()


def check_rate(sample_rate: float) -> None:
    """`SignalchainError` unless MIN_RATE ≤ `sample_rate` ≤ MAX_RATE."""
    if not MIN_RATE <= sample_rate <= MAX_RATE:
        raise SignalchainError(f"sample rate {sample_rate} Hz is outside {MIN_RATE}-{MAX_RATE} Hz: "
                               "no fingerprint is made (resampling it would allocate from the header's claim)")


def resampled_length(samples: int, sample_rate: int) -> int:
    """Samples the resampling to RATE produces from `samples` at `sample_rate` (≤ 8 per input
    sample over the accepted rates): what the fingerprint allocates is planned from this."""
    check_rate(sample_rate)
    return -(-int(samples) * RATE // int(sample_rate))


def frame_features(audio: np.ndarray, sample_rate: int) -> np.ndarray | None:
    """The log-mel envelope `[BANDS, N]` (float32 dB in [-RANGE_DB, 0]); None for digital silence.

    `SignalchainError` for a rate outside MIN_RATE-MAX_RATE (see `check_rate`)."""
    check_rate(sample_rate)
    x = mono(audio)
    if sample_rate != RATE and x.size:
        x = resample(x, sample_rate, RATE, quality="LQ").astype(np.float32, copy=False)
    if x.size < N_FFT:
        x = np.pad(x, (0, N_FFT - x.size))
    n = 1 + (x.size - N_FFT) // HOP
    segments = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP][:n]  # [N, N_FFT]
    spec = np.fft.rfft(segments * _STFT_WINDOW, axis=1)
    power = spec.real**2 + spec.imag**2  # [N, N_FFT/2+1]
    mel = np.einsum("bf,nf->bn", _FB, power)  # einsum, not BLAS: a small product, no thread wake-ups
    top = float(mel.max())
    if not top > 1e-20:
        return None
    floor = top * 10.0 ** (-RANGE_DB / 10.0)
    return (10.0 * np.log10(np.maximum(mel, floor) / top)).astype(np.float32)


def window_embeddings(frames: np.ndarray | None) -> np.ndarray:
    """Shift-tolerant unit vectors `[W, DIM]`, one per 1.5 s window with a 0.5 s hop."""
    if frames is None:
        return np.zeros((0, DIM), dtype=np.float32)
    f = np.asarray(frames, dtype=np.float32)
    n = f.shape[1]
    if n < WINDOW:  # a short clip is one window; the padding sits at the band means (no modulation)
        f = np.concatenate([f, np.repeat(f.mean(axis=1, keepdims=True), WINDOW - n, axis=1)], axis=1)
        n = WINDOW
    starts = np.arange(0, n - WINDOW + 1, WINDOW_HOP)
    patches = np.lib.stride_tricks.sliding_window_view(f, WINDOW, axis=1)[:, starts]  # [BANDS, W, WINDOW]
    groups = patches.reshape(GROUPS, BANDS // GROUPS, len(starts), WINDOW).mean(axis=1)  # [G, W, WINDOW]
    level = groups.mean(axis=2)  # [G, W]
    centred = (groups - level[..., None]) * _MOD_WINDOW
    modulation = np.log1p(np.abs(np.fft.rfft(centred, axis=2))[..., 1 : MOD_BINS + 1])  # [G, W, MOD_BINS]
    mod = modulation.transpose(1, 0, 2).reshape(len(starts), -1)
    mod -= mod.mean(axis=1, keepdims=True)
    lev = level.T - level.T.mean(axis=1, keepdims=True)
    v = np.concatenate([mod, 0.5 * lev], axis=1)
    return (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)).astype(np.float32)


def fingerprint(audio: np.ndarray, sample_rate: int) -> Fingerprint:
    """Frames and window vectors of one clip `[C, T]` or `[T]`."""
    frames = frame_features(audio, sample_rate)
    seconds = np.asarray(audio).shape[-1] / float(sample_rate)
    return Fingerprint(None if frames is None else frames.astype(np.float16), window_embeddings(frames), seconds)


def _cumsum(x: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x, axis=1)], axis=1)


def align(a: np.ndarray, b: np.ndarray, min_overlap_seconds: float = 1.0) -> Alignment:
    """The lag of `b` inside `a` where their envelopes agree best, and how well.

    Correlation is computed per band with each band's mean over the overlap removed (so a shared
    instrument timbre alone does not count), summed over bands, at every lag with at least
    `min_overlap_seconds` of overlap (or the shorter clip, when shorter). FFT-based: O(N log N).
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = a.shape[1], b.shape[1]
    n = 1 << int(np.ceil(np.log2(na + nb)))
    lags = np.arange(-(nb - 1), na)  # b[t] sits on a[t + lag]
    xc = np.fft.irfft(np.fft.rfft(a, n, axis=1) * np.conj(np.fft.rfft(b, n, axis=1)), n, axis=1)[:, lags % n]
    t0, t1 = np.maximum(0, -lags), np.minimum(nb, na - lags)
    overlap = t1 - t0
    ca, ca2, cb, cb2 = _cumsum(a), _cumsum(a * a), _cumsum(b), _cumsum(b * b)
    sa, sa2 = ca[:, t1 + lags] - ca[:, t0 + lags], ca2[:, t1 + lags] - ca2[:, t0 + lags]
    sb, sb2 = cb[:, t1] - cb[:, t0], cb2[:, t1] - cb2[:, t0]
    m = np.maximum(overlap, 1)
    cov = (xc - sa * sb / m).sum(axis=0)
    var = np.maximum((sa2 - sa * sa / m).sum(axis=0), 0.0) * np.maximum((sb2 - sb * sb / m).sum(axis=0), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(var > 1e-9, cov / np.sqrt(var), 0.0)
    need = min(int(round(min_overlap_seconds * FRAME_RATE)), na, nb)
    r = np.where(overlap >= need, r, -1.0)
    # Repetitive music matches itself a bar later over a shorter overlap, sometimes a hair better:
    # among lags within 0.01 of the best, the one with the longest overlap is the alignment.
    near_best = np.flatnonzero(r >= r.max() - 0.01)
    i = int(near_best[np.argmax(overlap[near_best])])
    spread = _lag_spread(a, b, int(lags[i]))
    return Alignment(similarity=float(r[i]), lag_seconds=float(lags[i] / FRAME_RATE),
                     overlap_seconds=float(overlap[i] / FRAME_RATE), coverage=float(overlap[i] / min(na, nb)),
                     spread_seconds=spread / FRAME_RATE)


def _lag_spread(a: np.ndarray, b: np.ndarray, lag: int, segments: int = 3, search: int = 4) -> float:
    """Range (frames, sub-frame precision) of the best lag over `segments` stretches of the overlap.

    A copy keeps one lag throughout (spread ≤ 0.3 frames measured under every transformation);
    the same music played at a tempo 1 % apart drifts by 10 ms per second, about a frame over the
    clip. 0 when the overlap is too short to tell.
    """
    t0, t1 = max(0, -lag) + search, min(b.shape[1], a.shape[1] - lag) - search
    if t1 - t0 < segments * 16:
        return 0.0
    edges = np.linspace(t0, t1, segments + 1).astype(int)
    found = []
    for s, e in zip(edges[:-1], edges[1:]):
        bb = b[:, s:e] - b[:, s:e].mean(axis=1, keepdims=True)
        r = []
        for d in range(-search, search + 1):
            aa = a[:, s + lag + d : e + lag + d]
            aa = aa - aa.mean(axis=1, keepdims=True)
            den = float(np.sqrt((aa * aa).sum() * (bb * bb).sum()))
            r.append(float((aa * bb).sum()) / den if den > 0 else 0.0)
        k = int(np.argmax(r))
        frac = 0.0
        if 0 < k < len(r) - 1:  # parabolic interpolation of the peak
            curve = r[k - 1] - 2 * r[k] + r[k + 1]
            frac = 0.5 * (r[k - 1] - r[k + 1]) / curve if curve != 0 else 0.0
        found.append(k - search + frac)
    return float(max(found) - min(found))
