"""Log-mel spectrograms for comparing audio by content (numpy/scipy only)."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["mel_filterbank", "log_mel", "spectral_similarity"]


@functools.lru_cache(maxsize=16)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 30.0) -> np.ndarray:
    """Triangular mel filters [n_mels, n_fft // 2 + 1] (HTK mel scale)."""

    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    fmax = sample_rate / 2.0
    mels = np.linspace(hz_to_mel(np.array(fmin)), hz_to_mel(np.array(fmax)), n_mels + 2)
    hz = mel_to_hz(mels)
    bins = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    fb = np.zeros((n_mels, bins.size))
    for i in range(n_mels):
        lo, c, hi = hz[i], hz[i + 1], hz[i + 2]
        fb[i] = np.clip(np.minimum((bins - lo) / max(c - lo, 1e-9), (hi - bins) / max(hi - c, 1e-9)), 0, None)
    return fb


def log_mel(audio: np.ndarray, sample_rate: int, n_fft: int = 1024, hop: int = 256, n_mels: int = 40) -> np.ndarray:
    """Log-mel power [n_mels, frames] of mono audio [T] (or [C, T], averaged), floored at -100 dB."""
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim > 1:
        x = x.mean(axis=0)
    from scipy import signal  # here, not at the top: importing scipy.signal takes a second (`listen`'s start-up)

    x = np.nan_to_num(x)
    if x.size < n_fft:
        x = np.pad(x, (0, n_fft - x.size))
    _, _, z = signal.stft(x, fs=sample_rate, nperseg=n_fft, noverlap=n_fft - hop, boundary=None, padded=False)
    power = np.abs(z) ** 2
    mel = mel_filterbank(sample_rate, n_fft, n_mels) @ power
    return 10.0 * np.log10(np.maximum(mel, 1e-10))


def spectral_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two log-mel spectrograms over their common frames (time-aligned)."""
    n = min(a.shape[-1], b.shape[-1])
    x, y = a[:, :n].ravel(), b[:, :n].ravel()
    x, y = x - x.mean(), y - y.mean()
    denom = float(np.sqrt((x @ x) * (y @ y)))
    return float(x @ y / denom) if denom > 0 else 0.0
